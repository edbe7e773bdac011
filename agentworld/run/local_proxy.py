"""Start the proxy in-process for `aw run` when no --proxy URL is given.

This is the one place the rollout code touches the proxy's Python API;
everything else talks to it over HTTP.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

from agentworld.config import AgentConfig
from agentworld.errors import ConfigError
from agentworld.run.upstream_probe import check_upstreams


@asynccontextmanager
async def local_proxy(
    *,
    pool_path: Path,
    agent: AgentConfig,
    environ: Mapping[str, str],
    token: str | None = None,
) -> AsyncIterator[str]:
    """A proxy on a free 127.0.0.1 port recording into ``pool_path``; yields its base URL."""
    where = f"{agent.where.path}: agents.{agent.name}"
    if "upstream" not in agent.upstream:
        raise ConfigError(
            f"{agent.where.path}: agent {agent.name!r}: upstream: required to start a proxy"
            " in-process (or pass --proxy URL of a running `aw proxy`)"
        )
    try:
        from agentworld.proxy.config import ProxyConfig, UpstreamConfig, resolve_keys
        from agentworld.proxy.inprocess import ProxyServer
    except ImportError as exc:
        raise ConfigError(
            f"cannot start a proxy in-process ({exc}); start `aw proxy` and pass --proxy URL"
        ) from None
    upstream = UpstreamConfig.from_table(agent.upstream, where)
    await check_upstreams(agent.name, upstream.urls, str(agent.where.path))
    agents = {agent.name: upstream}
    config = ProxyConfig(
        agents=agents,
        api_keys=resolve_keys(agents, None, environ, str(agent.where.path)),
        auth_token=token,
        in_process=True,  # on `aw run`'s loop, beside its agents
    )
    async with ProxyServer(config, pool_path, host="127.0.0.1", port=0) as server:
        yield server.url
