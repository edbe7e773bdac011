"""One `aw run` from options to report: load configs, reach a proxy, roll out, gather stats.

Kept apart from the typer command so tests drive it directly with a fake proxy.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentworld.config import find, load_agents, load_datasets
from agentworld.run.lifecycle import ProxyClient
from agentworld.run.rollout import EpisodeResult, RunReport, run_rollouts
from agentworld.run.runners import make_runner
from agentworld.run.scoring import make_scorer
from agentworld.run.summary import pool_stats, summarise
from agentworld.run.tasks import load_tasks


@dataclass(frozen=True)
class RunOptions:
    """Everything `aw run` was told, resolved at the edge."""

    agent: str
    dataset: str
    agents_path: Path = Path("agents.toml")
    datasets_path: Path = Path("datasets.toml")
    split: str | None = None
    limit: int | None = None
    n: int = 1
    concurrency: int | None = None  # None: the agent's own
    seed: int | None = None  # seeds each episode's calls (``rollout.run_rollouts``)
    proxy_url: str | None = None  # None: start one in-process
    proxy_token: str | None = None
    pool: Path = Path("pool")
    environ: Mapping[str, str] = field(default_factory=dict)  # for command agents and API keys
    remote: str | None = None  # object store the in-process proxy uploads sealed shards to
    ray: str | None = None  # "auto", "local" or a cluster address: rollouts as Ray tasks


@dataclass(frozen=True)
class Prepared:
    """A run's configs, resolved and checked before any episode starts."""

    agent: Any
    dataset: Any
    runner: Any
    scorer: Any
    split: str
    tasks: list[Any]


def prepare(opts: RunOptions) -> Prepared:
    """Load and check everything a run needs; every config error surfaces here."""
    agent = find(load_agents(opts.agents_path), opts.agent, "agent", opts.agents_path)
    dataset = find(load_datasets(opts.datasets_path), opts.dataset, "dataset", opts.datasets_path)
    runner = make_runner(agent, base_env=opts.environ, api_key=opts.proxy_token)
    scorer = make_scorer(dataset)
    split = dataset.split(opts.split).name
    return Prepared(
        agent, dataset, runner, scorer, split, list(load_tasks(dataset, split, opts.limit))
    )


@asynccontextmanager
async def _proxy_url(opts: RunOptions, agent: Any) -> AsyncIterator[str]:
    if opts.proxy_url:
        yield opts.proxy_url
        return
    from agentworld.pool import Pool
    from agentworld.pool.remote_sync import start_uploader
    from agentworld.run.local_proxy import local_proxy

    pool = Pool.create(opts.pool)
    pool.close()
    uploader = start_uploader(pool.layout, opts.remote)
    try:
        async with local_proxy(
            pool_path=opts.pool, agent=agent, environ=opts.environ, token=opts.proxy_token
        ) as url:
            yield url
    finally:
        if uploader is not None:  # the proxy sealed its journal on exit: send that shard too
            uploader.stop()


async def run_session(
    opts: RunOptions,
    *,
    on_start: Callable[[int], None] | None = None,
    on_result: Callable[[EpisodeResult], None] | None = None,
) -> tuple[RunReport, dict[str, Any]]:
    """Run the rollouts ``opts`` describe; return the report and its summary."""
    # Everything that can be wrong in the configs fails here, before any episode.
    p = prepare(opts)
    if opts.ray is not None:
        from agentworld.run.ray_rollouts import run_on_ray

        return await run_on_ray(opts, p, on_start=on_start, on_result=on_result)
    agent, dataset, split, tasks = p.agent, p.dataset, p.split, p.tasks
    if on_start is not None:
        on_start(len(tasks) * opts.n)
    async with _proxy_url(opts, agent) as url, ProxyClient(url, token=opts.proxy_token) as proxy:
        await proxy.health()
        report = await run_rollouts(
            proxy=proxy,
            runner=p.runner,
            scorer=p.scorer,
            agent=agent.name,
            dataset=dataset.name,
            split=split,
            tasks=tasks,
            n=opts.n,
            concurrency=opts.concurrency or agent.concurrency,
            on_result=on_result,
            seed=opts.seed,
        )
    ids = [r.trajectory for r in report.results if r.trajectory]
    # Those the proxy closed: their end records are on their way into the pool.
    ended = [
        r.trajectory
        for r in report.results
        if r.trajectory and (r.error or {}).get("type") != "proxy"
    ]
    # Off the event loop: a proxy served from this loop (tests, embedders) may still be
    # writing end records that waited for their calls.
    stats = await asyncio.to_thread(pool_stats, opts.pool, ids, ended=ended)
    return report, summarise(report, success_threshold=dataset.success_threshold, stats=stats)
