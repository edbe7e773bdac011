"""Every recorded generation route goes through the one pipeline, each format by its adapter."""

from __future__ import annotations

import pytest

from agentworld.proxy.adapters.base import Adapter, Relay
from agentworld.proxy.adapters.openai import CHAT, COMPLETIONS
from agentworld.proxy.adapters.translated import MESSAGES, RESPONSES
from agentworld.proxy.app import ROUTE_PREFIXES, make_app
from agentworld.proxy.config import ProxyConfig, UpstreamConfig
from agentworld.proxy.pipeline import handler

ADAPTERS = [CHAT, COMPLETIONS, MESSAGES, RESPONSES]


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.protocol)
def test_each_wire_format_has_the_one_adapter_interface(adapter) -> None:
    assert isinstance(adapter, Adapter)


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.protocol)
@pytest.mark.parametrize("mode", ["translate", "passthrough"])
def test_each_relay_has_the_one_relay_interface(adapter, mode, monkeypatch) -> None:
    from types import SimpleNamespace

    from agentworld.proxy.adapters.openai import Injected

    call = SimpleNamespace(injected=Injected(), metadata={})
    x = SimpleNamespace(adapter=adapter, call=call, body={}, rid="r", history=[], mode=mode)
    x.translate = mode == "translate"
    assert isinstance(adapter.relay(x, "http://upstream"), Relay)


def test_every_generation_route_is_served_by_the_pipeline(pool, monkeypatch) -> None:
    """Under every route prefix, the four formats' POST routes reach ``handler.generate``
    with their own adapter (and nothing else serves them)."""
    seen = []

    async def generate(request, adapter):  # type: ignore[no-untyped-def]
        seen.append(adapter)

    monkeypatch.setattr(handler, "generate", generate)
    app = make_app(ProxyConfig(default_upstream=UpstreamConfig.single("http://u")), pool)
    posts = {
        r.resource.canonical: r.handler
        for r in app.router.routes()
        if r.method == "POST" and r.resource is not None
    }
    import asyncio

    for prefix in ROUTE_PREFIXES:
        for adapter in ADAPTERS:
            asyncio.run(posts[prefix + adapter.path](None))
    assert seen == [a for _ in ROUTE_PREFIXES for a in ADAPTERS]
