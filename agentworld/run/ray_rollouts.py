"""`aw run --ray`: the rollouts of `aw run` as Ray tasks, one recording proxy per node.

Ray places the work; AgentWorld adds no scheduler of its own. On every alive
node a ``NodeProxy`` actor (pinned there by node affinity) runs the same
in-process proxy `aw run` starts (local_proxy.py) in front of the agent's
upstream, recording into a pool on that node's disk; a background pass ships
each sealed shard to the shared pool: an object store (remote_sync's Pusher,
put-if-absent) or a shared folder (merge.merge_pools). Each group of ``n``
episodes of one task is one Ray task, pinned to a node with a proxy, running
the unchanged rollout loop (rollout.run_rollouts) against that proxy. So
agents.toml, datasets.toml, scoring, groups and the summary are `aw run`'s own.

A node that dies loses at most its proxy's unsealed journal tail: its groups
come back as failed episodes, and their trajectories that reached the shared
pool without an end get one, status ``failed`` with error type ``proxy`` (an
infrastructure failure: training leaves them out), never a model failure.
Ctrl-C cancels the groups in flight (their episodes end ``cancelled``, as in
`aw run`), then the proxies seal and ship what they recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentworld.errors import ConfigError, MissingExtraError, UpstreamError
from agentworld.records import new_id
from agentworld.run.rollout import EpisodeResult, RunReport

if TYPE_CHECKING:  # session imports this module to run on Ray; the types only name its own
    from agentworld.run.session import Prepared, RunOptions

log = logging.getLogger(__name__)

SHIP_EVERY_S = 1.0
LOST = "proxy"  # the end-record error type of a trajectory whose node died


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise MissingExtraError("ray", "ray") from None
    return ray


def connect(address: str) -> None:
    """Join the cluster at ``address`` ("auto": the one `ray start` made here; "local": start
    a one-machine cluster now) unless this process already joined one."""
    ray = _ray()
    if ray.is_initialized():
        return
    kwargs: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": False}
    if address == "local":
        ray.init(include_dashboard=False, **kwargs)
    else:
        try:
            ray.init(address=address, **kwargs)
        except ConnectionError as exc:
            raise ConfigError(f"--ray {address}: no Ray cluster there ({exc})") from None


class NodeProxy:
    """The proxy of one node (a Ray actor): records locally, ships sealed shards to the pool."""

    def __init__(self, agent: Any, environ: dict[str, str], token: str | None, shared: str) -> None:
        self.agent, self.environ, self.token, self.shared = agent, environ, token, shared
        self.pool_path: Path | None = None
        self._cm: Any = None
        self._shipper: asyncio.Task[None] | None = None
        self._pusher: Any = None

    async def start(self, run_id: str) -> str:
        """Start the proxy on a free port of this node; returns its URL."""
        from agentworld.pool import Pool
        from agentworld.run.local_proxy import local_proxy

        ray = _ray()
        node = ray.get_runtime_context().get_node_id()
        self.pool_path = Path(tempfile.gettempdir()) / "aw-ray" / run_id / node[:16] / "pool"
        Pool.create(self.pool_path).close()
        self._cm = local_proxy(
            pool_path=self.pool_path, agent=self.agent, environ=self.environ, token=self.token
        )
        url = await self._cm.__aenter__()
        self._shipper = asyncio.create_task(self._ship_loop())
        return url

    async def _ship_loop(self) -> None:
        while True:
            await asyncio.sleep(SHIP_EVERY_S)
            try:
                await asyncio.to_thread(self.ship)
            except Exception as exc:  # the store or share unreachable: the shards wait on disk
                log.warning("shipping shards to %s failed (retrying): %s", self.shared, exc)

    def ship(self) -> int:
        """Copy this node's sealed shards (and label lines) the shared pool lacks."""
        from agentworld.pool.layout import Layout
        from agentworld.pool.merge import merge_pools
        from agentworld.pool.remote_store import RemoteStore, remote_url
        from agentworld.pool.remote_sync import Pusher

        assert self.pool_path is not None
        url = remote_url(self.shared)
        if url is not None:
            if self._pusher is None:
                self._pusher = Pusher(Layout(self.pool_path), RemoteStore(url))
            return int(self._pusher.push().shards_copied)
        # Unchecked: this node's proxy minted every id it ships (records.new_id), and the
        # check would keep a SQLite index inside the shared folder, which every node
        # would write to over the shared file system.
        shared = Layout(Path(self.shared))
        return merge_pools(shared, self.pool_path, check_records=False).shards_copied

    async def stop(self) -> int:
        """Close the proxy (its writer seals the journal), then ship the last shard."""
        if self._shipper is not None:
            self._shipper.cancel()
        if self._cm is not None:
            await self._cm.__aexit__(None, None, None)
            self._cm = None
        copied = await asyncio.to_thread(self.ship)  # raises, keeping the node's copy, if it fails
        from agentworld.pool.layout import Layout

        assert self.pool_path is not None
        if not Layout(self.pool_path).journal_paths():  # all sealed, all shipped: not needed
            shutil.rmtree(self.pool_path.parent, ignore_errors=True)
            with contextlib.suppress(
                OSError
            ):  # the run's folder, once no node on this host uses it
                self.pool_path.parent.parent.rmdir()
        return copied


