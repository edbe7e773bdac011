"""What every Anthropic / Responses call shares: its context, its step records, its errors,
and the order of recording and answering that the durability mode promises."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from agentworld import records
from agentworld.proxy.adapters.openai import CHAT
from agentworld.proxy.adapters.translated import TRANSLATE, ProtocolAdapter
from agentworld.proxy.calls import WRITE_ERRORS, add_continuations, step_headers
from agentworld.proxy.recorder import Call, RecordFailed, mark_left
from agentworld.proxy.sse import MALFORMED
from agentworld.proxy.state import State
from agentworld.proxy.translate import context_window
from agentworld.proxy.translate.chat_form import name_calls
from agentworld.proxy.translate.response_chains import ResponseChains
from agentworld.proxy.upstream_faults import Fault


@dataclass
class Ctx:
    """One call in flight: what the agent asked, where it went, and what to record."""

    st: State
    chains: ResponseChains
    adapter: ProtocolAdapter
    call: Call
    body: dict[str, Any]
    mode: str
    rid: str  # the protocol object id a translated answer gets
    prompt_key: bytes | None
    request_record: dict[str, Any]
    history: list[Any]  # the items a previous_response_id stands for (Responses)
    seq: int = 0  # last Responses sequence_number seen (pass-through error events continue it)

    @property
    def translate(self) -> bool:
        return self.mode == TRANSLATE


def error_response(
    adapter: ProtocolAdapter,
    status: int,
    message: str,
    param: str | None = None,
    *,
    headers: dict[str, str] | None = None,
    code: str | None = None,
) -> web.Response:
    """An HTTP error in the protocol's own shape (with ``headers``: the upstream's relayed)."""
    return web.Response(
        status=status,
        body=adapter.error_body(status, message, param, code),
        content_type="application/json",
        headers=headers,
    )


def upstream_refused(ctx: Ctx, status: int, message: str) -> web.Response:
    """A translated call's upstream error in the protocol's shape; a prompt over the context
    window in the protocol's own words for it (agents compact their conversation on them)."""
    code = None
    over = context_window.overflow(message) if status == 400 else None
    if over is not None:
        message, code = ctx.adapter.overflow(*over)
    headers = {**step_headers(ctx.call), **ctx.call.relay}
    return error_response(ctx.adapter, status, message, headers=headers, code=code)


def step(
    ctx: Ctx,
    *,
    status: str = "ok",
    response: dict[str, Any] | None = None,
    tokens: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
    raw_response: Any = None,
) -> dict[str, Any]:
    """The step record of this call; ``raw`` keeps the agent's own request and answer."""
    call = ctx.call
    return records.make_step(
        **call.trajectory.common(),
        index=call.index,
        protocol=ctx.adapter.protocol,
        policy_version=call.policy_version,
        timings=call.timings(),
        metadata=call.metadata or None,
        request=ctx.request_record,
        response=response,
        tokens=tokens,
        status=status,
        error=error,
        raw={"request": ctx.body, "response": raw_response},
    )


def partial_answer(ctx: Ctx, partial: Any) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(response, tokens) for what arrived before a failure, if anything did."""
    if not isinstance(partial, dict):
        return None, None
    try:
        if ctx.translate:
            got = CHAT.choices(partial)
            return (got[0][1], got[0][2]) if got else (None, None)
        return ctx.adapter.response_record(partial), None
    except MALFORMED:  # what arrived is of the wrong shape: the step has the error alone
        return None, None


def failed(
    ctx: Ctx, status: str, error: dict[str, Any], partial: Any = None
) -> list[dict[str, Any]]:
    """The step of a call that failed or was cancelled, with what arrived before."""
    response, tokens = partial_answer(ctx, partial)
    return [step(ctx, status=status, response=response, tokens=tokens, error=error)]


def cancelled_step(ctx: Ctx, partial: Any = None) -> list[dict[str, Any]]:
    error = {"type": "client_disconnected", "message": "the agent disconnected mid-call"}
    return failed(ctx, "cancelled", error, partial)


async def record_fault(ctx: Ctx, fault: Fault, partial: Any = None) -> None:
    """Record an upstream failure; a recording failure here is only counted and logged."""
    ctx.st.stats.error("upstream")
    error = {"type": fault.type, "message": fault.message, "status": fault.status}
    try:
        await ctx.st.recorder.steps(ctx.call.trajectory, failed(ctx, "error", error, partial))  # type: ignore[union-attr]
    except RecordFailed:
        pass  # the agent already gets an error; the failure is counted and logged


async def answer_fault(ctx: Ctx, fault: Fault, headers: dict[str, str]) -> web.Response:
    """Record ``fault`` as the call's failed step; the agent's answer: the fault's status in
    the protocol's error shape, with ``headers`` (the step's, and what the upstream's relay)."""
    await record_fault(ctx, fault)
    return error_response(ctx.adapter, fault.status, fault.message, headers=headers)


def answer(ctx: Ctx, obj: dict[str, Any], proto: Any = None) -> tuple[list[dict[str, Any]], Any]:
    """The ok step for an upstream answer, and the protocol object the agent gets."""
    if ctx.translate:
        name_calls(obj, ctx.adapter.call_prefix)
        got = CHAT.choices(obj)
        if not got:
            raise ValueError("the chat answer has no choices")
        _, response, tokens = got[0]
        if proto is None:
            window = context_window.clamped(ctx.call)
            proto = ctx.adapter.from_chat(obj, ctx.body, ctx.rid, tokens, window, ctx.history)
        if isinstance(obj.get("id"), str):
            ctx.call.metadata["upstream_id"] = obj["id"]
    else:
        proto = obj
        response, tokens = ctx.adapter.response_record(obj), None
    if isinstance(proto, dict) and isinstance(proto.get("id"), str):
        response["id"] = proto["id"]
    rec = step(ctx, response=response, tokens=tokens, raw_response=proto)
    ctx.adapter.remember(ctx.chains, ctx.call.trajectory.id, ctx.body, proto)
    add_continuations(ctx.st, ctx.call, ctx.prompt_key, [rec])
    return [rec], proto


def error_event(ctx: Ctx, tr: Any, status: int, message: str) -> bytes:
    """The events that end a stream that failed: a translated stream's translator closes
    it as its protocol does; a pass-through one gets an error event (Responses events
    continue the upstream's sequence numbers)."""
    if tr is not None:
        return tr.fail(status, message)
    return ctx.adapter.error_event(status, message, ctx.seq + 1)


async def deliver(ctx: Ctx, recs: list[dict[str, Any]], send: Any, on_fail: Any) -> None:
    """Record and send in the order the durability mode promises (strict: record first)."""
    st = ctx.st
    assert st.recorder is not None
    if st.recorder.strict:
        try:
            await st.recorder.steps(ctx.call.trajectory, recs)
        except RecordFailed as exc:
            st.registry.retract(ctx.call.trajectory)
            await on_fail(f"the step could not be recorded durably: {exc}")
            return
    try:
        await send()
    except WRITE_ERRORS:
        mark_left(recs, "the answer")
    if not st.recorder.strict:
        await st.recorder.steps(ctx.call.trajectory, recs)
