"""Fixtures: a fake vLLM upstream, a temporary pool, and proxies in front of them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from agentworld.pool import Pool
from agentworld.proxy.config import ProxyConfig, UpstreamConfig
from agentworld.proxy.fake_upstream import FakeUpstream, make_fake_app
from agentworld.proxy.inprocess import ProxyServer
from agentworld.raw_ids import RawIds


@pytest.fixture
async def fake() -> AsyncIterator[tuple[FakeUpstream, str]]:
    state = FakeUpstream("a")
    server = TestServer(make_fake_app(state), host="127.0.0.1")
    await server.start_server()
    yield state, str(server.make_url("")).rstrip("/")
    await server.close()


@pytest.fixture
def raw_made(monkeypatch) -> list[int]:
    """How many RawIds were made: proof that the long path, not the parser, carried the ids."""
    made: list[int] = []
    original = RawIds.from_json.__func__

    def counting(cls, data, max_count):
        got = original(cls, data, max_count)
        if got is not None:
            made.append(len(got))
        return got

    monkeypatch.setattr(RawIds, "from_json", classmethod(counting))
    return made


@pytest.fixture
def pool(tmp_path: Any) -> Pool:
    return Pool.create(tmp_path / "pool")


ProxyFactory = Callable[..., Awaitable[ProxyServer]]


@pytest.fixture
async def make_proxy(pool: Pool, fake: tuple[FakeUpstream, str]) -> AsyncIterator[ProxyFactory]:
    started: list[ProxyServer] = []

    async def make(upstream: UpstreamConfig | None = None, **kw: Any) -> ProxyServer:
        if upstream is None and "agents" not in kw:
            upstream = UpstreamConfig.single(fake[1])
        server = ProxyServer(ProxyConfig(default_upstream=upstream, **kw), pool)
        await server.start()
        started.append(server)
        return server

    yield make
    for s in started:
        await s.stop()


@pytest.fixture
async def proxy(make_proxy: ProxyFactory) -> ProxyServer:
    return await make_proxy()


def records_of(pool: Pool) -> list[dict[str, Any]]:
    """Every record in the pool, journals included (call after the proxy stopped or flushed)."""
    return list(pool.iter_records())


def steps_of(pool: Pool) -> list[dict[str, Any]]:
    return [r for r in records_of(pool) if r["kind"] == "step"]


def ends_of(pool: Pool) -> list[dict[str, Any]]:
    return [r for r in records_of(pool) if r["kind"] == "end"]
