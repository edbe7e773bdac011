"""The step records of an Anthropic Messages or OpenAI Responses call, translated or passed through.

A step holds the normalised messages and the protocol's name; ``raw`` keeps the
agent's own request and the answer it got, so a Responses chain can be rebuilt
from the pool after a restart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentworld import records
from agentworld.proxy.adapters.openai import CHAT
from agentworld.proxy.sse import MALFORMED
from agentworld.proxy.translate import context_window
from agentworld.proxy.translate.chat_form import name_calls

if TYPE_CHECKING:
    from agentworld.proxy.adapters.base import Exchange
    from agentworld.proxy.adapters.translated import TranslatedAdapter


def step(
    x: Exchange,
    *,
    status: str = "ok",
    response: dict[str, Any] | None = None,
    tokens: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
    raw_response: Any = None,
) -> dict[str, Any]:
    """The step record of this call; ``raw`` keeps the agent's own request and answer."""
    call = x.call
    return records.make_step(
        **call.trajectory.common(),
        index=call.index,
        protocol=x.adapter.protocol,
        policy_version=call.policy_version,
        timings=call.timings(),
        metadata=call.metadata or None,
        request=x.request_record,
        response=response,
        tokens=tokens,
        status=status,
        error=error,
        raw={"request": x.body, "response": raw_response},
    )


def _partial_answer(
    adapter: TranslatedAdapter, x: Exchange, partial: Any
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(response, tokens) for what arrived before a failure, if anything did."""
    if not isinstance(partial, dict):
        return None, None
    try:
        if x.translate:
            got = CHAT.choices(partial)
            return (got[0][1], got[0][2]) if got else (None, None)
        return adapter.response_record(partial), None
    except MALFORMED:  # what arrived is of the wrong shape: the step has the error alone
        return None, None


def failed_steps(
    adapter: TranslatedAdapter, x: Exchange, status: str, error: dict[str, Any], partial: Any
) -> list[dict[str, Any]]:
    """The step of a call that failed or was cancelled, with what arrived before."""
    response, tokens = _partial_answer(adapter, x, partial)
    return [step(x, status=status, response=response, tokens=tokens, error=error)]


def ok_step(
    adapter: TranslatedAdapter, x: Exchange, obj: dict[str, Any], proto: Any = None
) -> tuple[dict[str, Any], Any, list[dict[str, Any]]]:
    """The ok step for an upstream answer ``obj``, the protocol object the agent gets
    (``proto`` when the stream already made it), and the thread's replies. The answer is
    kept for a later ``previous_response_id`` (Responses)."""
    if x.translate:
        name_calls(obj, adapter.call_prefix)
        got = CHAT.choices(obj)
        if not got:
            raise ValueError("the chat answer has no choices")
        _, response, tokens = got[0]
        if proto is None:
            window = context_window.clamped(x.call)
            proto = adapter.from_chat(obj, x.body, x.rid, tokens, window, x.history)
        if isinstance(obj.get("id"), str):
            x.call.metadata["upstream_id"] = obj["id"]
    else:
        proto = obj
        response, tokens = adapter.response_record(obj), None
    if isinstance(proto, dict) and isinstance(proto.get("id"), str):
        response["id"] = proto["id"]
    rec = step(x, response=response, tokens=tokens, raw_response=proto)
    adapter.remember(x.chains, x.call.trajectory.id, x.body, proto)
    message = response.get("message") if response else None
    return rec, proto, [message] if message else []
