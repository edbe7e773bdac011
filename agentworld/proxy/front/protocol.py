"""The front's connection protocol: generation calls served on the spot, the rest to aiohttp.

A connection starts with ``FrontProtocol``. Each request head it reads goes to
``parse_head``; a plain ``POST`` to a recorded generation route (under any of
the app's trajectory prefixes) runs the app's middlewares and that route's
handler on a ``FrontRequest``, exactly as aiohttp would have run them. The
first request the front does not serve (another route, a query string, a
chunked or compressed body, a body over the limit, a malformed head) hands the
connection over for good: the bytes read so far go to a fresh aiohttp
``RequestHandler`` of the same app, which takes the transport from there.

What aiohttp's server does around a request, the front does too: the handler is
cancelled when the agent hangs up (``handler_cancellation``), a connection
without a complete request is closed after ``client_timeout_s`` (aiohttp's
keep-alive timer), writes wait while the socket is full, and a shutdown lets the
calls in flight finish within the runner's shutdown timeout.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from agentworld.proxy.front.http1 import MAX_HEAD, Dates, parse_head
from agentworld.proxy.front.request import Body, FrontRequest
from agentworld.proxy.state import GENERATION, STATE

log = logging.getLogger("agentworld.proxy")

Handler = Callable[[Any], Awaitable[web.StreamResponse]]

# The prefix keys of the app's routes (``app.ROUTE_PREFIXES``) and their names.
_KEYS = {"t": "trajectory", "g": "group", "a": "agent"}
_PIPELINED_BYTES = 1 << 20  # read no further ahead of the call in flight than this


class Front:
    """The front of one app: its routes, its connections, their timers."""

    def __init__(
        self,
        app: web.Application,
        fallback: Callable[[], asyncio.Protocol],
        prefixes: tuple[str, ...],
    ) -> None:
        self.app = app
        self.fallback = fallback
        config = app[STATE].config
        self.max_body = config.max_body_bytes
        self.idle_timeout_s = config.client_timeout_s
        # The unread rest of a refused body is read and dropped at most this long (as
        # aiohttp's lingering_time): closing over unread bytes resets the connection,
        # and the agent could lose the answer it was sent.
        self.linger_s = min(10.0, config.client_timeout_s)
        self.conns: set[FrontProtocol] = set()
        self.closing = False
        self.dates = Dates()
        self.loop = asyncio.get_running_loop()
        self._routes: dict[str, Handler] = {}
        for path, handler in app[GENERATION].items():
            for m in reversed(app.middlewares):  # as aiohttp wraps a route's handler
                handler = functools.partial(m, handler=handler)
            self._routes[path] = handler
        self._suffixes = tuple(self._routes)
        self._prefixes = frozenset(prefixes)
        self._sweeper = self.loop.create_task(self._sweep())

    def protocol(self) -> FrontProtocol:
        return FrontProtocol(self)

    def route(self, path: str) -> tuple[Handler, dict[str, str]] | None:
        """The handler chain and match info of a generation route's ``path``, else None."""
        handler = self._routes.get(path)
        if handler is not None:
            return handler, {}
        if not path.endswith(self._suffixes):
            return None
        for suffix in self._suffixes:
            if path.endswith(suffix):
                break
        parts = path[: -len(suffix)].split("/")
        if len(parts) % 2 == 0 or parts[0]:  # "/k/v/k/v": ["", k, v, k, v]
            return None
        match: dict[str, str] = {}
        pattern = []
        for key, value in zip(parts[1::2], parts[2::2], strict=True):
            name = _KEYS.get(key)
            if name is None or not value or "{" in value or "}" in value or name in match:
                return None
            match[name] = value
            pattern.append(f"/{key}/{{{name}}}")
        if "".join(pattern) not in self._prefixes:
            return None
        return self._routes[suffix], match

    async def _sweep(self) -> None:
        """Close connections that have had no complete request for the idle timeout."""
        timeout = self.idle_timeout_s
        interval = min(max(timeout / 4, 0.02), 5.0)
        while True:
            await asyncio.sleep(interval)
            now = self.loop.time()
            for proto in list(self.conns):
                if proto.idle_since is not None and now - proto.idle_since >= timeout:
                    proto.close()

    async def shutdown(self, timeout_s: float) -> None:
        """Close idle connections, let the calls in flight end (cancelled after
        ``timeout_s``), then close the rest."""
        self.closing = True
        self._sweeper.cancel()
        tasks = []
        for proto in list(self.conns):
            if proto.task is None:
                proto.close()
            else:
                tasks.append(proto.task)
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=timeout_s)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1.0)
        for proto in list(self.conns):
            proto.close()


