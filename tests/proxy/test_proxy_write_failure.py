"""The proxy while the pool cannot be written: refuse (503 + Retry-After) or serve unrecorded
on request, count lost steps as lost, answer /aw/health 503, and recover by itself."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from agentworld.pool import Pool
from agentworld.proxy import write_health
from agentworld.proxy.config import ConfigError, ProxyConfig, UpstreamConfig
from tests.disk_full import DiskFull
from tests.proxy.conftest import steps_of

pytestmark = pytest.mark.timeout(60)

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
MESSAGES = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(autouse=True)
def fast_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(write_health, "PROBE_INTERVAL_S", 0.05)


async def _until(check: Any, timeout_s: float = 10.0) -> None:
    for _ in range(int(timeout_s / 0.02)):
        if await check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition never held")


async def _get(s: aiohttp.ClientSession, url: str) -> tuple[int, Any]:
    async with s.get(url) as r:
        return r.status, await (r.json() if "json" in r.content_type else r.text())


async def _post(s: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> aiohttp.ClientResponse:
    async with s.post(url, json=body) as r:
        await r.read()
        return r


async def test_batched_refuses_while_full_counts_lost_and_recovers(
    make_proxy, pool: Pool, fake, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = DiskFull(monkeypatch, pool.root, take=100)
    proxy = await make_proxy(durability="batched")
    writer = proxy.state.writer
    async with aiohttp.ClientSession() as s:
        assert (await _post(s, proxy.base_url + "/chat/completions", CHAT)).status == 200
        await asyncio.to_thread(writer.flush)
        disk.full = True
        answered = await _post(s, proxy.base_url + "/chat/completions", CHAT)
        assert answered.status == 200  # answered before the write failed: lost, and counted

        async def failing() -> bool:
            return writer.failing and proxy.state.stats.steps["lost"] == 1

        await _until(failing)
        status, health = await _get(s, proxy.url + "/aw/health")
        assert status == 503 and health["status"] == "degraded"
        assert "No space left" in health["writer_error"]
        _, stats = await _get(s, proxy.url + "/aw/stats")
        assert stats["steps"]["ok"] == 1 and stats["steps"]["lost"] == 1
        _, metrics = await _get(s, proxy.url + "/metrics")
        assert 'aw_proxy_steps_total{status="lost"} 1.0' in metrics
        assert 'aw_proxy_steps_total{status="ok"} 1.0' in metrics

        calls_before = len(fake[0].requests)
        refused = await _post(s, proxy.base_url + "/chat/completions", CHAT)
        assert refused.status == 503 and refused.headers["Retry-After"].isdigit()
        async with s.post(proxy.base_url + "/chat/completions", json=CHAT) as r:
            body = await r.json()
        assert body["error"]["type"] == "service_unavailable"
        assert "No space left" in body["error"]["message"]
        async with s.post(proxy.base_url + "/messages", json=MESSAGES) as r:
            assert r.status == 503 and "Retry-After" in r.headers
            body = await r.json()
        assert body["type"] == "error" and "No space left" in body["error"]["message"]
        assert len(fake[0].requests) == calls_before  # refused before the upstream

        disk.full = False

        async def healthy() -> bool:
            return (await _get(s, proxy.url + "/aw/health"))[0] == 200

        await _until(healthy)
        assert (await _post(s, proxy.base_url + "/chat/completions", CHAT)).status == 200
    await asyncio.to_thread(writer.flush)
    assert [st["status"] for st in steps_of(pool)] == ["ok", "ok"]


async def test_serve_mode_answers_unrecorded_and_counts_the_loss(
    make_proxy, pool: Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = DiskFull(monkeypatch, pool.root)
    proxy = await make_proxy(durability="batched", on_write_failure="serve")
    writer = proxy.state.writer
    disk.full = True
    async with aiohttp.ClientSession() as s:
        for _ in range(3):
            assert (await _post(s, proxy.base_url + "/chat/completions", CHAT)).status == 200
            await _until(lambda: asyncio.sleep(0, writer.stats["lost"] > 0))
        status, _ = await _get(s, proxy.url + "/aw/health")
        assert status == 503

        async def all_lost() -> bool:
            return proxy.state.stats.steps["lost"] == 3

        await _until(all_lost)
        assert proxy.state.stats.steps["ok"] == 0
        disk.full = False
        assert (await _post(s, proxy.base_url + "/chat/completions", CHAT)).status == 200
        await asyncio.to_thread(writer.flush)
        assert (await _get(s, proxy.url + "/aw/health"))[0] == 200


async def test_strict_refuses_up_front_once_a_write_failed(
    make_proxy, pool: Pool, fake, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = DiskFull(monkeypatch, pool.root)
    monkeypatch.setattr(write_health, "PROBE_INTERVAL_S", 3600)
    proxy = await make_proxy(durability="strict")
    disk.full = True
    async with aiohttp.ClientSession() as s:
        first = await _post(s, proxy.base_url + "/chat/completions", CHAT)
        assert first.status == 503  # the upstream answered; the step could not be stored
        assert first.headers["Retry-After"].isdigit()  # as the refusals that follow say
        calls = len(fake[0].requests)
        second = await _post(s, proxy.base_url + "/chat/completions", CHAT)
        assert second.status == 503 and "Retry-After" in second.headers
        assert len(fake[0].requests) == calls


async def test_strict_white_box_step_or_end_not_stored_is_a_503_with_retry_after(
    make_proxy, pool: Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = DiskFull(monkeypatch, pool.root)
    monkeypatch.setattr(write_health, "PROBE_INTERVAL_S", 3600)
    proxy = await make_proxy(durability="strict")
    async with aiohttp.ClientSession() as s:
        async with s.post(proxy.url + "/aw/trajectories", json={}) as r:
            assert r.status == 200
            tid = (await r.json())["trajectory"]
        disk.full = True
        step = {"trajectory": tid, "index": 0, "messages": CHAT["messages"], "completion": "4"}
        async with s.post(proxy.url + "/aw/steps", json=step) as r:
            assert r.status == 503 and r.headers["Retry-After"].isdigit()
            body = await r.json()
        assert "could not be recorded durably" in body["error"]["message"]
        disk.full = False
        assert proxy.state.writer.probe()  # writes again (its probe, run rather than waited for)
        async with s.post(proxy.url + "/aw/steps", json=step) as r:
            assert r.status == 200, await r.text()  # the index was freed for the retry
        disk.full = True
        async with s.post(f"{proxy.url}/aw/trajectories/{tid}/complete", json={}) as r:
            assert r.status == 503 and r.headers["Retry-After"].isdigit()
            assert "end record could not be stored" in (await r.json())["error"]["message"]


def test_serve_needs_batched_durability() -> None:
    with pytest.raises(ConfigError, match="on-write-failure serve needs --durability batched"):
        ProxyConfig(
            default_upstream=UpstreamConfig.single("http://127.0.0.1:1"),
            durability="strict",
            on_write_failure="serve",
        )
    with pytest.raises(ConfigError, match="--on-write-failure"):
        ProxyConfig(
            default_upstream=UpstreamConfig.single("http://127.0.0.1:1"),
            on_write_failure="ignore",  # type: ignore[arg-type]
        )
