"""Strict durability: every answered request survives a SIGKILL of the proxy process."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import openai
import pytest

from agentworld.pool import Pool

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def wait_healthy(url: str, proc: subprocess.Popen[bytes]) -> None:
    async with aiohttp.ClientSession() as s:
        for _ in range(600):
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            try:
                async with s.get(url + "/aw/health") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise AssertionError("proxy did not start")


@contextlib.asynccontextmanager
async def proxy_process(
    pool_path: Path, upstream: str, *args: str
) -> AsyncIterator[tuple[subprocess.Popen[bytes], str]]:
    """`aw proxy` in its own process, healthy: (the process, its URL); killed if still up."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "agentworld.proxy", "--pool", str(pool_path)]
    cmd += ["--upstream", upstream, "--port", str(port), *args]
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        await wait_healthy(url, proc)
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stderr:
            proc.stderr.close()


@pytest.mark.slow
async def test_strict_durability_survives_sigkill(tmp_path, fake):
    pool_path = tmp_path / "pool"
    answered: list[str] = []
    async with proxy_process(pool_path, fake[1], "--durability", "strict") as (proc, url):
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="k", max_retries=0, timeout=10)

        async def agent(n: int) -> None:
            for i in range(50):
                try:
                    stream = i % 2 == 1
                    msgs = [{"role": "user", "content": f"agent {n} call {i}"}]
                    if stream:
                        chunks = [
                            c
                            async for c in await client.chat.completions.create(
                                model="m", messages=msgs, stream=True
                            )
                        ]
                        answered.append(chunks[0].id)
                    else:
                        r = await client.chat.completions.create(model="m", messages=msgs)
                        answered.append(r.id)
                except openai.APIError:
                    return  # the proxy is gone
                if len(answered) == 40:
                    # Right after an answer, while other calls are in flight: the worst moment.
                    proc.send_signal(signal.SIGKILL)

        await asyncio.gather(*(agent(n) for n in range(8)))
        await client.close()
        await asyncio.to_thread(proc.wait, 30)
    assert proc.returncode == -signal.SIGKILL
    assert len(answered) >= 40
    pool = Pool.open(pool_path)  # recovers the dead proxy's journal
    stored = {
        s["response"]["id"]
        for s in pool.iter_records()
        if s["kind"] == "step" and s["status"] == "ok"
    }
    missing = set(answered) - stored
    assert not missing, f"{len(missing)} answered steps lost"


@pytest.mark.slow
async def test_sigterm_lets_the_calls_in_flight_finish_and_records_them(tmp_path, fake):
    """How systemd or Kubernetes stop a proxy: the streams under way run to their end,
    their steps reach the pool, and the process exits 0."""
    pool_path = tmp_path / "pool"
    async with proxy_process(pool_path, fake[1]) as (proc, url):
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="k", max_retries=0, timeout=30)
        started = asyncio.Event()

        async def agent(n: int) -> str:
            msgs = [{"role": "user", "content": f"agent {n}"}]
            stream = await client.chat.completions.create(model="slow", messages=msgs, stream=True)
            text = []
            async for chunk in stream:  # the fake waits 50 ms between events
                started.set()
                if chunk.choices:
                    text.append(chunk.choices[0].delta.content or "")
            return "".join(text)

        calls = [asyncio.create_task(agent(n)) for n in range(3)]
        await started.wait()
        proc.send_signal(signal.SIGTERM)
        texts = await asyncio.gather(*calls)
        await client.close()
        assert all(t.startswith("ok ") for t in texts)
        assert await asyncio.to_thread(proc.wait, 30) == 0
    steps = [r for r in Pool.open(pool_path).iter_records() if r["kind"] == "step"]
    assert sorted(s["status"] for s in steps) == ["ok"] * 3
