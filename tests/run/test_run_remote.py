"""`aw run --remote`: the in-process proxy's sealed shards go up to the object store."""

from __future__ import annotations

import pytest

from agentworld.pool import Pool
from agentworld.pool.opener import open_pool
from agentworld.run.session import RunOptions, run_session
from tests import s3_fixture
from tests.run.test_run_rollout import _setup

s3_endpoint, s3_url = s3_fixture.s3_endpoint, s3_fixture.s3_url  # the fixtures, used here


async def test_run_uploads_its_shards_to_the_remote(tmp_path, s3_url):
    pytest.importorskip(
        "obstore", reason="obstore is not installed: pip install 'agentworld[remote]'"
    )
    from aiohttp.test_utils import TestServer

    from agentworld.proxy.fake_upstream import FakeUpstream, make_fake_app

    upstream = TestServer(
        make_fake_app(FakeUpstream("u", reply="Final answer: 5")), host="127.0.0.1"
    )
    await upstream.start_server()
    try:
        url = str(upstream.make_url("")).rstrip("/")
        agents, datasets = _setup(
            tmp_path,
            '[agents.b]\nkind = "python"\nfunction = "agentworld.run.agents.baseline:solve"\n'
            f'upstream = "{url}"\nmodel = "fake-model"\n',
        )
        opts = RunOptions(
            agent="b", dataset="arith", agents_path=agents, datasets_path=datasets,
            pool=tmp_path / "pool", n=2, remote=s3_url,
        )  # fmt: skip
        report, _ = await run_session(opts)
    finally:
        await upstream.close()
    assert [r.status for r in report.results] == ["done"] * 6
    remote = open_pool(s3_url)
    assert remote.index().stats()["trajectories_by_status"] == {"done": 6}
    local = Pool.open(tmp_path / "pool")
    assert {p.name for p in local.layout.shard_paths()} == set(remote.layout.mirror.listing)


@pytest.mark.parametrize(
    ("extra", "message"),
    [({"proxy_url": "http://127.0.0.1:9"}, "drop --proxy"), ({"remote": "s3://b/p"}, "--pool s3")],
)
async def test_ray_refuses_flags_it_replaces(tmp_path, extra, message):
    pytest.importorskip("ray", reason="ray is not installed: pip install 'agentworld[ray]'")
    from agentworld.errors import ConfigError

    agents, datasets = _setup(
        tmp_path,
        '[agents.b]\nkind = "python"\nfunction = "agentworld.run.agents.baseline:solve"\n'
        'upstream = "http://127.0.0.1:9"\n',
    )
    opts = RunOptions(
        agent="b", dataset="arith", agents_path=agents, datasets_path=datasets,
        pool=tmp_path / "pool", ray="auto", **extra,
    )  # fmt: skip
    with pytest.raises(ConfigError, match=message):
        await run_session(opts)
