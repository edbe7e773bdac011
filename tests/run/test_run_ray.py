"""`aw run --ray` on a local Ray cluster the test starts: a proxy actor per node, groups as Ray
tasks pinned beside it, shards shipped to the shared pool (a folder or s3://), and a group whose
process dies ends as an infrastructure failure."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from aw_run_fakes import HERE, REPO

from agentworld.pool import Pool
from agentworld.pool.opener import open_pool
from agentworld.run.session import run_session
from tests import s3_fixture
from tests.run import ray_fixtures
from tests.run.ray_fixtures import ray_opts

pytestmark = pytest.mark.slow
upstream = ray_fixtures.upstream  # the fixture, used here
s3_endpoint, s3_url = s3_fixture.s3_endpoint, s3_fixture.s3_url  # the fixtures, used here


@pytest.fixture(scope="module")
def ray_cluster(request):
    ray = pytest.importorskip("ray", reason="ray is not installed: pip install 'agentworld[ray]'")
    # Workers are new processes: they find this tree and the test agents through PYTHONPATH,
    # and the S3 server through the AWS_* variables the node had when it started, as a
    # real node has its credentials (never forwarded by the driver).
    saved = dict(os.environ)
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), str(HERE), *filter(None, [old])])
    notes = request.getfixturevalue("tmp_path_factory").mktemp("notes")
    os.environ["AW_NODE_NOTES"] = str(notes)  # where test agents say they are running
    try:
        os.environ.update(s3_fixture.s3_env(request.getfixturevalue("s3_endpoint")))
    except pytest.skip.Exception:
        pass  # no S3 server here: the object-store test skips, the others run
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    except Exception as exc:
        pytest.skip(f"a local Ray cluster could not start: {exc}")
    yield ray
    ray.shutdown()
    os.environ.clear()
    os.environ.update(saved)


async def test_ray_run_records_through_node_proxies_into_the_shared_pool(
    tmp_path, ray_cluster, upstream
):
    opts = ray_opts(tmp_path, upstream, "agentworld.run.agents.baseline:solve", tmp_path / "pool")
    report, summary = await run_session(opts)
    assert sorted((r.task, r.status, r.reward) for r in report.results) == [
        ("t0", "done", 1.0), ("t0", "done", 1.0), ("t1", "done", 0.0),
        ("t1", "done", 0.0), ("t2", "done", 0.0), ("t2", "done", 0.0),
    ]  # fmt: skip
    assert summary["completion_tokens"] > 0  # the summary read the shared pool
    pool = Pool.open(tmp_path / "pool")
    recs = list(pool.iter_records())
    pool.close()
    ends = {r["trajectory"]: r for r in recs if r["kind"] == "end"}
    steps = [r for r in recs if r["kind"] == "step"]
    assert len(ends) == 6 and len(steps) == 6
    # Each group's two episodes share one group id, in steps and ends alike.
    assert len({s["group"] for s in steps}) == 3
    assert all(ends[s["trajectory"]]["group"] == s["group"] for s in steps)
    # Recorded by the node's proxy, shipped as sealed shards: no journal in the shared pool.
    assert not list((tmp_path / "pool" / "journals").glob("*.journal"))


async def test_ray_run_into_an_object_store_pool(tmp_path, ray_cluster, upstream, s3_url):
    opts = ray_opts(tmp_path, upstream, "agentworld.run.agents.baseline:solve", s3_url)
    report, _ = await run_session(opts)
    assert [r.status for r in report.results] == ["done"] * 6
    remote = open_pool(s3_url)
    assert remote.index().stats()["trajectories_by_status"] == {"done": 6}
    # The secret reached neither the node's pool nor Ray's own logs.
    from ray._private.worker import _global_node

    logs = Path(_global_node.get_session_dir_path())
    for root in (logs, Path(os.environ["AW_HOME"])):
        for f in root.rglob("*"):
            if f.is_file():
                assert s3_fixture.SECRET.encode() not in f.read_bytes(), f


async def test_a_group_whose_process_dies_ends_as_an_infrastructure_failure(
    tmp_path, ray_cluster, upstream, test_agents
):
    opts = ray_opts(tmp_path, upstream, f"{test_agents}:die_after_one_call", tmp_path / "pool")
    report, _ = await run_session(opts)
    lost = [r for r in report.results if r.task == "t1"]
    assert [r.status for r in lost] == ["failed", "failed"]
    assert all(r.error["type"] == "proxy" for r in lost)
    assert sorted(r.status for r in report.results if r.task != "t1") == ["done"] * 4
    # What they recorded reached the pool through the node's proxy (the episode that got
    # its call in before the process died: one or both), and ends as "infrastructure".
    pool = Pool.open(tmp_path / "pool")
    by_status = pool.index().stats()["trajectories_by_status"]
    ends = [r for r in pool.iter_records() if r["kind"] == "end"]
    pool.close()
    assert "open" not in by_status
    assert sorted(e["status"] for e in ends if e["task"] != "t1") == ["done"] * 4
    lost_ends = [e for e in ends if e["task"] == "t1"]
    assert 1 <= len(lost_ends) <= 2
    assert {(e["status"], e["error"]["type"]) for e in lost_ends} == {("failed", "proxy")}


async def test_cancelling_a_ray_run_ends_the_groups_in_flight_cancelled(
    tmp_path, ray_cluster, upstream, test_agents
):
    import asyncio

    notes = Path(os.environ["AW_NODE_NOTES"])
    for old in notes.glob("*.node"):
        old.unlink()
    agent = f"{test_agents}:note_node_then_hang_on_t1"
    run = asyncio.create_task(run_session(ray_opts(tmp_path, upstream, agent, tmp_path / "pool")))
    for _ in range(600):  # every episode called the model: t1's two now hang in their agent
        if len(list(notes.glob("t*.node"))) == 6 or run.done():
            break
        await asyncio.sleep(0.1)
    assert not run.done(), run.result()
    run.cancel()
    report, _ = await run
    assert report.interrupted
    assert sorted(r.status for r in report.results if r.task != "t1") == ["done"] * 4
    assert [r.status for r in report.results if r.task == "t1"] == ["cancelled"] * 2
    # What was recorded is in the shared pool: the finished groups' ends done, t1's cancelled.
    pool = Pool.open(tmp_path / "pool")
    ends = [r for r in pool.iter_records() if r["kind"] == "end"]
    pool.close()
    assert sorted(e["status"] for e in ends if e["task"] != "t1") == ["done"] * 4
    assert [e["status"] for e in ends if e["task"] == "t1"] == ["cancelled"] * 2


async def test_an_interrupted_group_whose_task_never_returns_still_ends_cancelled(
    tmp_path, ray_cluster, upstream, test_agents, monkeypatch
):
    # Under load the cancelled Ray task can fail to return within the driver's wait: its
    # trajectories reached the pool and must not stay open there.
    import asyncio

    notes = Path(os.environ["AW_NODE_NOTES"])
    for old in notes.glob("*.node"):
        old.unlink()
    real_get = ray_cluster.get

    def get(ref, *args, **kw):  # the driver's wait after cancelling: as if the task died
        if kw.get("timeout") == 60:
            raise ray_cluster.exceptions.GetTimeoutError("the task did not return")
        return real_get(ref, *args, **kw)

    monkeypatch.setattr(ray_cluster, "get", get)
    agent = f"{test_agents}:note_node_then_hang_on_t1"
    run = asyncio.create_task(run_session(ray_opts(tmp_path, upstream, agent, tmp_path / "pool")))
    for _ in range(600):
        if len(list(notes.glob("t*.node"))) == 6 or run.done():
            break
        await asyncio.sleep(0.1)
    assert not run.done(), run.result()
    run.cancel()
    report, _ = await run
    assert [r.status for r in report.results if r.task == "t1"] == ["cancelled"] * 2
    pool = Pool.open(tmp_path / "pool")
    by_status = pool.index().stats()["trajectories_by_status"]
    ends = [r for r in pool.iter_records() if r["kind"] == "end" and r["task"] == "t1"]
    pool.close()
    assert "open" not in by_status
    assert ends and {(e["status"], e["error"]["type"]) for e in ends} == {
        ("cancelled", "cancelled")
    }
