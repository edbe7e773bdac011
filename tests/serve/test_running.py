"""`aw serve`'s serving loop: the first SIGTERM/SIGINT lets requests finish, the next aborts them."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import signal
import threading
from typing import Any

import aiohttp
import orjson
import pytest

from agentworld import listen
from agentworld.serve import running
from agentworld.serve.engine import Engine
from agentworld.serve.server import make_app


async def _until(cond: Any) -> None:
    for _ in range(1000):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("never happened")


@pytest.mark.parametrize("second_signal", [False, True])
async def test_a_signal_stops_gracefully_and_a_second_aborts_what_is_in_flight(
    fresh_engine: Engine, monkeypatch: pytest.MonkeyPatch, second_signal: bool
):
    # The engine thread waits after each token until the test lets it go, so the request
    # is still in flight whatever the signals meet.
    gate = threading.Event()
    real_sample = fresh_engine._sample
    sampled: list[int] = []

    def gated_sample(logits: Any, active: Any) -> Any:
        out = real_sample(logits, active)
        sampled.append(len(active))
        gate.wait(timeout=60)
        return out

    monkeypatch.setattr(fresh_engine, "_sample", gated_sample)
    socks = listen.bind("127.0.0.1", 0, "aw serve")
    port = listen.port_of(socks)
    out = io.StringIO()
    server = asyncio.ensure_future(
        running.serve(make_app(fresh_engine), socks, fresh_engine, "aw serve: up", out)
    )
    try:
        await _until(lambda: "aw serve: up" in out.getvalue())
        body = {"prompt": [5, 6, 7], "max_tokens": 5, "ignore_eos": True, "stream": True}
        async with aiohttp.ClientSession() as session:
            url = f"http://127.0.0.1:{port}/v1/completions"
            async with session.post(url, json=body) as resp:
                assert resp.status == 200
                await _until(lambda: sampled)  # one token sampled, the rest held
                os.kill(os.getpid(), signal.SIGTERM)
                await _until(lambda: "stopping" in out.getvalue())
                assert "1 request in flight finish first" in out.getvalue()
                assert not server.done()  # it waits for the request
                if second_signal:
                    os.kill(os.getpid(), signal.SIGINT)
                    await _until(lambda: "aborting 1 request in flight" in out.getvalue())
                gate.set()
                rest = (await resp.read()).decode()
        events = [orjson.loads(e[6:]) for e in rest.splitlines() if e.startswith("data: {")]
        assert rest.endswith("data: [DONE]\n\n")
        if second_signal:
            assert events[-1]["error"]["message"] == running.SHUTDOWN_REASON
        else:  # the answer is whole
            assert events[-1]["choices"][0]["finish_reason"] == "length"
            assert not any("error" in e for e in events)
        await asyncio.wait_for(server, 30)
        assert out.getvalue().endswith("aw serve: stopped\n")
    finally:
        gate.set()
        if not server.done():  # a failed test must not leave its signal handlers behind
            server.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await server
