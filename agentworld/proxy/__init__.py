"""The gateway: an OpenAI-compatible proxy that records every LLM call into the pool.

Heavy imports (aiohttp) happen in the submodules; ``agentworld.proxy.command``
imports only typer so ``aw --help`` stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentworld.proxy.config import ProxyConfig, UpstreamConfig
    from agentworld.proxy.inprocess import ProxyServer

__all__ = ["ProxyConfig", "ProxyServer", "UpstreamConfig"]


def __getattr__(name: str) -> object:
    if name == "ProxyServer":
        from agentworld.proxy.inprocess import ProxyServer

        return ProxyServer
    if name in ("ProxyConfig", "UpstreamConfig"):
        from agentworld.proxy import config

        return getattr(config, name)
    raise AttributeError(name)
