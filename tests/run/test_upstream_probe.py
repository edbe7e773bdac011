"""`aw run` checks that something listens at the agent's model server before its episodes."""

from __future__ import annotations

import asyncio
import logging
import socket

import pytest

from agentworld.errors import UpstreamError
from agentworld.pool import Pool
from agentworld.run import upstream_probe
from agentworld.run.session import RunOptions, run_session
from tests.run.test_run_rollout import _setup


def closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_a_run_whose_model_server_is_down_stops_before_its_first_episode(tmp_path):
    url = f"http://127.0.0.1:{closed_port()}/v1"
    agents, datasets = _setup(
        tmp_path,
        '[agents.b]\nkind = "python"\nfunction = "agentworld.run.agents.baseline:solve"\n'
        f'upstream = "{url}"\n',
    )
    opts = RunOptions(
        agent="b", dataset="arith", agents_path=agents, datasets_path=datasets,
        pool=tmp_path / "pool", n=2,
    )  # fmt: skip
    with pytest.raises(UpstreamError) as caught:
        await run_session(opts)
    message = str(caught.value)
    assert "agent 'b'" in message and url.removesuffix("/v1") in message
    assert "connection refused" in message and "agents.toml" in message
    assert caught.value.exit_code == 8
    assert Pool.open(tmp_path / "pool").index().trajectories(limit=None) == []  # no episode ran


async def test_the_embedded_servers_port_gets_the_aw_serve_hint(monkeypatch):
    port = closed_port()
    monkeypatch.setattr(upstream_probe, "EMBEDDED_PORT", port)
    with pytest.raises(UpstreamError, match=r"`aw serve`"):
        await upstream_probe.check_upstreams("math", [f"http://127.0.0.1:{port}"], "agents.toml")
    with pytest.raises(UpstreamError) as other:
        await upstream_probe.check_upstreams("math", [f"http://localhost:{closed_port()}"], "x")
    assert "aw serve" not in str(other.value)


async def test_one_url_down_among_several_is_a_warning_and_the_run_goes_on(caplog):
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    up = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    down = f"http://127.0.0.1:{closed_port()}"
    try:
        with caplog.at_level(logging.WARNING):
            await upstream_probe.check_upstreams("math", [up], "agents.toml")
            assert not caplog.records
            await upstream_probe.check_upstreams("math", [down, up], "agents.toml")
    finally:
        server.close()
        await server.wait_closed()
    (record,) = caplog.records
    assert down in record.getMessage() and up not in record.getMessage()
