"""What the proxy does around every generation call: stamping the policy version, threading
continuations, and recording failures and cancellations."""

from __future__ import annotations

from typing import Any

import orjson

from agentworld.proxy.app import State
from agentworld.proxy.recorder import Call, RecordFailed, failed_step
from agentworld.proxy.upstream import Fault, policy_from

# Writing to an agent that went away raises one of these (aiohttp's reset error is both).
WRITE_ERRORS = (ConnectionResetError, ConnectionError)


def upstream_error_message(raw: bytes) -> str:
    """The message of an upstream error body (OpenAI or vLLM shape), else its text."""
    try:
        obj = orjson.loads(raw)
        err = obj.get("error") if isinstance(obj, dict) else None
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return err["message"][:4000]
        if isinstance(err, str):
            return err[:4000]
        if isinstance(obj, dict) and isinstance(obj.get("message"), str):
            return obj["message"][:4000]
    except orjson.JSONDecodeError:
        pass
    return raw[:4000].decode("utf-8", "replace") or "(empty body)"


def add_continuations(
    st: State, call: Call, prompt_key: bytes | None, recs: list[dict[str, Any]]
) -> None:
    if prompt_key is None or not call.trajectory.threaded:
        return
    msgs = [r["response"]["message"] for r in recs if r["status"] == "ok" and r.get("response")]
    st.registry.add_continuations(call.trajectory, prompt_key, [m for m in msgs if m])


def add_reply_continuations(
    st: State, call: Call, prompt_key: bytes | None, body: dict[str, Any]
) -> list[dict[str, Any]] | None:
    """``add_continuations`` from a successful body, before its step records exist.

    Every choice of such a body becomes an ok step, so each reply continues the
    thread. Returns the replies (for ``ok_steps``), or None when not threaded.
    """
    if prompt_key is None or not call.trajectory.threaded:
        return None
    replies = call.adapter.replies(body)
    st.registry.add_continuations(call.trajectory, prompt_key, [m for m in replies if m])
    return replies


def stamp(st: State, call: Call, headers: Any) -> None:
    pv = policy_from(headers)
    if pv is not None:
        st.set_policy(pv)
        call.policy_version = pv
    call.trajectory.policy_version = call.policy_version


async def record_fault(st: State, call: Call, fault: Fault, partial: Any = None) -> None:
    st.stats.error("upstream")
    recs = failed_step(
        call,
        status="error",
        error={"type": fault.type, "message": fault.message, "status": fault.status},
        partial=partial,
    )
    try:
        await st.recorder.steps(call.trajectory, recs)  # type: ignore[union-attr]
    except RecordFailed:
        pass  # the agent already gets an error; the failure is counted and logged


def cancelled_steps(call: Call, partial: Any = None) -> list[dict[str, Any]]:
    return failed_step(
        call,
        status="cancelled",
        error={"type": "client_disconnected", "message": "the agent disconnected mid-call"},
        partial=partial,
    )
