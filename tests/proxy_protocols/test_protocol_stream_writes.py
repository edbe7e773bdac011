"""How a translated (Anthropic / Responses) stream reaches the agent: the headers as soon as the
upstream's, a stream read whole in one write, and the upstream connection kept for the next call."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import orjson
import pytest

from tests.proxy.conftest import steps_of
from tests.proxy.test_proxy_stream_headers import (
    HEAD,
    STALL_S,
    base_of,
    chunk,
    delta,
    sse,
    stream_writes,
)
from tests.proxy.test_upstream_client import ScriptedServer

ANTHROPIC = {
    "model": "m",
    "max_tokens": 16,
    "messages": [{"role": "user", "content": "hi"}],
    "stream": True,
}
RESPONSES = {"model": "m", "input": "hi", "stream": True}


def role() -> dict[str, Any]:
    first = delta("")
    first["choices"][0]["delta"] = {"role": "assistant", "content": ""}
    return first


KEEPALIVE = sse(b": keep-alive\n\n")  # a comment: translates to no event at all


def whole_stream() -> bytes:
    events = [role(), delta("Hel"), delta("lo", "stop")]
    return b"".join(chunk(e) for e in events) + chunk(b"[DONE]") + b"0\r\n\r\n"


def event_types(body: bytes) -> list[str]:
    out = []
    for ev in body.split(b"\n\n"):
        for line in ev.split(b"\n"):
            if line.startswith(b"data: {"):
                out.append(orjson.loads(line[6:])["type"])
    return out


@pytest.mark.parametrize(
    ("path", "body", "last"),
    [
        ("/v1/messages", ANTHROPIC, "message_stop"),
        ("/v1/responses", RESPONSES, "response.completed"),
    ],
)
async def test_a_stream_read_whole_goes_out_in_one_write_on_a_kept_connection(
    make_proxy, pool, monkeypatch, path, body, last
) -> None:
    writes = stream_writes(monkeypatch)

    async def whole(reader, writer, n):  # type: ignore[no-untyped-def]
        writer.write(HEAD + whole_stream())  # and the connection stays open
        await writer.drain()

    async with ScriptedServer(whole) as up:
        proxy = await make_proxy(base_of(up))
        async with aiohttp.ClientSession() as http:
            for _ in range(2):
                async with http.post(proxy.url + path, json=body) as r:
                    assert r.status == 200
                    got = await r.read()
                types = event_types(got)
                assert types[-1] == last and b'"Hel"' in got and b'"lo"' in got
        assert writes == []  # each answer went in one write, with write_eof
        assert up.connections == 1  # the second call reused the first one's connection
        await proxy.stop()
    assert [s["status"] for s in steps_of(pool)] == ["ok", "ok"]


@pytest.mark.parametrize("first", [chunk(role()), KEEPALIVE], ids=["first-event", "no-event"])
async def test_the_headers_do_not_wait_for_the_upstreams_next_event(
    make_proxy, pool, first
) -> None:
    """The upstream's first event came with its headers, then it stalls: the agent has the
    headers (and what that event became, if anything) before the stall ends."""

    async def stalling(reader, writer, n):  # type: ignore[no-untyped-def]
        writer.write(HEAD + first)
        await writer.drain()
        await asyncio.sleep(STALL_S)
        rest = [delta("Hel"), delta("lo", "stop")]
        writer.write(b"".join(chunk(e) for e in rest) + chunk(b"[DONE]") + b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    async with ScriptedServer(stalling) as up:
        proxy = await make_proxy(base_of(up))
        async with aiohttp.ClientSession() as http:
            t0 = time.perf_counter()
            async with http.post(proxy.url + "/v1/messages", json=ANTHROPIC) as r:
                t_head = time.perf_counter() - t0
                assert r.status == 200
                got = await r.read()
        assert t_head < STALL_S * 0.6
        assert event_types(got)[0] == "message_start" and event_types(got)[-1] == "message_stop"
        await proxy.stop()
    (step,) = steps_of(pool)
    assert step["status"] == "ok" and step["protocol"] == "anthropic.messages"


@pytest.mark.parametrize(
    ("path", "body", "last"),
    [
        ("/v1/messages", ANTHROPIC, "message_stop"),
        ("/v1/responses", RESPONSES, "response.completed"),
    ],
)
async def test_strict_mode_holds_only_the_closing_events_for_the_disk(
    make_proxy, pool, monkeypatch, path, body, last
) -> None:
    """As for chat (one pipeline): in strict durability a stream read whole sends its
    translated events at once, and only the closing events wait for the step's fsync."""
    from agentworld.proxy.recorder import Recorder

    real_steps = Recorder.steps

    async def slow_disk(self, trajectory, recs):  # type: ignore[no-untyped-def]
        await asyncio.sleep(STALL_S)
        return await real_steps(self, trajectory, recs)

    monkeypatch.setattr(Recorder, "steps", slow_disk)

    async def whole(reader, writer, n):  # type: ignore[no-untyped-def]
        writer.write(HEAD + whole_stream())
        await writer.drain()

    async with ScriptedServer(whole) as up:
        proxy = await make_proxy(base_of(up), durability="strict")
        async with aiohttp.ClientSession() as http:
            t0 = time.perf_counter()
            async with http.post(proxy.url + path, json=body) as r:
                first = await r.content.readuntil(b"\n\n")
                t_first = time.perf_counter() - t0
                rest = await r.read()
                t_done = time.perf_counter() - t0
        assert t_first < STALL_S * 0.6 <= STALL_S * 0.9 <= t_done
        types = event_types(first + rest)
        assert types[-1] == last and b'"Hel"' in first + rest
        await proxy.stop()
    (step,) = steps_of(pool)
    assert step["status"] == "ok"
