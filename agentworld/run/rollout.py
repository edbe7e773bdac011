"""The rollout loop: for each task, n episodes forming one group, each scored and completed in the pool.

Per episode: open a trajectory on the proxy, run the agent against its base
URL, score the answer, complete the trajectory with status and reward (and
the task's reference answer, for exporters). An agent that crashes or hangs
fails its own trajectory only; cancelling the run (Ctrl-C) marks the episodes
in flight cancelled and keeps everything finished.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentworld.errors import AgentWorldError
from agentworld.records import new_id
from agentworld.run.lifecycle import ProxyClient, ProxyHTTPError, TrajectoryHandle
from agentworld.run.runners import Outcome, raised_at
from agentworld.run.scoring import Scorer
from agentworld.run.tasks import Task, json_safe
from agentworld.seeds import derive

log = logging.getLogger(__name__)

_MAX_ANSWER_CHARS = 10_000


class Runner(Protocol):
    async def run(self, task: Task, handle: TrajectoryHandle) -> Outcome: ...


@dataclass
class EpisodeResult:
    """One finished (or failed, or cancelled) episode."""

    task: str
    group: str
    rollout: int
    trajectory: str | None  # None when the proxy refused to open one
    status: str  # "done" | "failed" | "timeout" | "cancelled"
    reward: float | None = None
    answer: str | None = None
    error: dict[str, Any] | None = None
    wall_s: float = 0.0


@dataclass
class RunReport:
    """Everything a run produced, for the summary."""

    agent: str
    dataset: str
    split: str
    n: int
    tasks: int
    results: list[EpisodeResult] = field(default_factory=list)
    wall_s: float = 0.0
    interrupted: bool = False


async def run_rollouts(
    *,
    proxy: ProxyClient,
    runner: Runner,
    scorer: Scorer,
    agent: str,
    dataset: str,
    split: str,
    tasks: Sequence[Task],
    n: int = 1,
    concurrency: int = 8,
    on_result: Callable[[EpisodeResult], None] | None = None,
    group_ids: Sequence[str] | None = None,
    seed: int | None = None,
) -> RunReport:
    """Roll ``runner`` out ``n`` times per task with at most ``concurrency`` episodes at once.

    ``group_ids``: one per task, when the caller must know them beforehand (`aw run
    --ray` ends a lost node's trajectories by group); new ids otherwise. ``seed``: each
    episode's trajectory is opened with ``derive(seed, task id, rollout)``, which seeds
    its calls' sampling (the proxy's ``seed_call``), so a rerun samples the same.
    """
    report = RunReport(agent=agent, dataset=dataset, split=split, n=n, tasks=len(tasks))
    gate = asyncio.Semaphore(concurrency)
    started = time.monotonic()

    async def episode(task: Task, group: str, rollout: int) -> None:
        async with gate:
            result = EpisodeResult(task.id, group, rollout, trajectory=None, status="failed")
            try:
                await _episode(proxy, runner, scorer, agent, dataset, split, task, result, seed)
            finally:  # cancelled episodes are reported too
                report.results.append(result)
                if on_result is not None:
                    on_result(result)

    # Task-major order with a FIFO gate: a group's episodes run together.
    groups = list(group_ids) if group_ids is not None else [new_id("gr") for _ in tasks]
    jobs = [
        asyncio.create_task(episode(task, group, k))
        for task, group in zip(tasks, groups, strict=True)
        for k in range(n)
    ]
    try:
        await asyncio.gather(*jobs)
    except asyncio.CancelledError:
        report.interrupted = True
        # gather has cancelled every job once, and it returns as soon as the first of them
        # ends: the others may still be ending their trajectories (a call to the proxy).
        # Cancelling those again would cut that call short, so only the untouched ones are.
        for job in jobs:
            if not job.done() and not job.cancelling():
                job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)
        # Handled: let the caller finish cleanly (close the proxy, print the summary).
        current = asyncio.current_task()
        if current is not None:
            current.uncancel()
    finally:
        report.wall_s = time.monotonic() - started
    return report


async def _episode(
    proxy: ProxyClient,
    runner: Runner,
    scorer: Scorer,
    agent: str,
    dataset: str,
    split: str,
    task: Task,
    result: EpisodeResult,
    run_seed: int | None = None,
) -> None:
    """Run one episode, filling in ``result`` as it goes."""
    t0 = time.monotonic()
    tags: dict[str, Any] = {"rollout": result.rollout}  # in the end record's metadata
    seed = None
    if run_seed is not None:
        seed = tags["seed"] = derive(run_seed, task.id, result.rollout)
    # The id is ours, so a run cancelled while the proxy opens the trajectory can end it.
    tid = new_id("tr")
    try:
        handle = await proxy.create_trajectory(
            agent=agent,
            dataset=dataset,
            split=split,
            task=task.id,
            group=result.group,
            metadata=tags,
            trajectory=tid,
            seed=seed,
        )
    except asyncio.CancelledError:
        result.status = "cancelled"
        result.error = {"type": "cancelled", "message": "the run was interrupted"}
        await _end_if_opened(proxy, tid, result, _with_reference(tags, task))
        raise
    except AgentWorldError as exc:
        result.error = {"type": "proxy", "message": str(exc)}
        result.wall_s = time.monotonic() - t0
        return
    result.trajectory = handle.id
    try:
        outcome = await runner.run(task, handle)
    except asyncio.CancelledError:
        result.status = "cancelled"
        result.error = {"type": "cancelled", "message": "the run was interrupted"}
        await _complete(proxy, handle.id, result, _with_reference(tags, task))
        raise
    except Exception as exc:  # a runner bug must not stop the other episodes
        outcome = Outcome("failed", error={"type": type(exc).__name__, "message": str(exc)})
    result.status, result.answer, result.error = outcome.status, outcome.answer, outcome.error
    if outcome.status == "done":
        try:
            result.reward = await scorer(outcome.answer, task)
        except Exception as exc:  # the scorer is user code too
            result.status = "failed"
            message = f"{type(exc).__name__}: {exc}{raised_at(exc)}"
            result.error = {"type": "scorer", "message": message}
    meta = _with_reference({**outcome.metadata, **tags}, task)
    if outcome.answer is not None:
        meta["answer"] = outcome.answer[:_MAX_ANSWER_CHARS]
    result.wall_s = time.monotonic() - t0
    meta["wall_s"] = round(result.wall_s, 3)
    await _complete(proxy, handle.id, result, meta)


def _with_reference(meta: dict[str, Any], task: Task) -> dict[str, Any]:
    """``meta`` plus the task's reference answer as ``ground_truth``, the key exporters read.

    The key is the rollout's alone: one in the agent's own metadata is dropped,
    so nothing the agent says can pass for the reference (its answer is kept
    apart, as ``answer``).
    """
    out = {k: v for k, v in meta.items() if k != "ground_truth"}
    if task.answer is not None:
        out["ground_truth"] = json_safe(task.answer)
    return out


async def _end_if_opened(
    proxy: ProxyClient, tid: str, result: EpisodeResult, meta: dict[str, Any]
) -> None:
    """End a trajectory whose create call was cancelled, if the proxy opened it after all."""
    result.trajectory = tid
    try:
        await proxy.complete(tid, status=result.status, error=result.error, metadata=meta)
    except ProxyHTTPError as exc:
        if exc.status == 404:  # the create call never reached the proxy: nothing to end
            result.trajectory = None
        else:
            log.warning("could not end trajectory %s: %s", tid, exc)
    except AgentWorldError as exc:
        log.warning("could not end trajectory %s: %s", tid, exc)


async def _complete(
    proxy: ProxyClient, tid: str, result: EpisodeResult, meta: dict[str, Any]
) -> None:
    try:
        await proxy.complete(
            tid, status=result.status, reward=result.reward, error=result.error, metadata=meta
        )
    except AgentWorldError as exc:
        # The episode happened; only its end record is missing. Say so in the summary.
        result.error = {"type": "proxy", "message": f"complete failed: {exc}"}
        if result.status == "done":
            result.status = "failed"