def rollout_group(
    p: Prepared,
    opts: RunOptions,
    task: Any,
    group: str,
    proxy_url: str,
) -> list[EpisodeResult]:
    """One group (``opts.n`` episodes of ``task``) on this node, through its proxy (a Ray task)."""
    from agentworld.run.lifecycle import ProxyClient
    from agentworld.run.rollout import run_rollouts
    from agentworld.run.runners import make_runner
    from agentworld.run.scoring import make_scorer

    # Built here, not shipped: runners and scorers may hold clients and loaded functions.
    runner = make_runner(p.agent, base_env=opts.environ, api_key=opts.proxy_token)
    scorer = make_scorer(p.dataset)

    async def go() -> RunReport:
        async with ProxyClient(proxy_url, token=opts.proxy_token) as proxy:
            return await run_rollouts(
                proxy=proxy,
                runner=runner,
                scorer=scorer,
                agent=p.agent.name,
                dataset=p.dataset.name,
                split=p.split,
                tasks=[task],
                n=opts.n,
                concurrency=opts.n,
                group_ids=[group],
                seed=opts.seed,
            )

    return asyncio.run(go()).results


def _lost(
    task: Any, group: str, n: int, status: str, why: str, *, kind: str = LOST
) -> list[EpisodeResult]:
    """The results of a group that never came back: infrastructure failures, not the model's."""
    kind = "cancelled" if status == "cancelled" else kind
    return [
        EpisodeResult(task.id, group, k, None, status, error={"type": kind, "message": why})
        for k in range(n)
    ]


