"""Fixtures: a fake vLLM chat upstream, fake Anthropic / Responses upstreams, and proxies over them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from agentworld.pool import Pool
from agentworld.proxy.config import ProxyConfig, UpstreamConfig
from agentworld.proxy.fake_upstream import FakeUpstream, make_fake_app
from agentworld.proxy.inprocess import ProxyServer
from tests.proxy_protocols.fakes import FakeAnthropic, FakeResponses, make_fake_protocols_app


@pytest.fixture
async def chat_fake() -> AsyncIterator[tuple[FakeUpstream, str]]:
    state = FakeUpstream("vllm")
    server = TestServer(make_fake_app(state), host="127.0.0.1")
    await server.start_server()
    yield state, str(server.make_url("")).rstrip("/")
    await server.close()


@pytest.fixture
async def native_fake() -> AsyncIterator[tuple[FakeAnthropic, FakeResponses, str]]:
    a, r = FakeAnthropic(), FakeResponses()
    server = TestServer(make_fake_protocols_app(a, r), host="127.0.0.1")
    await server.start_server()
    yield a, r, str(server.make_url("")).rstrip("/")
    await server.close()


ProxyFactory = Callable[..., Awaitable[ProxyServer]]


@pytest.fixture
async def make_proxy(pool: Pool) -> AsyncIterator[ProxyFactory]:
    started: list[ProxyServer] = []

    async def make(url: str, *, mode: str | None = None, **kw: Any) -> ProxyServer:
        up = UpstreamConfig(urls=(url,), protocol_mode=mode, engine=kw.pop("engine", "vllm"))
        kw.setdefault("restore", False)
        server = ProxyServer(ProxyConfig(default_upstream=up, **kw), pool)
        await server.start()
        started.append(server)
        return server

    yield make
    for s in started:
        await s.stop()


@pytest.fixture
async def translating(make_proxy: ProxyFactory, chat_fake: Any) -> ProxyServer:
    return await make_proxy(chat_fake[1])


@pytest.fixture
async def passing(make_proxy: ProxyFactory, native_fake: Any) -> ProxyServer:
    return await make_proxy(native_fake[2], mode="passthrough")


def steps_of(pool: Pool) -> list[dict[str, Any]]:
    """Step records in the pool, in step order (call after the proxy stopped)."""
    steps = [r for r in pool.iter_records() if r["kind"] == "step"]
    return sorted(steps, key=lambda r: (r["trajectory"], r["index"]))
