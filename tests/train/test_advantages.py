"""Group-relative advantages against numbers computed by hand."""

from __future__ import annotations

import math
from dataclasses import astuple

import pytest

from agentworld.train.advantages import (
    AdvantageStats,
    advantage_stats,
    group_advantages,
    scale_std_for,
)
from agentworld.train.update_stats import Spread


def test_grpo_advantages_by_hand() -> None:
    # group g: rewards 1, 0, 0, 1 -> mean 0.5, sample std sqrt(1/3)
    adv = group_advantages([1, 0, 0, 1], ["g"] * 4, scale_std=True, eps=0.0)
    a = 0.5 / math.sqrt(1 / 3)
    assert adv == pytest.approx([a, -a, -a, a])


def test_dr_grpo_leaves_out_the_std() -> None:
    assert group_advantages([3, 1], ["g", "g"], scale_std=False) == pytest.approx([1.0, -1.0])
    assert scale_std_for("dr_grpo") is False
    assert scale_std_for("grpo") and scale_std_for("dapo")


def test_groups_are_independent_and_singletons_get_zero() -> None:
    adv = group_advantages([1, 0, 5, 2, 4], ["a", "a", "solo", "b", "b"], scale_std=False)
    assert adv == pytest.approx([0.5, -0.5, 0.0, -1.0, 1.0])


def test_equal_rewards_give_zero() -> None:
    assert group_advantages([1, 1, 1], ["g"] * 3) == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("scale_std", [True, False])
@pytest.mark.parametrize("reward", [0.1, 0.7, 1 / 3])
def test_equal_rewards_give_exactly_zero_whatever_their_rounding(
    reward: float, scale_std: bool
) -> None:
    """A group all at 0.1 has a mean of 0.10000000000000002 in floats: its members got
    -1.4e-11 (-1.4e-17 without the std), not 0, so skip_zero_advantage kept the group."""
    n = 8 if reward == 0.7 else 3
    adv = group_advantages([reward] * n, ["g"] * n, scale_std=scale_std)
    assert adv == [0.0] * n


def test_stats() -> None:
    s = advantage_stats(Spread.of([1.0, -1.0, 0.0, 0.0]))
    assert (s.mean, s.min, s.max, s.zero_fraction) == (0.0, -1.0, 1.0, 0.5)
    assert s.std == pytest.approx(math.sqrt(0.5))
    assert advantage_stats(Spread()) == AdvantageStats(None, None, None, None, None)


def test_stats_of_two_processes_are_the_stats_of_their_union() -> None:
    """What each process sums adds up to the update's numbers (process 0's alone were
    logged); a process without rows adds nothing."""
    a, b = [0.866, -0.866, 0.0], [1.0441, -0.0949, -0.9492, 2.5]
    parts = [Spread.of(a), Spread.of(b), Spread.of([])]
    summed = [sum(x) for x in zip(*(p.sums() for p in parts), strict=True)]
    merged = Spread(*summed, min(p.low for p in parts), max(p.high for p in parts))
    want, got = advantage_stats(Spread.of(a + b)), advantage_stats(merged)
    assert astuple(got) == pytest.approx(astuple(want)) and (got.min, got.max) == (-0.9492, 2.5)