async def run_on_ray(
    opts: RunOptions,
    p: Prepared,
    *,
    on_start: Callable[[int], None] | None = None,
    on_result: Callable[[EpisodeResult], None] | None = None,
) -> tuple[RunReport, dict[str, Any]]:
    """Run ``opts``'s rollouts across the Ray cluster at ``opts.ray``; report and summary."""
    from agentworld.pool.remote_store import remote_url
    from agentworld.run.summary import pool_stats, summarise

    ray = _ray()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if opts.proxy_url:
        raise ConfigError("--ray starts a proxy on every node: drop --proxy")
    if opts.remote:
        raise ConfigError("--ray ships shards to --pool: give the store there (--pool s3://…)")
    if "upstream" not in p.agent.upstream:
        raise ConfigError(
            f"{p.agent.where.path}: agent {p.agent.name!r}: upstream: required for --ray "
            "(each node starts a proxy in front of it)"
        )
    shared = remote_url(opts.pool) or str(Path(opts.pool).resolve())
    if remote_url(opts.pool) is None:
        from agentworld.pool import Pool

        Pool.create(opts.pool).close()
    assert opts.ray is not None
    if on_start is not None:  # known now: the progress line counts while the cluster starts
        on_start(len(p.tasks) * opts.n)
    connect(opts.ray)
    run_id = new_id("ray")
    nodes = [n["NodeID"] for n in ray.nodes() if n.get("Alive") and n["Resources"].get("CPU")]
    if not nodes:
        raise ConfigError(f"--ray {opts.ray}: the cluster has no alive node with CPUs")
    actor_cls, task_fn = _remotes(ray)
    # Each node reaches the store with its own credentials (an instance role, or AWS_* etc.
    # exported before `ray start`): the driver's are not forwarded, since Ray's runtime_env
    # agent logs the env_vars it is given in plain text.
    proxies = {
        node: actor_cls.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
        ).remote(p.agent, dict(opts.environ), opts.proxy_token, shared)
        for node in nodes
    }
    try:
        started = await asyncio.to_thread(
            ray.get, [a.start.remote(run_id) for a in proxies.values()]
        )
    except ray.exceptions.RayError as exc:
        for actor in proxies.values():
            ray.kill(actor)
        raise UpstreamError(f"--ray: a node's proxy did not start: {_why(exc)}") from None
    urls = dict(zip(proxies, started, strict=True))
    report = RunReport(opts.agent, p.dataset.name, p.split, opts.n, len(p.tasks))
    pending: dict[Any, tuple[Any, str, str]] = {}  # ref -> (task, group, node)
    queue = [(task, new_id("gr")) for task in p.tasks]
    lost_groups: set[str] = set()
    cancelled_groups: set[str] = set()  # interrupted, and their task never returned
    in_flight = max(1, (opts.concurrency or p.agent.concurrency) // opts.n)
    started_at = time.monotonic()
    shipped = replace(p, runner=None, scorer=None)  # rebuilt on the node (may not pickle)

    def record(results: list[EpisodeResult]) -> None:
        for r in results:
            report.results.append(r)
            if on_result is not None:
                on_result(r)

    try:
        turn = 0
        while queue or pending:
            alive = [n for n in urls if n not in _dead(ray)]
            while queue and len(pending) < in_flight and alive:
                task, group = queue.pop(0)
                node = alive[turn % len(alive)]
                turn += 1
                ref = task_fn.options(
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)
                ).remote(shipped, opts, task, group, urls[node])
                pending[ref] = (task, group, node)
            if not alive and queue:
                for task, group in queue:
                    lost_groups.add(group)
                    record(_lost(task, group, opts.n, "failed", "no Ray node with a proxy left"))
                queue.clear()
            if not pending:
                continue
            done, _ = await asyncio.to_thread(ray.wait, list(pending), num_returns=1, timeout=0.5)
            for ref in done:
                task, group, node = pending.pop(ref)
                try:
                    record(ray.get(ref))
                except ray.exceptions.RayTaskError as exc:  # it raised: a node without the agent
                    lost_groups.add(group)
                    why = f"the group's Ray task failed: {_why(exc)}"
                    record(_lost(task, group, opts.n, "failed", why, kind="spawn"))
                except ray.exceptions.RayError as exc:  # its worker, actor or node was lost
                    lost_groups.add(group)
                    why = f"the Ray node running it failed: {type(exc).__name__}"
                    record(_lost(task, group, opts.n, "failed", why))
    except asyncio.CancelledError:
        report.interrupted = True
        for ref in pending:
            ray.cancel(ref)  # KeyboardInterrupt in the task: its episodes end `cancelled`
        for ref, (task, group, _node) in pending.items():
            try:
                record(await asyncio.to_thread(ray.get, ref, timeout=60))
            except Exception:  # the task died before its episodes could end themselves
                cancelled_groups.add(group)
                record(_lost(task, group, opts.n, "cancelled", "the run was interrupted"))
        for task, group in queue:
            record(_lost(task, group, opts.n, "cancelled", "the run was interrupted"))
        current = asyncio.current_task()
        if current is not None:
            current.uncancel()
    finally:
        report.wall_s = time.monotonic() - started_at
        await asyncio.to_thread(_stop_all, ray, proxies)
    if lost_groups:
        await asyncio.to_thread(end_lost, opts, p, lost_groups)
    if cancelled_groups:
        await asyncio.to_thread(end_lost, opts, p, cancelled_groups, cancelled=True)
    ids = [r.trajectory for r in report.results if r.trajectory]
    stats = pool_stats(opts.pool, ids)
    return report, summarise(report, success_threshold=p.dataset.success_threshold, stats=stats)


