"""Group-relative advantages: each trajectory's reward against the others that answered its task."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from agentworld.group_advantage import group_relative


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
    mean: float
    std: float
    min: float
    max: float
    zero_fraction: float


def advantage_stats(values: Sequence[float]) -> AdvantageStats:
    if not values:
        return AdvantageStats(0.0, 0.0, 0.0, 0.0, 0.0)
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / n)
    zero = sum(1 for v in values if v == 0) / n
    return AdvantageStats(mean, std, min(values), max(values), zero)
