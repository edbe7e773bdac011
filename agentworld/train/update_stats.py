"""An update's numbers over every process, not process 0's: loss, rewards, advantages, counts.

Each process trains its own share of the groups (``data.rank_of``), so what one
process saw is not the update: with two processes and both trainable groups on
rank 1, process 0 logged ``loss: null``, ``reward_mean: null``, advantages of 0
and a summary of 0 trajectories. Each number is kept as sums that add across
processes (count, sum, sum of squares, zeros; low and high by max), reduced in
one all-reduce of each kind, and a process without data adds nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any

import torch

from agentworld.train.sequences import SequenceStats


@dataclass
class Spread:
    """Count, sum, sum of squares, zeros, lowest and highest of some numbers; adds up."""

    n: float = 0.0
    total: float = 0.0
    squares: float = 0.0
    zeros: float = 0.0
    low: float = math.inf
    high: float = -math.inf

    @classmethod
    def of(cls, values: Iterable[float]) -> Spread:
        out = cls()
        for v in values:
            out.n += 1
            out.total += v
            out.squares += v * v
            out.zeros += v == 0
            out.low, out.high = min(out.low, v), max(out.high, v)
        return out

    @property
    def mean(self) -> float | None:
        return self.total / self.n if self.n else None

    @property
    def std(self) -> float | None:
        """The population standard deviation (numpy's default)."""
        mean = self.mean
        return None if mean is None else math.sqrt(max(0.0, self.squares / self.n - mean * mean))

    def sums(self) -> list[float]:
        return [self.n, self.total, self.squares, self.zeros]


@dataclass
class UpdateStats:
    """One update's per-micro-batch shares of its loss, KL and entropy (which sum to the
    update's), its trajectories' rewards (each once) and its rows' advantages."""

    loss: Spread = field(default_factory=Spread)
    kl: Spread = field(default_factory=Spread)
    entropy: Spread = field(default_factory=Spread)
    rewards: Spread = field(default_factory=Spread)
    advantages: Spread = field(default_factory=Spread)


def across_processes(acc: Any, local: UpdateStats) -> UpdateStats:
    """``local`` summed over every process (each must call this, once per update)."""
    spreads = [getattr(local, f.name) for f in fields(UpdateStats)]
    sums = torch.tensor([x for s in spreads for x in s.sums()], dtype=torch.float64)
    peaks = torch.tensor([x for s in spreads for x in (s.high, -s.low)], dtype=torch.float64)
    sums = acc.reduce(sums.to(acc.device), "sum").tolist()
    peaks = acc.reduce(peaks.to(acc.device), "max").tolist()
    out = UpdateStats()
    for k, f in enumerate(fields(UpdateStats)):
        n, total, squares, zeros = sums[4 * k : 4 * k + 4]
        high, neg_low = peaks[2 * k : 2 * k + 2]
        setattr(out, f.name, Spread(n, total, squares, zeros, -neg_low, high))
    return out


def totals_across_processes(
    acc: Any, trajectories: int, stats: SequenceStats
) -> tuple[int, SequenceStats]:
    """The run's trajectories and sequence counts so far over every process (each must call
    this): a group, so its trajectories, is trained by one process only."""
    names = [f.name for f in fields(SequenceStats)]
    local = [trajectories, *(getattr(stats, n) for n in names)]
    summed = acc.reduce(torch.tensor(local, dtype=torch.int64, device=acc.device), "sum").tolist()
    return int(summed[0]), SequenceStats(**dict(zip(names, map(int, summed[1:]), strict=True)))


def version_range(acc: Any, versions: Iterable[int]) -> tuple[int, int] | None:
    """The lowest and highest of ``versions`` over every process (each must call this, once
    per update); None when no process has one."""
    local = list(versions)
    none = -(2**62)  # below any version: a process without rows does not move the max
    peaks = torch.tensor([max(local, default=none), -min(local, default=-none)], dtype=torch.int64)
    high, neg_low = acc.reduce(peaks.to(acc.device), "max").tolist()
    return None if high == none else (int(-neg_low), int(high))
