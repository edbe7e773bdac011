"""A request the front serves, as the pipeline and the middlewares read it, and its answers.

``FrontRequest`` has the part of ``aiohttp.web.Request`` the generation routes
use (``app``, ``method``, ``path``, ``headers``, ``match_info``, ``query``,
``transport``, ``protocol``, ``content``, ``read``), so the one pipeline and
the app's middlewares run on it unchanged. Its answers are written straight to
the transport: a ``web.Response`` in one write (``answer_now``, or once the
handler returned it), a stream as chunked ``FrontStream`` writes.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

from aiohttp import web
from aiohttp.http import SERVER_SOFTWARE
from multidict import CIMultiDict, MultiDict, MultiDictProxy

from agentworld.proxy.front.http1 import Head, header_lines, status_line

if TYPE_CHECKING:
    from agentworld.proxy.front.protocol import FrontProtocol

_NO_QUERY: MultiDictProxy[str] = MultiDictProxy(MultiDict())
_SERVER = f"Server: {SERVER_SOFTWARE}\r\n".encode("latin-1")
# Headers the front writes itself; a handler's own are left out.
_OWN = frozenset(("content-length", "transfer-encoding", "connection", "date", "server"))


class Body:
    """A request body as it arrives (``aiohttp.StreamReader``'s part that ``read_body``
    uses): nearly always whole with its head, else fed by the protocol."""

    __slots__ = ("_eof", "_exc", "_need", "_parts", "_size", "_waiter", "dropping")

    def __init__(self, first: bytes, need: int) -> None:
        self._parts = [first] if first else []
        self._size = len(first)
        self._need = need
        self._eof = self._size >= need
        self._waiter: asyncio.Future[None] | None = None
        self._exc: BaseException | None = None
        self.dropping = False  # its call is answered: the rest is read and dropped

    def feed(self, data: bytes) -> bytes:
        """Take what belongs to the body; return the rest (the next request's)."""
        room = self._need - self._size
        rest = b""
        if len(data) > room:
            data, rest = data[:room], data[room:]
        if not self.dropping:
            self._parts.append(data)
        self._size += len(data)
        self._eof = self._size >= self._need
        self._wake(None)
        return rest

    def lost(self, exc: BaseException) -> None:
        """The connection closed before the body ended."""
        if not self._eof:
            self._exc = exc
            self._wake(exc)

    def _wake(self, exc: BaseException | None) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            if exc is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(exc)

    def is_eof(self) -> bool:
        return self._eof

    def exception(self) -> BaseException | None:
        return self._exc

    async def readany(self) -> bytes:
        """What has arrived and not been read (waiting for some); b"" at the body's end."""
        while not self._parts and not self._eof:
            if self._exc is not None:
                raise self._exc
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        data = b"".join(self._parts)
        self._parts.clear()
        return data


class FrontRequest:
    """One request the front serves."""

    method = "POST"

    def __init__(
        self,
        protocol: FrontProtocol,
        app: web.Application,
        head: Head,
        match_info: dict[str, str],
        content: Body,
    ) -> None:
        self.protocol = protocol
        self.transport = protocol.transport
        self.app = app
        self.path = head.path
        self.query_string = head.query
        self.query = (
            MultiDictProxy(MultiDict(parse_qsl(head.query, keep_blank_values=True)))
            if head.query
            else _NO_QUERY
        )
        self.headers = head.headers
        self.content_length = head.content_length
        self.keep_alive = head.keep_alive
        self.match_info = match_info
        self.content = content
        self.answer_begun = False  # the answer's head went out
        self.answered = False  # the whole answer went out

    async def read(self) -> bytes:
        parts = []
        while chunk := await self.content.readany():
            parts.append(chunk)
        return b"".join(parts)

    def keeps_alive(self, resp: web.StreamResponse) -> bool:
        """Whether the connection serves another request after ``resp``."""
        return (
            self.keep_alive
            and resp.keep_alive is not False
            and self.content.is_eof()
            and not self.protocol.front.closing
        )

    def _head(self, resp: web.StreamResponse, framing: bytes) -> bytes:
        headers = resp.headers
        if not _OWN.isdisjoint(map(str.lower, headers.keys())):
            headers = CIMultiDict((k, v) for k, v in headers.items() if k.lower() not in _OWN)
        if "Content-Type" not in headers:
            headers = CIMultiDict(headers)
            headers["Content-Type"] = "application/octet-stream"  # aiohttp's default
        conn = b"" if self.keeps_alive(resp) else b"Connection: close\r\n"
        return b"".join(
            (
                status_line(resp.status, resp.reason),
                header_lines(headers),
                b"Date: ",
                self.protocol.front.dates.now(),
                b"\r\n",
                _SERVER,
                framing,
                conn,
                b"\r\n",
            )
        )

    def _write(self, data: bytes) -> None:
        transport = self.protocol.transport
        if transport is None or transport.is_closing():
            raise ConnectionResetError("the agent's connection is closed")
        transport.write(data)

    def answer_now(self, resp: web.Response) -> None:
        """Write all of ``resp`` (ConnectionResetError if the agent is gone)."""
        body = resp.body
        if body is None:
            body = b""
        elif not isinstance(body, bytes | bytearray):
            raise TypeError(f"the front writes bodies of bytes, not {type(body).__name__}")
        head = self._head(resp, b"Content-Length: %d\r\n" % len(body))
        self.answer_begun = self.answered = True
        self._write(head + body if len(body) < 65536 else head)
        if len(body) >= 65536:
            self._write(body)

    def stream(self, status: int, headers: dict[str, str]) -> FrontStream:
        """A streamed answer (chunked), begun by ``prepare``."""
        return FrontStream(self, status, headers)


class FrontStream(web.StreamResponse):
    """``web.StreamResponse``'s ``prepare``/``write``/``write_eof``, written by the front."""

    def __init__(self, request: FrontRequest, status: int, headers: dict[str, str]) -> None:
        super().__init__(status=status, headers=headers)
        self._front_req = request
        self._head_out = False
        self._begun = False
        self._ended = False

    @property
    def prepared(self) -> bool:
        return self._begun

    async def prepare(self, request: Any) -> None:  # type: ignore[override]
        self._begun = True
        self._front_req.answer_begun = True
        if self._send_headers_immediately:
            self._send(b"")

    def _send(self, data: bytes, last: bytes = b"") -> None:
        req = self._front_req
        chunk = b"%x\r\n%b\r\n" % (len(data), data) if data else b""
        if not self._head_out:
            self._head_out = True
            head = req._head(self, b"Transfer-Encoding: chunked\r\n")
            req._write(head + chunk + last)
        elif chunk or last:
            req._write(chunk + last)

    async def write(self, data: bytes | bytearray | memoryview) -> None:  # type: ignore[override]
        if self._ended:
            raise RuntimeError("Cannot call write() after write_eof()")
        self._send(bytes(data))
        protocol = self._front_req.protocol
        if protocol.writing_paused or protocol.transport is None:
            await protocol.drain()

    async def write_eof(self, data: bytes = b"") -> None:  # type: ignore[override]
        if self._ended:
            return
        self._ended = True
        self._send(bytes(data), b"0\r\n\r\n")
        self._front_req.answered = True
        protocol = self._front_req.protocol
        if protocol.writing_paused or protocol.transport is None:
            await protocol.drain()
