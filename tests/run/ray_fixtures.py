"""Shared by the `aw run --ray` tests: a fake vLLM upstream and the run's options."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentworld.run.session import RunOptions
from tests.run.test_run_rollout import _setup


@pytest.fixture
async def upstream():
    from aiohttp.test_utils import TestServer

    from agentworld.proxy.fake_upstream import FakeUpstream, make_fake_app

    server = TestServer(make_fake_app(FakeUpstream("u", reply="Final answer: 5")), host="127.0.0.1")
    await server.start_server()
    yield str(server.make_url("")).rstrip("/")
    await server.close()


def ray_opts(tmp_path: Path, url: str, function: str, pool: str | Path) -> RunOptions:
    agents, datasets = _setup(
        tmp_path,
        f'[agents.b]\nkind = "python"\nfunction = "{function}"\n'
        f'upstream = "{url}"\nmodel = "fake-model"\n',
    )
    return RunOptions(
        agent="b",
        dataset="arith",
        agents_path=agents,
        datasets_path=datasets,
        pool=Path(pool),
        n=2,
        ray="auto",
        environ={"PATH": os.environ.get("PATH", "")},
    )
