"""A lean HTTP/1.1 client for generation calls: keep-alive connections to the upstreams.

Each proxied call is one POST to a model server. aiohttp's ClientSession spent
about 300 us of CPU on that (request and response objects, URL parsing, timer
rescheduling on every read); this client writes the request in one
``transport.write`` and parses the response with a few ``bytes`` operations,
for about 90 us (measured against the fake upstream, ``bench/proxy_overhead.py``).
It speaks what model servers answer: ``Content-Length`` or ``chunked`` bodies,
or a body ended by closing the connection; 1xx interim responses are skipped.

The response mimics the part of ``aiohttp.ClientResponse`` the proxy uses
(``status``, ``headers``, ``content.iter_any()``, ``release``, ``close``), and
failures are ``aiohttp.ClientError`` subclasses, so ``upstream.classify`` maps
them to the agent's 502/504 as before. Other upstream traffic (pass-through
routes) still goes through the aiohttp session.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import time
from collections.abc import AsyncIterator, Mapping
from urllib.parse import urlsplit

import aiohttp
from multidict import CIMultiDict

from agentworld.proxy import fast_heads

MAX_HEAD_BYTES = 64 * 1024
_HIGH_WATER = 4 * 1024 * 1024  # pause reading beyond this much unread body
# Idle connections older than this are closed instead of reused: under uvicorn's
# 5 s keep-alive (vLLM), so we never write into a connection the server is closing.
_IDLE_S = 4.0
_MAX_IDLE = 256  # per upstream host


class UpstreamConnectError(aiohttp.ClientError):
    """The upstream could not be reached (refused, unreachable, TLS failure)."""


class UpstreamConnectTimeout(UpstreamConnectError, TimeoutError):
    """No connection within the connect timeout (nothing was sent: a 504 all the same)."""


class UpstreamDisconnected(aiohttp.ClientError):
    """The upstream closed the connection before the response was complete."""


class UpstreamProtocolError(aiohttp.ClientError):
    """The upstream's answer is not valid HTTP/1.1."""


