"""The agent's side of a connection: how long the proxy waits on an agent.

An agent can keep the proxy waiting in three places; each is bounded by
``ProxyConfig.client_timeout_s`` (60 s by default, like nginx's client and send
timeouts):

- before a request: a connection that sends no complete request head (nothing
  at all, or headers that never end) is closed by aiohttp's keep-alive timer,
  which the proxy sets to the same timeout (``keepalive_timeout``);
- a request body that stops arriving: ``read_body`` answers 408 after that
  long without a byte, and the connection is closed;
- a response the agent stops reading: ``watch_agents`` aborts a connection
  whose writes have been paused (its socket full) that long. The call is then
  cancelled like any other hang-up: its step is recorded as cancelled and the
  upstream connection is closed, so the engine stops generating for nobody.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from aiohttp import web

from agentworld.proxy.bad_request import BadRequest

log = logging.getLogger("agentworld.proxy")


class AgentTimeout(BadRequest):
    """408: the agent stopped sending its request body."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__(
            f"no bytes of the request body arrived for {timeout_s:g} s; closing the connection",
            None,
            408,
        )


async def read_body(request: web.Request, limit: int, timeout_s: float) -> bytes:
    """The whole request body; AgentTimeout after ``timeout_s`` without a byte of it.

    A body that came with its headers (nearly every call) is read at once, no timer.
    The limit itself is aiohttp's (``client_max_size``): over it, ``read`` raises 413.
    """
    content = request.content
    if content.is_eof():
        return await request.read()
    parts: list[bytes] = []
    size = 0
    while True:
        try:
            async with asyncio.timeout(timeout_s):
                chunk = await content.readany()
        except TimeoutError:
            raise AgentTimeout(timeout_s) from None
        if not chunk:
            return b"".join(parts)
        size += len(chunk)
        if size > limit:
            raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=size)
        parts.append(chunk)


async def answer_now(request: web.Request, out: web.Response) -> None:
    """Send all of ``out`` now, before the handler returns (what it does next, recording
    the step, must not delay the agent). A request the front serves writes it itself."""
    if not isinstance(request, web.BaseRequest):  # the front's (front/request.py)
        request.answer_now(out)
        return
    await out.prepare(request)
    await out.write_eof()


def stream_answer(request: web.Request, headers: dict[str, str]) -> web.StreamResponse:
    """A 200 stream to ``request``'s agent, begun by its ``prepare``."""
    if not isinstance(request, web.BaseRequest):
        return request.stream(200, headers)
    return web.StreamResponse(status=200, headers=headers)


def answer_begun(request: web.Request) -> bool:
    """Whether a response to ``request`` was prepared (its head sent, or held for its body)."""
    if not isinstance(request, web.BaseRequest):
        return request.answer_begun
    w = request.writer
    return bool(
        w.output_size > 0 or getattr(w, "_headers_buf", None) or getattr(w, "_headers_written", 0)
    )


class AgentConnections:
    """The agent connections that have sent a request, and since when each cannot write.

    The errors middleware adds a request's connection (its aiohttp protocol); the
    watchdog reads its ``writing_paused`` flag (set while the socket is full) and
    forgets it once closed. A connection stays watched until then, so a response
    aiohttp writes after the handler returned (a unary body) is watched too.
    """

    def __init__(self) -> None:
        self.paused_since: dict[Any, float] = {}  # protocol -> first seen paused (0: writing)

    def add(self, protocol: Any) -> None:
        if protocol not in self.paused_since:
            self.paused_since[protocol] = 0.0

    def stalled(self, now: float, timeout_s: float) -> list[Any]:
        """Connections seen paused at every check for ``timeout_s`` up to ``now``; closed
        connections are forgotten."""
        out = []
        paused_since = self.paused_since
        for proto, since in list(paused_since.items()):
            if proto.transport is None:  # connection lost
                del paused_since[proto]
            elif not proto.writing_paused:
                if since:
                    paused_since[proto] = 0.0
            elif not since:
                paused_since[proto] = now
            elif now - since >= timeout_s:
                del paused_since[proto]
                out.append(proto)
        return out


async def watch_agents(conns: AgentConnections, timeout_s: float, stats: Any) -> None:
    """Abort agent connections that have not taken a byte of their response for ``timeout_s``."""
    interval_s = min(max(timeout_s / 4, 0.02), 5.0)  # a stall is seen within 1.25 timeouts
    while True:
        await asyncio.sleep(interval_s)
        for proto in conns.stalled(time.monotonic(), timeout_s):
            transport = proto.transport
            peer = transport.get_extra_info("peername") if transport is not None else None
            log.warning(
                "agent %s read nothing of its response for %g s: connection closed",
                peer,
                timeout_s,
            )
            stats.error("agent_timeout")
            if transport is not None:
                # abort, not close: close would wait for the full buffer to drain first.
                # The connection's loss cancels the call (handler_cancellation).
                transport.abort()
