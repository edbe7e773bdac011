"""What the proxy does while the pool cannot be written (a full disk, a failing device).

A data factory that answers agents while it records nothing wastes every call
it serves, so by default (``on_write_failure = "refuse"``) a proxy whose
writer failed its last write refuses new generation calls and white-box steps
with a 503 in the route's protocol shape and ``Retry-After``, and its
``/aw/health`` answers 503 so a load balancer moves traffic elsewhere. A probe
write every ``PROBE_INTERVAL_S`` finds out when the pool takes writes again;
the proxy then serves again by itself, without a restart.

``on_write_failure = "serve"`` (batched durability only) keeps answering
agents unrecorded, for a user who prefers that; either way every step lost
after its agent got an answer is counted as ``lost`` in /aw/stats and /metrics.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
from aiohttp import web

from agentworld import records
from agentworld.proxy.adapters.openai import CHAT, COMPLETIONS
from agentworld.proxy.adapters.translated import MESSAGES, RESPONSES
from agentworld.proxy.error_responses import error_response
from agentworld.proxy.recorder import retry_later
from agentworld.proxy.state import STATE, State

log = logging.getLogger("agentworld.proxy")

PROBE_INTERVAL_S = 1.0

# The routes that record steps: refused while the pool cannot be written. Trajectory
# ends and rewards still go through: strict mode reports their failure itself.
_ADAPTERS = (CHAT, COMPLETIONS, MESSAGES, RESPONSES)


def refusing(st: State) -> bool:
    """Whether recording calls are refused now: the writer's last write failed and the user
    did not ask to serve unrecorded."""
    writer = st.writer
    return (
        st.config.on_write_failure == "refuse"
        and writer is not None
        and getattr(writer, "failing", False)
    )


def _refusal(path: str, message: str) -> web.Response | None:
    """The 503 of a recording route, in its protocol's shape; None for other routes."""
    headers = retry_later()
    for adapter in _ADAPTERS:
        if path.endswith(adapter.path):
            return adapter.server_error(503, message, "service_unavailable", headers)
    if path == "/aw/steps":
        return error_response(503, message, "service_unavailable", code=503, headers=headers)
    return None


@web.middleware
async def refuse_while_failing(request: web.Request, handler: Any) -> web.StreamResponse:
    """Answer a recording call 503 + Retry-After while the pool cannot be written."""
    st = request.app[STATE]
    if request.method == "POST" and refusing(st):
        error = getattr(st.writer, "write_error", None)
        message = f"the pool cannot be written ({error}); retry later"
        refused = _refusal(request.path, message)
        if refused is not None:
            st.stats.error("record_refused")
            st.stats.request("refused", 503)
            return refused
    return await handler(request)


async def probe_writes(st: State) -> None:
    """While the writer is failing, try a probe write every ``PROBE_INTERVAL_S``: the proxy
    serves again as soon as the pool takes writes (a later commit clears it too)."""
    writer = st.writer
    while True:
        await asyncio.sleep(PROBE_INTERVAL_S)
        if writer is None or not getattr(writer, "failing", False):
            continue
        if await asyncio.to_thread(writer.probe):
            log.warning("the pool takes writes again: serving and recording")


def count_lost(st: State, lines: list[bytes]) -> None:
    """Count steps lost after their agent was answered (batched mode): ``lost``, not ok.

    Runs on the event loop (the writer's committer hands the lines over)."""
    for line in lines:
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(rec, dict) and rec.get("kind") == records.STEP:
            st.stats.lost_step(str(rec.get("status")))


def watch_lost(st: State) -> None:
    """Have the writer report what it loses silently to ``count_lost`` on this loop."""
    loop = asyncio.get_running_loop()
    if st.writer is not None and hasattr(st.writer, "on_lost"):
        st.writer.on_lost = lambda lines: loop.call_soon_threadsafe(count_lost, st, lines)
