"""How a call that did not complete ends: its failed or cancelled step, and the agent's error.

Every fault is recorded as the call's step (status ``error``, with what arrived
before it) and reaches the agent in its protocol's error shape; an agent that
went away gets a ``cancelled`` step. A recording failure here is only counted
and logged: the agent already gets an error.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from agentworld.proxy.adapters.base import Exchange
from agentworld.proxy.recorder import RecordFailed
from agentworld.proxy.upstream.faults import Fault

# Writing to an agent that went away raises one of these (aiohttp's reset error is both).
WRITE_ERRORS = (ConnectionResetError, ConnectionError)

CLIENT_GONE = {"type": "client_disconnected", "message": "the agent disconnected mid-call"}


def cancelled(x: Exchange, partial: Any = None) -> list[dict[str, Any]]:
    """The step of a call its agent left, with what arrived before."""
    return x.adapter.failed(x, "cancelled", dict(CLIENT_GONE), partial)


async def record_fault(x: Exchange, fault: Fault, partial: Any = None) -> None:
    """Record ``fault`` as the call's failed step."""
    st = x.st
    assert st.recorder is not None
    st.stats.error("upstream")
    error = {"type": fault.type, "message": fault.message, "status": fault.status}
    try:
        await st.recorder.steps(x.call.trajectory, x.adapter.failed(x, "error", error, partial))
    except RecordFailed:
        pass  # the agent already gets an error; the failure is counted and logged


async def answer_fault(x: Exchange, fault: Fault, headers: dict[str, str]) -> web.Response:
    """Record ``fault`` as the call's failed step; the agent's answer: the fault's status in
    the protocol's error shape, with ``headers`` (the step's, and what the upstream's relay)."""
    await record_fault(x, fault)
    return x.adapter.server_error(fault.status, fault.message, "upstream_error", headers)


def malformed(url: str, exc: Exception) -> Fault:
    """A body of the wrong shape from the upstream: a 502, and an error step."""
    return Fault(502, "upstream_invalid", f"upstream {url} sent a malformed answer: {exc}")


def stream_error(err: dict[str, Any]) -> Fault:
    """The fault an upstream's own error event in a stream stands for."""
    code = err.get("code")
    return Fault(
        code if isinstance(code, int) else 502,
        "upstream_stream_error",
        str(err.get("message") or err)[:4000],
    )


def not_recorded(exc: RecordFailed) -> str:
    """What the agent is told when its step could not be made durable (strict mode)."""
    return f"the step could not be recorded durably: {exc}"
