"""The lean upstream HTTP/1.1 client: framing, keep-alive, and every way an answer can be wrong."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

import pytest

from agentworld.proxy.upstream.client import (
    UpstreamClient,
    UpstreamConnectError,
    UpstreamDisconnected,
    UpstreamProtocolError,
)
from agentworld.proxy.upstream.faults import classify

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head + await reader.readexactly(length)


class ScriptedServer:
    """A raw TCP server answering each request with the bytes a script writes."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.requests: list[bytes] = []

    async def __aenter__(self) -> ScriptedServer:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1/x"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                try:
                    self.requests.append(await read_request(reader))
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                await self.script(reader, writer, len(self.requests))
                if writer.is_closing():
                    return
        finally:
            writer.close()


def post(client: UpstreamClient, url: str, timeout: float = 2.0):  # type: ignore[no-untyped-def]
    return client.post(
        url,
        b'{"a": 1}',
        {"Content-Type": "application/json"},
        connect_timeout_s=timeout,
        read_timeout_s=timeout,
    )


async def test_content_length_body_and_keep_alive_reuse() -> None:
    async def script(r, w, n):  # type: ignore[no-untyped-def]
        body = b'{"n": %d}' % n
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nX-Y: z\r\n\r\n%s" % (len(body), body))

    async with ScriptedServer(script) as srv:
        client = UpstreamClient()
        for n in (1, 2, 3):
            async with await post(client, srv.url) as resp:
                assert resp.status == 200 and resp.headers["x-y"] == "z"
                assert await resp.read() == b'{"n": %d}' % n
        await client.close()
    assert srv.connections == 1  # one connection served all three
    first = srv.requests[0]
    assert first.startswith(b"POST /v1/x HTTP/1.1\r\nHost: 127.0.0.1:")
    assert b"Content-Length: 8\r\n" in first and first.endswith(b'{"a": 1}')


async def test_chunked_body_in_dribbles_with_extensions_and_trailers() -> None:
    payload = b"data: one\n\ndata: two\n\n" * 50

    async def script(r, w, n):  # type: ignore[no-untyped-def]
        w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        body = b""
        for i in range(0, len(payload), 37):
            piece = payload[i : i + 37]
            body += b"%x;ext=1\r\n%s\r\n" % (len(piece), piece)
        body += b"0\r\nX-Trailer: t\r\n\r\n"
        for i in range(0, len(body), 11):  # the framing split anywhere
            w.write(body[i : i + 11])
            await w.drain()
            await asyncio.sleep(0)

    async with ScriptedServer(script) as srv:
        client = UpstreamClient()
        for _ in range(2):
            resp = await post(client, srv.url)
            got = [piece async for piece in resp.content.iter_any()]
            assert b"".join(got) == payload and all(got)
            resp.release()
        await client.close()
    assert srv.connections == 1


@pytest.mark.parametrize("ext", [b"", b";e=1", b"  "])  # bare sizes take the fast path
def test_chunk_decoder_at_every_split_point_and_with_the_whole_body_at_once(ext: bytes) -> None:
    """Two reads split anywhere (inside a size line, data, CRLF or trailer) give the body
    exactly once, end it at the last chunk, and leave the bytes after it in the buffer."""
    from multidict import CIMultiDict

    from agentworld.proxy.upstream.client import UpstreamResponse, _Conn

    payload = [b"data: %d\n\n" % i * (i + 1) for i in range(6)]
    body = b"".join(b"%x%s\r\n%s\r\n" % (len(p), ext, p) for p in payload)
    body += b"0\r\nX-T: 1\r\n\r\n"
    after = b"HTTP/1.1 200 OK\r\n"  # a pipelined next response must stay in the buffer
    for k in range(len(body) + 1):
        resp = UpstreamResponse(
            None, ("http", "h", 1), _Conn(), 200, "OK", CIMultiDict(), "chunked", 0, True, 1.0
        )  # type: ignore[arg-type]
        buf = bytearray(body[:k])
        got = resp._decode_chunks(buf)
        buf += body[k:] + after
        if not resp.complete:  # (iter_any stops asking once the body is complete)
            got += resp._decode_chunks(buf)
        assert got == b"".join(payload), k
        assert resp.complete and bytes(buf) == after, k


