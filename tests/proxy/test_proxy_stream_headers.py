"""When a stream's headers reach the agent: as soon as the upstream's did, in the same
write as the first event when that event came with them, and with everything when the
whole stream came in one read."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from agentworld.proxy.config import UpstreamConfig
from agentworld.proxy.front.request import FrontStream
from tests.proxy.conftest import steps_of
from tests.proxy.test_upstream_client import ScriptedServer

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
STALL_S = 0.6


def sse(raw: bytes) -> bytes:
    """One raw SSE event (blank line included) as an HTTP chunk."""
    return b"%x\r\n%s\r\n" % (len(raw), raw)


def chunk(obj: Any) -> bytes:
    """A ``data:`` event of ``obj`` (JSON, or raw bytes such as ``[DONE]``) as an HTTP chunk."""
    return sse(b"data: " + (obj if isinstance(obj, bytes) else orjson.dumps(obj)) + b"\n\n")


def delta(text: str, finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}],
    }


def stalling(*, first_event_with_headers: bool) -> ScriptedServer:
    """An upstream that answers a stream in two writes with a stall between: the headers
    (with the first event, or not), then the rest."""

    async def script(reader, writer, n):  # type: ignore[no-untyped-def]
        first, rest = chunk(delta("Hel")), chunk(delta("lo", "stop")) + chunk(b"[DONE]")
        if first_event_with_headers:
            writer.write(HEAD + first)
        else:
            writer.write(HEAD)
            rest = first + rest
        await writer.drain()
        await asyncio.sleep(STALL_S)
        writer.write(rest + b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    return ScriptedServer(script)


def stream_writes(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """What the proxy passes to a stream's ``write`` from now on, aiohttp's or the front's
    (``write_eof``'s last piece is not in it)."""
    writes: list[bytes] = []
    for cls in (web.StreamResponse, FrontStream):
        real_write = cls.write

        async def counting_write(self: web.StreamResponse, data: bytes, real=real_write) -> None:
            writes.append(bytes(data))
            await real(self, data)

        monkeypatch.setattr(cls, "write", counting_write)
    return writes


def base_of(server: ScriptedServer) -> str:
    return server.url.removesuffix("/v1/x")


async def call(proxy_url: str) -> tuple[float, float, bytes]:
    """(seconds to the headers, seconds to the first event, the whole body)."""
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    async with aiohttp.ClientSession() as session:
        t0 = time.perf_counter()
        async with session.post(proxy_url + "/v1/chat/completions", json=body) as resp:
            t_head = time.perf_counter() - t0
            assert resp.status == 200
            assert resp.headers["Content-Type"] == "text/event-stream"
            got = await resp.content.readuntil(b"\n\n")
            t_first = time.perf_counter() - t0
            got += await resp.read()
    return t_head, t_first, got


def contents(body: bytes) -> list[str]:
    out = []
    for ev in body.split(b"\n\n"):
        if ev.startswith(b"data: {"):
            out.append(orjson.loads(ev[6:])["choices"][0]["delta"]["content"])
    return out


async def test_headers_go_out_at_once_when_the_first_event_is_late(make_proxy, pool) -> None:
    """An engine sends its headers when it takes the request, its first token after the
    prefill: the agent must not wait for that token to see the headers."""
    async with stalling(first_event_with_headers=False) as up:
        proxy = await make_proxy(UpstreamConfig.single(base_of(up)))
        t_head, t_first, body = await call(proxy.url)
        assert t_head < STALL_S * 0.6  # the headers did not wait for the first event
        assert t_first >= STALL_S * 0.9
        assert contents(body) == ["Hel", "lo"] and body.endswith(b"data: [DONE]\n\n")
        await proxy.stop()
    (step,) = steps_of(pool)
    assert step["status"] == "ok" and step["response"]["message"]["content"] == "Hello"


async def test_a_first_event_that_came_with_the_headers_goes_out_with_them(
    make_proxy, pool
) -> None:
    async with stalling(first_event_with_headers=True) as up:
        proxy = await make_proxy(UpstreamConfig.single(base_of(up)))
        t_head, t_first, body = await call(proxy.url)
        # Headers and first event both arrive before the upstream's stall ends.
        assert t_first < STALL_S * 0.6
        assert t_head <= t_first
        assert contents(body) == ["Hel", "lo"] and body.endswith(b"data: [DONE]\n\n")
        await proxy.stop()
    (step,) = steps_of(pool)
    assert step["status"] == "ok" and step["response"]["message"]["content"] == "Hello"


async def test_a_stream_that_came_whole_goes_out_in_one_write(
    make_proxy, pool, monkeypatch
) -> None:
    """A short answer read whole, [DONE] included, is not split into a first-event write
    and the rest: one write carries the headers, every event and [DONE]."""
    writes = stream_writes(monkeypatch)

    async def whole(reader, writer, n):  # type: ignore[no-untyped-def]
        events = chunk(delta("Hel")) + chunk(delta("lo", "stop")) + chunk(b"[DONE]")
        writer.write(HEAD + events + b"0\r\n\r\n")
        await writer.drain()

    async with ScriptedServer(whole) as up:
        proxy = await make_proxy(UpstreamConfig.single(base_of(up)))
        _, _, body = await call(proxy.url)
        assert writes == []  # all of it went with write_eof, in one write
        assert contents(body) == ["Hel", "lo"] and body.endswith(b"data: [DONE]\n\n")

        writes.clear()  # a stream whose first read is not the whole of it: the first event early
        async with stalling(first_event_with_headers=True) as slow:
            proxy2 = await make_proxy(UpstreamConfig.single(base_of(slow)))
            _, _, body = await call(proxy2.url)
        assert len(writes) == 1 and contents(writes[0]) == ["Hel"]
        assert contents(body) == ["Hel", "lo"]
        await proxy.stop()
        await proxy2.stop()
    steps = steps_of(pool)
    assert [s["response"]["message"]["content"] for s in steps] == ["Hello", "Hello"]


async def test_strict_mode_sends_a_whole_streams_events_before_the_disk_is_done(
    make_proxy, pool, monkeypatch
) -> None:
    """Strict durability holds back only [DONE] until the step is on disk: a stream read
    whole must not wait for the fsync before its first token, as a longer one would not."""
    from agentworld.proxy.recorder import Recorder

    real_steps = Recorder.steps

    async def slow_disk(self, trajectory, recs):  # type: ignore[no-untyped-def]
        await asyncio.sleep(STALL_S)
        return await real_steps(self, trajectory, recs)

    monkeypatch.setattr(Recorder, "steps", slow_disk)

    async def whole(reader, writer, n):  # type: ignore[no-untyped-def]
        events = chunk(delta("Hel")) + chunk(delta("lo", "stop")) + chunk(b"[DONE]")
        writer.write(HEAD + events + b"0\r\n\r\n")
        await writer.drain()

    async with ScriptedServer(whole) as up:
        proxy = await make_proxy(UpstreamConfig.single(base_of(up)), durability="strict")
        t0 = time.perf_counter()
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        async with (
            aiohttp.ClientSession() as session,
            session.post(proxy.url + "/v1/chat/completions", json=body) as resp,
        ):
            first = await resp.content.readuntil(b"\n\n")
            t_first = time.perf_counter() - t0
            rest = await resp.read()
            t_done = time.perf_counter() - t0
        assert t_first < STALL_S * 0.6 <= STALL_S * 0.9 <= t_done
        assert contents(first + rest) == ["Hel", "lo"] and rest.endswith(b"data: [DONE]\n\n")
        await proxy.stop()
    (step,) = steps_of(pool)
    assert step["status"] == "ok" and step["response"]["message"]["content"] == "Hello"
