"""An agent that keeps the proxy waiting (no request, a stalled body, a response it does not
read) is cut off after ``client_timeout_s``; the proxy keeps serving the others."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import openai
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from agentworld.errors import ConfigError
from agentworld.proxy.agent_conn import AgentConnections
from agentworld.proxy.config import ProxyConfig, UpstreamConfig
from tests.proxy.conftest import steps_of

TIMEOUT_S = 0.3
USER = [{"role": "user", "content": "hi"}]


async def serves(proxy: Any) -> None:
    # One retry: with a 0.3 s limit, the proxy rightly closes a fresh connection when this
    # process (the proxy's loop too) stalls between connecting and sending (a collector pass
    # late in a long suite did so once). The proxy not serving still fails.
    c = openai.AsyncOpenAI(base_url=proxy.base_url, api_key="k", max_retries=1)
    r = await c.chat.completions.create(model="m", messages=USER)
    assert r.choices[0].message.content.startswith("ok ")
    await c.close()


async def connect(port: int, *, rcvbuf: int | None = None) -> socket.socket:
    """A raw, non-blocking client socket (a small receive buffer fills up fast)."""
    sock = socket.socket()
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    return sock


async def read_to_end(sock: socket.socket, within_s: float) -> bytes:
    """Everything until the proxy closes the connection (fails if it does not, in time)."""
    loop = asyncio.get_running_loop()
    got = b""
    async with asyncio.timeout(within_s):
        while True:
            try:
                data = await loop.sock_recv(sock, 65536)
            except ConnectionResetError:
                return got
            if not data:
                return got
            got += data


def head(path: str, length: int) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


async def test_a_connection_without_a_complete_request_is_closed(make_proxy):
    proxy = await make_proxy(client_timeout_s=TIMEOUT_S)
    loop = asyncio.get_running_loop()
    silent = await connect(proxy.port)
    partial = await connect(proxy.port)
    await loop.sock_sendall(partial, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
    t0 = time.monotonic()
    for sock in (silent, partial):
        assert await read_to_end(sock, within_s=10) == b""
        sock.close()
    assert time.monotonic() - t0 >= TIMEOUT_S * 0.8  # not at once: after the timeout
    await serves(proxy)


@pytest.mark.parametrize(
    ("path", "needle"),
    [
        ("/v1/chat/completions", b'"type":"invalid_request_error"'),
        ("/v1/messages", b'"type":"error"'),  # Anthropic's own error shape
        ("/aw/trajectories", b'"type":"invalid_request_error"'),
        ("/v1/embeddings", b'"type":"invalid_request_error"'),  # passed through
    ],
)
async def test_a_request_body_that_stops_arriving_is_408_and_the_connection_closed(
    make_proxy, pool, path, needle
):
    proxy = await make_proxy(client_timeout_s=TIMEOUT_S)
    sock = await connect(proxy.port)
    await asyncio.get_running_loop().sock_sendall(sock, head(path, 200) + b'{"model": "m", ')
    answer = await read_to_end(sock, within_s=10)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert b"no bytes of the request body arrived for 0.3 s" in answer
    assert needle in answer
    assert proxy.state.stats.errors["agent_timeout"] == 1
    await serves(proxy)
    await proxy.stop()
    assert [s["status"] for s in steps_of(pool)] == ["ok"]  # only the call after it


async def test_a_slow_but_steady_body_is_read_to_its_end(make_proxy, pool):
    """The timeout is for silence, not for the whole body: pieces 0.1 s apart over 0.6 s."""
    proxy = await make_proxy(client_timeout_s=TIMEOUT_S)
    body = orjson.dumps({"model": "m", "messages": USER})
    loop = asyncio.get_running_loop()
    sock = await connect(proxy.port)
    await loop.sock_sendall(sock, head("/v1/chat/completions", len(body)))
    pieces = [body[i : i + 4] for i in range(0, len(body), 4)][:6]
    for piece in pieces:
        await asyncio.sleep(0.1)
        await loop.sock_sendall(sock, piece)
    await loop.sock_sendall(sock, body[4 * len(pieces) :])
    async with asyncio.timeout(10):
        answer = await loop.sock_recv(sock, 65536)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 200 ") and b"ok 1: hi" in answer
    assert proxy.state.stats.errors["agent_timeout"] == 0


async def stop_reading_after_the_status(proxy: Any, body: dict[str, Any]) -> socket.socket:
    """An agent that calls, reads the first 4 KB of the answer (a 200), and no more."""
    data = orjson.dumps({**body, "messages": USER})
    loop = asyncio.get_running_loop()
    sock = await connect(proxy.port, rcvbuf=4096)
    await loop.sock_sendall(sock, head("/v1/chat/completions", len(data)) + data)
    async with asyncio.timeout(10):
        assert (await loop.sock_recv(sock, 4096)).startswith(b"HTTP/1.1 200 ")
    return sock


class Firehose:
    """An upstream answering as fast as it can write: an endless stream, or one huge body."""

    EVENT = (
        b"data: "
        + orjson.dumps(
            {
                "id": "chatcmpl-f",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": "m",
                "choices": [{"index": 0, "delta": {"content": "x" * 1000}, "finish_reason": None}],
            }
        )
        + b"\n\n"
    )

    def __init__(self) -> None:
        self.cut = asyncio.Event()  # the proxy closed the connection before the end
        self.finished = False

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if not body.get("stream"):
            return web.json_response(
                {
                    "id": "chatcmpl-f",
                    "object": "chat.completion",
                    "created": 0,
                    "model": "m",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": "y" * 16_000_000},
                            "finish_reason": "stop",
                        }
                    ],
                },
                dumps=lambda o: orjson.dumps(o).decode(),
            )
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        try:
            for _ in range(200_000):  # 200 MB: far more than all the socket buffers between
                await out.write(self.EVENT * 16)
            await out.write_eof(b"data: [DONE]\n\n")
            self.finished = True
        except (ConnectionResetError, asyncio.CancelledError):
            self.cut.set()
            raise
        return out


@pytest.fixture
async def firehose() -> AsyncIterator[tuple[Firehose, str]]:
    hose = Firehose()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", hose.chat)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield hose, str(server.make_url("")).rstrip("/")
    await server.close()


async def test_an_agent_that_stops_reading_its_stream_is_cut_and_its_call_cancelled(
    make_proxy, pool, firehose
):
    hose, url = firehose
    proxy = await make_proxy(
        upstream=UpstreamConfig.single(url, engine="openai"),
        client_timeout_s=TIMEOUT_S,
        max_response_bytes=1 << 31,
    )
    sock = await stop_reading_after_the_status(proxy, {"model": "m", "stream": True})
    # The proxy gives up on it, and so on the upstream stream.
    async with asyncio.timeout(20):
        while not proxy.state.stats.steps["cancelled"]:
            await asyncio.sleep(0.05)
        await hose.cut.wait()
    sock.close()
    assert not hose.finished
    assert proxy.state.stats.errors["agent_timeout"] == 1
    await proxy.stop()
    (step,) = steps_of(pool)
    assert step["status"] == "cancelled" and step["error"]["type"] == "client_disconnected"
    assert step["response"]["message"]["content"].startswith("x" * 1000)  # what came is kept


async def test_an_agent_that_does_not_read_a_large_answer_is_cut(make_proxy, firehose, fake):
    """A unary body is written after the handler returned: still watched."""
    _, url = firehose
    proxy = await make_proxy(
        agents={
            "big": UpstreamConfig.single(url, engine="openai"),
            "m": UpstreamConfig.single(fake[1]),
        },
        client_timeout_s=TIMEOUT_S,
    )
    sock = await stop_reading_after_the_status(proxy, {"model": "big"})
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(20):
        while not proxy.state.stats.errors["agent_timeout"]:
            await asyncio.sleep(0.05)
    with pytest.raises((ConnectionResetError, BrokenPipeError)):
        for _ in range(10_000):  # the proxy dropped the connection: what is left then ends
            if not await loop.sock_recv(sock, 1 << 20):
                raise ConnectionResetError
    sock.close()
    await serves(proxy)


def test_a_watched_connection_is_stalled_only_when_paused_at_every_check():
    class Proto:
        transport: Any = object()
        writing_paused = False

    conns, p = AgentConnections(), Proto()
    conns.add(p)
    p.writing_paused = True
    assert conns.stalled(10.0, 1.0) == []  # first seen paused
    assert conns.stalled(10.5, 1.0) == []
    p.writing_paused = False
    assert conns.stalled(10.9, 1.0) == []  # it wrote again: the clock restarts
    p.writing_paused = True
    assert conns.stalled(11.5, 1.0) == []
    assert conns.stalled(12.4, 1.0) == []
    assert conns.stalled(12.5, 1.0) == [p]
    assert conns.paused_since == {}  # reported once
    conns.add(p)
    p.transport = None  # closed
    assert conns.stalled(20.0, 1.0) == [] and conns.paused_since == {}


def test_client_timeout_must_be_positive():
    with pytest.raises(ConfigError, match="--client-timeout-s"):
        ProxyConfig(default_upstream=UpstreamConfig.single("http://x:1"), client_timeout_s=0)


async def test_each_call_arms_its_own_upstream_deadline_on_a_reused_connection(make_proxy, fake):
    """Agent ``slow`` (600 s) leaves an idle connection whose read timer is far off; agent
    ``quick`` (0.3 s) reuses it for a call the upstream hangs on: its 504 comes in its own
    0.3 s, not when the earlier call's timer would have fired."""
    fake[0].hang_s = 30.0
    proxy = await make_proxy(
        agents={
            "slow": UpstreamConfig(urls=(fake[1],), timeout_s=600.0),
            "quick": UpstreamConfig(urls=(fake[1],), timeout_s=TIMEOUT_S),
        }
    )
    c = openai.AsyncOpenAI(base_url=proxy.url + "/a/slow/v1", api_key="k", max_retries=0)
    await c.chat.completions.create(model="m", messages=USER)
    await c.close()
    assert proxy.state.upstream is not None and sum(map(len, proxy.state.upstream._idle.values()))
    c = openai.AsyncOpenAI(base_url=proxy.url + "/a/quick/v1", api_key="k", max_retries=0)
    t0 = time.perf_counter()
    with pytest.raises(openai.APIStatusError) as err:
        async with asyncio.timeout(10):
            await c.chat.completions.create(model="hang", messages=USER)
    await c.close()
    assert err.value.status_code == 504
    assert time.perf_counter() - t0 < 5