class _Conn(asyncio.Protocol):
    """One connection: buffers what arrives and wakes the reader."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.waiter: asyncio.Future[None] | None = None
        self.done = False  # EOF or connection lost
        self.error: BaseException | None = None
        self.paused = False
        self.idle_since = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        # One timer for the read deadline, moved forward lazily: a stream waits once per
        # event, and arming and cancelling a timer for each wait cost more than the read.
        self._deadline = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0  # when ``_timer`` fires

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._loop = asyncio.get_running_loop()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if len(self.buf) > _HIGH_WATER and not self.paused and self.transport is not None:
            self.transport.pause_reading()
            self.paused = True
        self._wake()

    def eof_received(self) -> bool:
        self.done = True
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.done = True
        self.error = exc
        self._wake()

    def _wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def wait(self, timeout_s: float | None) -> None:
        """Until more bytes arrive or the connection ends; TimeoutError after ``timeout_s``."""
        if self.done:
            raise UpstreamDisconnected(
                "the upstream closed the connection" + (f": {self.error}" if self.error else "")
            )
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        loop = self._loop or asyncio.get_running_loop()
        fut = self.waiter = loop.create_future()
        if timeout_s:
            self._deadline = loop.time() + timeout_s
            if self._timer is not None and self._deadline < self._timer_at:
                # An earlier deadline than the timer's: a reused connection whose last call
                # had a longer timeout (each call's own deadline is in charge).
                self._timer.cancel()
                self._timer = None
            if self._timer is None:
                self._timer_at = self._deadline
                self._timer = loop.call_at(self._deadline, self._on_timer)
        else:
            self._deadline = 0.0
        try:
            await fut
        finally:
            self.waiter = None

    def _on_timer(self) -> None:
        """The read deadline may have passed: expire the waiter, or re-arm for a later one."""
        self._timer = None
        w = self.waiter
        if w is None or w.done() or not self._deadline:
            return  # nobody is waiting (with a deadline): the next wait arms a timer
        loop = self._loop or asyncio.get_running_loop()
        if loop.time() >= self._deadline:
            w.set_exception(TimeoutError("no bytes from the upstream in time"))
        else:
            self._timer_at = self._deadline
            self._timer = loop.call_at(self._deadline, self._on_timer)

    @property
    def reusable(self) -> bool:
        return not self.done and self.transport is not None and not self.transport.is_closing()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        self.done = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


_CHUNK_HEAD = re.compile(rb"([0-9a-fA-F]{1,8})\r\n")  # a chunk's size line, no extensions
_chunk_run = fast_heads.chunk_run


class UpstreamResponse:
    """A response being read: status and headers now, the body as it arrives."""

    def __init__(
        self,
        client: UpstreamClient,
        key: tuple[str, str, int],
        conn: _Conn,
        status: int,
        reason: str,
        headers: CIMultiDict[str],
        framing: str,
        length: int,
        keep_alive: bool,
        read_timeout_s: float | None,
    ) -> None:
        self._client = client
        self._key = key
        self.url = ""  # the URL it answers (set by ``post``)
        self._conn: _Conn | None = conn
        self.status = status
        self.reason = reason
        self.headers = headers
        self._framing = framing  # "length", "chunked" or "close"
        self._left = length  # body bytes left ("length"), or of the current chunk ("chunked")
        self._keep_alive = keep_alive
        self._timeout = read_timeout_s
        self.complete = framing == "length" and length == 0

    @property
    def content(self) -> UpstreamResponse:
        """aiohttp's ``resp.content.iter_any()`` spelling."""
        return self

    async def iter_any(self) -> AsyncIterator[bytes]:
        """The body in pieces as they arrive (chunked framing removed).

        A chunked body (a stream) comes in the reads it arrived in, several chunks
        in one piece, waiting only when none has come.
        """
        if self._framing == "chunked":
            while not self.complete:
                conn = self._conn
                if conn is None:
                    raise UpstreamDisconnected("the response was closed")
                piece = self._decode_chunks(conn.buf)
                if piece:
                    yield piece
                elif not self.complete:
                    await conn.wait(self._timeout)
            return
        while not self.complete:
            piece = await self._next()
            if piece:
                yield piece

    async def read(self) -> bytes:
        return b"".join([p async for p in self.iter_any()])

    async def _next(self) -> bytes:
        conn = self._conn
        if conn is None:
            raise UpstreamDisconnected("the response was closed")
        buf = conn.buf
        if self._framing == "length":
            if not buf:
                await conn.wait(self._timeout)
            n = min(len(buf), self._left)
            piece = bytes(buf[:n])
            del buf[:n]
            self._left -= n
            if not self._left:
                self.complete = True
            return piece
        # "close" (chunked bodies are read by iter_any's own loop)
        if not buf:
            if conn.done:
                if conn.error is not None:
                    raise UpstreamDisconnected(f"the upstream connection broke: {conn.error}")
                self.complete = True
                return b""
            await _wait_or_eof(conn, self._timeout)
        piece = bytes(buf)
        buf.clear()
        return piece

    def _decode_chunks(self, buf: bytearray) -> bytes:
        """Consume complete chunk framing and any data from ``buf``; never waits.

        It walks one bytes copy of the buffer by index and cuts what it consumed
        once at the end: a stream's read holds many small chunks (one per event),
        and cutting the bytearray and copying each piece twice cost more than the
        events' parsing.
        """
        data = bytes(buf)
        n = len(data)
        pos = 0
        left = self._left
        out: list[bytes] = []
        if left == 0 and _chunk_run is not None:  # whole chunks read in C; the loop goes on
            run, pos = _chunk_run(data, 0)  # from the first chunk that is not (fast_heads)
            if run:
                out.append(run)
        match = _CHUNK_HEAD.match
        try:
            while True:
                if left == 0:  # at a chunk-size line
                    m = match(data, pos)
                    if m is not None:  # the usual case: a bare size, its whole chunk here
                        start = m.end()
                        stop = start + int(m.group(1), 16)
                        if start < stop <= n - 2 and data[stop : stop + 2] == b"\r\n":
                            out.append(data[start:stop])
                            pos = stop + 2
                            continue
                    end = data.find(b"\r\n", pos)
                    if end < 0:
                        if n - pos > 4096:
                            raise UpstreamProtocolError("a chunk-size line is too long")
                        break
                    size_text = data[pos:end].split(b";", 1)[0].strip()
                    try:
                        size = int(size_text, 16)
                    except ValueError:
                        raise UpstreamProtocolError(f"bad chunk size {size_text[:40]!r}") from None
                    if size < 0:
                        raise UpstreamProtocolError(f"bad chunk size {size_text[:40]!r}")
                    if size == 0:  # the last chunk; trailer lines, if any, end at an empty line
                        tail = data.find(b"\r\n\r\n", end)
                        if tail >= 0:  # else re-read from the size line once more has arrived
                            pos = tail + 4
                            self.complete = True
                        break
                    pos = end + 2
                    left = size + 2  # the data and its CRLF
                if pos == n:
                    break
                if left > 2:  # data
                    k = min(n - pos, left - 2)
                    out.append(data[pos : pos + k])
                    pos += k
                    left -= k
                    continue
                if n - pos < 2:  # only the CRLF after the data is left
                    break
                if data[pos : pos + 2] != b"\r\n":
                    raise UpstreamProtocolError("a chunk is not followed by CRLF")
                pos += 2
                left = 0
        finally:
            self._left = left
            if pos:
                del buf[:pos]
        return out[0] if len(out) == 1 else b"".join(out)

    def buffered(self, marker: bytes) -> bool:
        """Whether the body bytes already read (not yet consumed) hold ``marker``."""
        conn = self._conn
        return conn is not None and conn.buf.find(marker) >= 0  # not ``in``: see sse.py

    def release(self) -> None:
        """Done with the response: a fully read body lets the connection serve the next call."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self.complete and self._keep_alive and not conn.buf and conn.reusable:
            self._client._put(self._key, conn)
        else:
            conn.close()

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    async def __aenter__(self) -> UpstreamResponse:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release()


async def _wait_or_eof(conn: _Conn, timeout_s: float | None) -> None:
    try:
        await conn.wait(timeout_s)
    except UpstreamDisconnected:
        if conn.error is not None:
            raise


def _header_block(headers: Mapping[str, str]) -> bytes:
    """``Name: value`` CRLF lines of ``headers``, UTF-8 (ValueError naming a header that holds
    a line break, or a colon in its name): joined in C, not formatted a line at a time."""
    items = headers.items()
    n = len(items)
    if not n:
        return b""
    text = "\r\n".join(map(": ".join, items))
    if text.count("\r") != n - 1 or text.count("\n") != n - 1 or ":" in "".join(headers):
        for k, v in items:
            if "\r" in v or "\n" in v or "\r" in k or "\n" in k or ":" in k:
                raise ValueError(f"header {k!r} holds a line break or colon")
    return text.encode("utf-8") + b"\r\n"


_parse_response = fast_heads.parse_response


def parse_response_head(block: bytes) -> tuple[int, str, bytes, CIMultiDict[str] | None]:
    """The status line and header lines of a response head (``block``: its bytes up to,
    not including, the blank line): ``(status, reason, version, headers)``, ``headers``
    None for an interim (1xx) response, whose header lines are not read; an
    ``UpstreamProtocolError`` for a head that is no HTTP response. An ordinary head is
    read in C where the extension is built (``fast_heads``: 13k instructions for vLLM's
    head, 28k in Python), anything else by ``parse_response_head_python``, the
    definition."""
    if _parse_response is not None:
        got = _parse_response(block)
        if got is not None:
            status, reason, version, pairs = got
            return status, reason, version, None if pairs is None else CIMultiDict(pairs)
    return parse_response_head_python(block)


def parse_response_head_python(
    block: bytes,
) -> tuple[int, str, bytes, CIMultiDict[str] | None]:
    """What ``parse_response_head`` returns, read in Python: the definition."""
    lines = block.split(b"\r\n")
    status_line = lines[0].split(None, 2)
    if len(status_line) < 2 or not status_line[0].startswith(b"HTTP/"):
        raise UpstreamProtocolError(f"not an HTTP response: {lines[0][:80]!r}")
    try:
        status = int(status_line[1])
    except ValueError:
        raise UpstreamProtocolError(f"bad status line {lines[0][:80]!r}") from None
    reason = status_line[2].decode("latin-1") if len(status_line) > 2 else ""
    version = status_line[0]
    if 100 <= status < 200:
        return status, reason, version, None
    headers: CIMultiDict[str] = CIMultiDict()
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            raise UpstreamProtocolError(f"bad header line {line[:80]!r}")
        headers.add(name.strip().decode("latin-1"), value.strip().decode("latin-1"))
    return status, reason, version, headers


class UpstreamClient:
    """Keep-alive connections per upstream host; ``post`` sends one generation call."""

    def __init__(self) -> None:
        self._idle: dict[tuple[str, str, int], list[_Conn]] = {}
        self._ssl: ssl.SSLContext | None = None
        self._targets: dict[str, tuple[tuple[str, str, int], bytes, bytes]] = {}
        self.closed = False

    def _target(self, url: str) -> tuple[tuple[str, str, int], bytes, bytes]:
        """(pool key, request target, Host header) of a URL, cached (the few upstream URLs recur)."""
        hit = self._targets.get(url)
        if hit is not None:
            return hit
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UpstreamConnectError(f"not an http(s) URL: {url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        default = (parts.scheme == "http" and port == 80) or (
            parts.scheme == "https" and port == 443
        )
        host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
        hit = (
            (parts.scheme, parts.hostname, port),
            target.encode("utf-8"),
            (host if default else f"{host}:{port}").encode("idna"),
        )
        if len(self._targets) < 1024:
            self._targets[url] = hit
        return hit

    async def post(
        self,
        url: str,
        body: bytes,
        headers: Mapping[str, str],
        *,
        connect_timeout_s: float | None,
        read_timeout_s: float | None,
    ) -> UpstreamResponse:
        """Send the request; return once the status line and headers are in."""
        key, target, host = self._target(url)
        head = b"".join(
            (b"POST ", target, b" HTTP/1.1\r\nHost: ", host, b"\r\n", _header_block(headers))
        )
        head += b"Content-Length: %d\r\n\r\n" % len(body)
        conn = self._take(key) or await self._connect(key, connect_timeout_s)
        try:
            assert conn.transport is not None
            conn.transport.write(head + body)
            resp = await self._read_head(key, conn, read_timeout_s)
        except BaseException:
            conn.close()
            raise
        resp.url = url
        return resp

    async def _read_head(
        self, key: tuple[str, str, int], conn: _Conn, timeout_s: float | None
    ) -> UpstreamResponse:
        buf = conn.buf
        while True:
            while (end := buf.find(b"\r\n\r\n")) < 0:
                if len(buf) > MAX_HEAD_BYTES:
                    raise UpstreamProtocolError("the response headers are too large")
                await conn.wait(timeout_s)
            block = bytes(buf[:end])
            del buf[: end + 4]
            status, reason, version, headers = parse_response_head(block)
            if headers is not None:
                break
            # else an interim response (100 Continue, 103 Early Hints): the next head
        connection = headers.get("Connection", "").lower()
        keep_alive = (
            "close" not in connection if version != b"HTTP/1.0" else "keep-alive" in connection
        )
        if status in (204, 304):
            framing, length = "length", 0
        elif "chunked" in headers.get("Transfer-Encoding", "").lower():
            framing, length = "chunked", 0
        elif (cl := headers.get("Content-Length")) is not None:
            try:
                length = int(cl)
            except ValueError:
                raise UpstreamProtocolError(f"bad Content-Length {cl[:40]!r}") from None
            if length < 0:
                raise UpstreamProtocolError(f"bad Content-Length {cl[:40]!r}")
            framing = "length"
        else:
            framing, length, keep_alive = "close", 0, False
        return UpstreamResponse(
            self, key, conn, status, reason, headers, framing, length, keep_alive, timeout_s
        )

    def _take(self, key: tuple[str, str, int]) -> _Conn | None:
        idle = self._idle.get(key)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if conn.reusable and now - conn.idle_since < _IDLE_S and not conn.buf:
                return conn
            conn.close()
        return None

    def _put(self, key: tuple[str, str, int], conn: _Conn) -> None:
        if self.closed:
            conn.close()
            return
        idle = self._idle.setdefault(key, [])
        now = time.monotonic()
        # Reuse is last in, first out: the oldest idle connections sit at the front,
        # where they are closed once too old (or too many) instead of lingering.
        while idle and (len(idle) >= _MAX_IDLE or now - idle[0].idle_since >= _IDLE_S):
            idle.pop(0).close()
        conn.idle_since = now
        idle.append(conn)

    async def _connect(self, key: tuple[str, str, int], timeout_s: float | None) -> _Conn:
        scheme, host, port = key
        loop = asyncio.get_running_loop()
        ssl_ctx = None
        if scheme == "https":
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            ssl_ctx = self._ssl
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(_Conn, host, port, ssl=ssl_ctx), timeout_s
            )
        except TimeoutError:
            raise UpstreamConnectTimeout(
                f"no connection to {host}:{port} in {timeout_s} s"
            ) from None
        except (OSError, ssl.SSLError) as exc:
            raise UpstreamConnectError(f"cannot connect to {host}:{port}: {exc}") from exc
        return conn

    async def close(self) -> None:
        self.closed = True
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()
