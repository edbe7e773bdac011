"""Group-relative advantages against numbers computed by hand."""

from __future__ import annotations

import math

import pytest

from agentworld.train.advantages import advantage_stats, group_advantages, scale_std_for


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


def test_stats() -> None:
    s = advantage_stats([1.0, -1.0, 0.0, 0.0])
    assert (s.mean, s.min, s.max, s.zero_fraction) == (0.0, -1.0, 1.0, 0.5)
    assert s.std == pytest.approx(math.sqrt(0.5))