class FrontProtocol(asyncio.Protocol):
    """One agent connection, until the front serves a request it cannot (then aiohttp's)."""

    def __init__(self, front: Front) -> None:
        self.front = front
        self.transport: asyncio.Transport | None = None
        self.writing_paused = False  # read by the agents' watchdog (agent_conn.py)
        self.task: asyncio.Task[None] | None = None
        self.idle_since: float | None = None  # without a complete request since
        self._buf = b""
        self._request: FrontRequest | None = None
        self._drain: asyncio.Future[None] | None = None
        self._reading_paused = False
        self._linger: asyncio.TimerHandle | None = None

    # -- asyncio's side

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)  # as aiohttp
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.front.conns.add(self)
        self.idle_since = self.front.loop.time()
        if self.front.closing:
            transport.close()

    def connection_lost(self, exc: BaseException | None) -> None:
        self.front.conns.discard(self)
        self.transport = None
        if self._linger is not None:
            self._linger.cancel()
        lost = exc if exc is not None else ConnectionResetError("Connection lost")
        if self._request is not None:
            self._request.content.lost(lost)
        if self.task is not None and not self.task.done():
            self.task.cancel()  # the agent hung up: its call is cancelled, as aiohttp does
        self._wake(lost)

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        self._wake(None)

    def _wake(self, exc: BaseException | None) -> None:
        waiter, self._drain = self._drain, None
        if waiter is not None and not waiter.done():
            if exc is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(exc)

    async def drain(self) -> None:
        """Wait while the agent's socket is full (ConnectionResetError once it is gone)."""
        if self.transport is None:
            raise ConnectionResetError("the agent's connection is closed")
        if not self.writing_paused:
            return
        if self._drain is None:
            self._drain = self.front.loop.create_future()
        await asyncio.shield(self._drain)

    def data_received(self, data: bytes) -> None:
        req = self._request
        if req is not None and not req.content.is_eof():
            data = req.content.feed(data)
            if self._linger is not None:  # the rest of an answered call's body
                if req.content.is_eof():
                    self.close()
                return
            if not data:
                return
        self._buf = self._buf + data if self._buf else data
        if self.task is None:
            self._next()
        elif len(self._buf) > _PIPELINED_BYTES and not self._reading_paused:
            self._reading_paused = True
            assert self.transport is not None
            self.transport.pause_reading()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    # -- requests

    def _next(self) -> None:
        """Serve the request at the start of the buffer, once its head is in."""
        buf = self._buf
        end = buf.find(b"\r\n\r\n", 0, MAX_HEAD + 4)
        if end < 0:
            # Not the start of a POST (a TLS hello, garbage): aiohttp answers it at once.
            if len(buf) > MAX_HEAD or buf[:6] != b"POST /"[: len(buf)]:
                self._hand_off()
            return
        head = parse_head(buf[:end])
        found = self.front.route(head.path) if head is not None else None
        if head is None or found is None or head.content_length > self.front.max_body:
            self._hand_off()
            return
        handler, match_info = found
        start = end + 4
        stop = start + head.content_length
        content = Body(buf[start:stop], head.content_length)
        self._buf = buf[stop:]
        req = FrontRequest(self, self.front.app, head, match_info, content)
        self._request = req
        self.idle_since = None
        self.task = self.front.loop.create_task(self._serve(handler, req))

    async def _serve(self, handler: Handler, req: FrontRequest) -> None:
        try:
            resp = await handler(req)
        except asyncio.CancelledError:
            raise
        except Exception:
            # The errors middleware answers nearly everything; past it, as aiohttp: a 500.
            log.exception("internal error serving POST %s", req.path)
            resp = web.Response(status=500, text="500 Internal Server Error")
            resp.force_close()
            if req.answer_begun:
                self.close()
        if not req.answered and self.transport is not None:
            try:
                if req.answer_begun:  # a stream its handler left unfinished
                    self.close()
                elif isinstance(resp, web.Response):
                    req.answer_now(resp)
                else:
                    log.error("POST %s: the front cannot write a %s", req.path, type(resp))
                    self.close()
            except ConnectionResetError:
                pass
            except Exception:
                log.exception("writing the answer to POST %s", req.path)
                self.close()
        self._done(req, resp)

    def _done(self, req: FrontRequest, resp: web.StreamResponse) -> None:
        self.task = None
        if self.transport is None:
            return
        if not req.keeps_alive(resp):
            if req.content.is_eof() or self.front.closing:
                self.transport.close()
            else:  # its body still coming: read and drop the rest, then close
                req.content.dropping = True
                self._linger = self.front.loop.call_later(self.front.linger_s, self.close)
            return
        self._request = None
        self.idle_since = self.front.loop.time()
        if self._reading_paused:
            self._reading_paused = False
            self.transport.resume_reading()
        if self._buf:
            self._next()

    def _hand_off(self) -> None:
        """Give this connection, and what it has sent so far, to aiohttp's server."""
        transport = self.transport
        assert transport is not None and self.task is None
        self.front.conns.discard(self)
        self.transport = None
        data, self._buf = self._buf, b""
        proto = self.front.fallback()
        transport.set_protocol(proto)
        proto.connection_made(transport)
        if self.writing_paused:
            proto.pause_writing()
        if self._reading_paused:
            transport.resume_reading()
        if data:
            proto.data_received(data)