_REMOTES: list[Any] = []


def _remotes(ray: Any) -> tuple[Any, Any]:
    """The Ray actor class and task, made once per process as module-level ``@ray.remote``
    objects are (made lazily so that importing this module needs no Ray)."""
    if not _REMOTES:
        _REMOTES.append(ray.remote(num_cpus=0, max_restarts=0)(NodeProxy))
        _REMOTES.append(ray.remote(num_cpus=1, max_retries=0)(rollout_group))
    return _REMOTES[0], _REMOTES[1]


def _why(exc: BaseException) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return (lines[-1] if lines else type(exc).__name__)[:300]


def _dead(ray: Any) -> set[str]:
    return {n["NodeID"] for n in ray.nodes() if not n.get("Alive")}


def _stop_all(ray: Any, proxies: dict[str, Any]) -> None:
    """Stop every proxy that is still there (seal + ship); a dead node's is skipped."""
    refs = {node: a.stop.remote() for node, a in proxies.items()}
    for node, ref in refs.items():
        try:
            ray.get(ref, timeout=120)
        except Exception as exc:
            log.warning("proxy on node %s did not stop cleanly: %s", node[:12], exc)
        ray.kill(proxies[node])


def end_lost(opts: RunOptions, p: Prepared, groups: set[str], *, cancelled: bool = False) -> int:
    """Give the trajectories of lost groups that reached the pool without an end a failed end
    (error type ``proxy``: infrastructure), or with ``cancelled`` (an interrupted run whose
    task never returned) a cancelled one; returns how many."""
    from agentworld import records
    from agentworld.pool import Pool
    from agentworld.pool.opener import open_pool
    from agentworld.pool.remote_store import remote_url
    from agentworld.pool.remote_sync import push

    url = remote_url(opts.pool)
    shared = open_pool(opts.pool)
    try:
        idx = shared.index()
        open_ones = [
            (tid, g, task, n_steps)
            for g in sorted(groups)
            for tid, task, n_steps in idx.db.execute(
                "SELECT id, task, n_steps FROM trajectories WHERE grp = ? AND status = 'open'",
                (g,),
            )
        ]
    finally:
        shared.close()
    if not open_ones:
        return 0
    # A remote pool is written the way every writer writes it: locally, then pushed.
    target = (
        Pool.create(Path(tempfile.mkdtemp(prefix="aw-ray-ends-")) / "pool")
        if url
        else open_pool(opts.pool)
    )
    with target.writer(name="ray-driver") as w:
        for tid, group, task, n_steps in open_ones:
            w.append(
                records.make_end(
                    trajectory=tid,
                    agent=p.agent.name,
                    status="cancelled" if cancelled else "failed",
                    steps=int(n_steps or 0),
                    dataset=p.dataset.name,
                    split=p.split,
                    task=task,
                    group=group,
                    error=(
                        {"type": "cancelled", "message": "the run was interrupted"}
                        if cancelled
                        else {"type": LOST, "message": "the Ray node running it died"}
                    ),
                )
            )
    target.close()
    if url:
        push(target.layout, url)
        shutil.rmtree(target.root.parent, ignore_errors=True)
    return len(open_ones)
