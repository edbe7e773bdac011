"""Held-out evaluation: success rate with its standard error, and the lift between two of them.

One rollout per held-out task through `run_session` (so every evaluation episode is
recorded in the pool like any other), scored by the dataset's own scorer; a task
succeeds when its reward reaches the dataset's success threshold. A failed episode
counts as a miss: it is part of what the policy did.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from agentworld.run.session import RunOptions, run_session


@dataclass(frozen=True)
class Evaluation:
    """Binary success over ``n`` tasks: the rate and its standard error."""

    successes: int
    n: int
    rewards: tuple[float, ...] = ()
    policy_version: int | None = None

    @property
    def rate(self) -> float:
        return self.successes / self.n if self.n else 0.0

    @property
    def stderr(self) -> float:
        """Standard error of the rate: sqrt(p (1 - p) / n), the binomial one."""
        return math.sqrt(self.rate * (1.0 - self.rate) / self.n) if self.n else 0.0


@dataclass(frozen=True)
class Lift:
    """after - before, with the standard error of the difference (independent samples)."""

    delta: float
    stderr: float

    @property
    def z(self) -> float:
        """The lift in standard errors (inf when both rates are exactly 0 or 1)."""
        if self.stderr == 0.0:
            return math.inf if self.delta > 0 else (-math.inf if self.delta < 0 else 0.0)
        return self.delta / self.stderr


def evaluation_of(
    rewards: Sequence[float | None], threshold: float = 1.0, policy_version: int | None = None
) -> Evaluation:
    """Count successes (reward >= threshold; no reward is a miss) over the given episodes."""
    xs = tuple(float(r) if r is not None else 0.0 for r in rewards)
    return Evaluation(
        successes=sum(1 for r in xs if r >= threshold),
        n=len(xs),
        rewards=xs,
        policy_version=policy_version,
    )


def lift(before: Evaluation, after: Evaluation) -> Lift:
    """The change in success rate and its standard error, sqrt(se_before^2 + se_after^2).

    Conservative on purpose: the two evaluations share their tasks, and a paired
    error would be smaller, but the independent one needs no assumption about
    which tasks moved.
    """
    return Lift(after.rate - before.rate, math.hypot(before.stderr, after.stderr))


async def evaluate(
    opts: RunOptions, *, threshold: float = 1.0, policy_version: int | None = None
) -> tuple[Evaluation, Any]:
    """Roll the agent out once per task of ``opts``' split; the evaluation and the run's report."""
    report, _summary = await run_session(replace(opts, n=1))
    ev = evaluation_of([r.reward for r in report.results], threshold, policy_version)
    return ev, report