async def test_body_ended_by_close_and_interim_response() -> None:
    async def script(r, w, n):  # type: ignore[no-untyped-def]
        w.write(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it"
        )
        await w.drain()
        w.close()

    async with ScriptedServer(script) as srv:
        client = UpstreamClient()
        for _ in range(2):
            async with await post(client, srv.url) as resp:
                assert resp.status == 200 and await resp.read() == b"all of it"
        await client.close()
    assert srv.connections == 2  # a closed connection is never reused


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (b"SMTP ready\r\n\r\n", UpstreamProtocolError),
        (b"HTTP/1.1 abc OK\r\n\r\n", UpstreamProtocolError),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", UpstreamProtocolError),
        (b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", UpstreamProtocolError),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", UpstreamProtocolError),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXX", UpstreamProtocolError),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort", UpstreamDisconnected),
        (b"HTTP/1.1 200 O", UpstreamDisconnected),
    ],
)
async def test_bad_answers_raise_a_client_error(answer: bytes, error: type[Exception]) -> None:
    async def script(r, w, n):  # type: ignore[no-untyped-def]
        w.write(answer)
        await w.drain()
        w.close()

    async with ScriptedServer(script) as srv:
        client = UpstreamClient()
        with pytest.raises(error) as info:
            async with await post(client, srv.url) as resp:
                await resp.read()
        assert classify(info.value, srv.url).status == 502
        await client.close()


async def test_silent_upstream_times_out_as_504() -> None:
    async def script(r, w, n):  # type: ignore[no-untyped-def]
        await asyncio.sleep(5)

    async with ScriptedServer(script) as srv:
        client = UpstreamClient()
        with pytest.raises(TimeoutError) as info:
            await post(client, srv.url, timeout=0.1)
        assert classify(info.value, srv.url).status == 504
        await client.close()


async def test_read_timeout_is_per_wait_so_a_slow_steady_stream_never_times_out() -> None:
    """The timeout bounds the silence between reads, not the whole body: a stream that
    sends a chunk every 60 ms outlives a 150 ms timeout, then times out once it stops."""

    async def script(r, w, n):  # type: ignore[no-untyped-def]
        w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(8):
            w.write(b"2\r\nab\r\n")
            await w.drain()
            await asyncio.sleep(0.06)
        await asyncio.sleep(5)

    async with ScriptedServer(script) as srv:
        client = UpstreamClient()
        resp = await post(client, srv.url, timeout=0.15)
        got = b""
        loop = asyncio.get_running_loop()
        with pytest.raises(TimeoutError):
            async for piece in resp.content.iter_any():
                got += piece
                last = loop.time()
        assert got == b"ab" * 8  # 8 reads over ~0.48 s, each within the timeout
        assert 0.1 < loop.time() - last < 1.0  # then silence: one timeout later, not at 5 s
        resp.close()
        await client.close()


async def test_refused_connection_is_unreachable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = UpstreamClient()
    with pytest.raises(UpstreamConnectError) as info:
        await post(client, f"http://127.0.0.1:{port}/v1/x")
    assert classify(info.value, "u").type == "upstream_unreachable"


async def test_header_with_a_line_break_is_refused() -> None:
    client = UpstreamClient()
    with pytest.raises(ValueError, match="line break"):
        await client.post(
            "http://127.0.0.1:9/x",
            b"",
            {"X-A": "ok\r\nX-Injected: 1"},
            connect_timeout_s=1,
            read_timeout_s=1,
        )


async def test_connection_closed_by_the_server_while_idle_is_not_reused() -> None:
    async def script(r, w, n):  # type: ignore[no-untyped-def]
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await w.drain()
        w.close()  # keep-alive promised by default, but the server hangs up

    async with ScriptedServer(script) as srv:
        client = UpstreamClient()
        for _ in range(3):
            async with await post(client, srv.url) as resp:
                assert await resp.read() == b"ok"
            await asyncio.sleep(0.05)  # the FIN arrives while the connection is idle
        await client.close()
    assert srv.connections == 3


async def test_idle_connections_are_retired_before_the_server_drops_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agentworld.proxy.upstream import client as upstream_client

    monkeypatch.setattr(upstream_client, "_IDLE_S", 0.05)

    async def script(r, w, n):  # type: ignore[no-untyped-def]
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    async with ScriptedServer(script) as srv:
        client = UpstreamClient()
        for pause in (0.0, 0.0, 0.1):
            await asyncio.sleep(pause)
            async with await post(client, srv.url) as resp:
                assert await resp.read() == b"ok"
        await client.close()
    assert srv.connections == 2  # the third call came after the idle limit
