"""Strict durability: every answered request survives a SIGKILL of the proxy process."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
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


@pytest.mark.slow
async def test_strict_durability_survives_sigkill(tmp_path, fake):
    pool_path = tmp_path / "pool"
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentworld.proxy",
            "--pool",
            str(pool_path),
            "--upstream",
            fake[1],
            "--durability",
            "strict",
            "--port",
            str(port),
        ],
        env=env,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    answered: list[str] = []
    try:
        await wait_healthy(url, proc)
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
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stderr:
            proc.stderr.close()
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
