"""Group-relative advantages: each trajectory's reward against the others that answered its task."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentworld.group_advantage import group_relative
from agentworld.train.update_stats import Spread


def group_advantages(
    rewards: Sequence[float], groups: Sequence[str], *, scale_std: bool = True, eps: float = 1e-6
) -> list[float]:
    """A_i = r_i - mean(group), divided by the group's sample std when ``scale_std`` (GRPO).

    Dr. GRPO leaves the std out (``scale_std=False``). A group of one has no baseline,
    so its advantage is 0.
    """
    members: dict[str, list[int]] = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    out = [0.0] * len(rewards)
    for idx in members.values():
        advantages = group_relative([rewards[i] for i in idx], scale_std=scale_std, eps=eps)
        for i, a in zip(idx, advantages, strict=True):
            out[i] = a
    return out


def scale_std_for(normaliser: str) -> bool:
    """Dr. GRPO drops the std division; GRPO and DAPO keep it."""
    return normaliser != "dr_grpo"


@dataclass(frozen=True)
class AdvantageStats:
    """What an update's rows' advantages were; None throughout when it had no rows."""

    mean: float | None
    std: float | None
    min: float | None
    max: float | None
    zero_fraction: float | None


def advantage_stats(spread: Spread) -> AdvantageStats:
    """From the advantages' sums over every process (``update_stats.across_processes``)."""
    if not spread.n:
        return AdvantageStats(None, None, None, None, None)
    return AdvantageStats(spread.mean, spread.std, spread.low, spread.high, spread.zeros / spread.n)
