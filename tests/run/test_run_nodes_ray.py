"""`aw run --ray` across two Ray nodes simulated on this machine: one dies mid-run.

ray.cluster_utils.Cluster starts a head (no CPUs, so no rollouts) and two
worker nodes, each a raylet of its own; removing one kills its raylet, its
proxy actor and the group running there, as a lost machine would.

Named to run before test_run_ray.py: in one process, a Ray session after the
one-node cluster there left this one's actors unscheduled (a second Ray
session in one process is a test artefact; `aw run` makes one).
"""

from __future__ import annotations

import asyncio
import os

import pytest
from aw_run_fakes import HERE, REPO

from agentworld.pool import Pool
from agentworld.run.session import run_session
from tests.run import ray_fixtures
from tests.run.ray_fixtures import ray_opts

pytestmark = pytest.mark.slow
upstream = ray_fixtures.upstream  # the fixture, used here


@pytest.fixture
def two_nodes(tmp_path):
    pytest.importorskip("ray", reason="ray is not installed: pip install 'agentworld[ray]'")
    from ray.cluster_utils import Cluster

    saved = dict(os.environ)
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), str(HERE), saved.get("PYTHONPATH", "")])
    os.environ["AW_NODE_NOTES"] = str(tmp_path)
    try:
        cluster = Cluster(initialize_head=True, connect=True, head_node_args={"num_cpus": 0})
        nodes = [cluster.add_node(num_cpus=1) for _ in range(2)]
        cluster.wait_for_nodes()
    except Exception as exc:
        os.environ.clear()
        os.environ.update(saved)
        pytest.skip(f"a two-node Ray cluster could not start here: {exc}")
    yield cluster, nodes
    import ray

    ray.shutdown()
    cluster.shutdown()
    os.environ.clear()
    os.environ.update(saved)


async def test_a_node_that_dies_fails_its_groups_as_infrastructure(
    tmp_path, two_nodes, upstream, test_agents
):
    cluster, nodes = two_nodes
    opts = ray_opts(
        tmp_path, upstream, f"{test_agents}:note_node_then_hang_on_t1", tmp_path / "pool"
    )
    run = asyncio.create_task(run_session(opts))
    for _ in range(600):
        notes = list(tmp_path.glob("t1.*.node"))
        if notes or run.done():
            break
        await asyncio.sleep(0.1)
    if run.done():
        run.result()  # the run's own error, if it ended early
    assert notes, "t1 never started"
    doomed = next(n for n in nodes if n.node_id == notes[0].read_text())
    cluster.remove_node(doomed, allow_graceful=False)
    report, _ = await asyncio.wait_for(run, 120)
    lost = [r for r in report.results if r.task == "t1"]
    assert [(r.status, r.error["type"]) for r in lost] == [("failed", "proxy")] * 2
    assert sorted(r.status for r in report.results if r.task != "t1") == ["done"] * 4
    # The other node's groups were all recorded; nothing of t1 passes for a model failure.
    pool = Pool.open(tmp_path / "pool")
    ends = {r["trajectory"]: r for r in pool.iter_records() if r["kind"] == "end"}
    pool.close()
    assert sorted(e["status"] for e in ends.values() if e["task"] != "t1") == ["done"] * 4
    assert all(e["error"]["type"] == "proxy" for e in ends.values() if e["task"] == "t1")
