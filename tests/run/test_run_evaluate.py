"""Held-out evaluation arithmetic: success rate, its standard error, and the lift's."""

from __future__ import annotations

import math

import pytest

from agentworld.run.evaluate import Evaluation, evaluation_of, lift


def test_evaluation_counts_successes_at_the_threshold_and_misses_for_no_reward() -> None:
    ev = evaluation_of([1.0, 0.0, None, 1.0, 0.5], threshold=1.0, policy_version=3)
    assert (ev.successes, ev.n, ev.policy_version) == (2, 5, 3)
    assert ev.rate == pytest.approx(0.4)
    assert ev.stderr == pytest.approx(math.sqrt(0.4 * 0.6 / 5))  # 0.2191
    assert evaluation_of([0.5], threshold=0.5).successes == 1


def test_lift_and_its_standard_error_by_hand() -> None:
    before = Evaluation(successes=50, n=100)  # 0.5, se 0.05
    after = Evaluation(successes=80, n=100)  # 0.8, se 0.04
    d = lift(before, after)
    assert d.delta == pytest.approx(0.3)
    assert d.stderr == pytest.approx(math.sqrt(0.05**2 + 0.04**2))  # 0.0640
    assert d.z == pytest.approx(0.3 / 0.0640312, rel=1e-5)  # 4.69


def test_lift_of_rates_without_spread() -> None:
    none, every = Evaluation(0, 10), Evaluation(10, 10)
    assert lift(none, every).z == math.inf
    assert lift(every, none).z == -math.inf
    assert lift(none, none).z == 0.0
    assert Evaluation(0, 0).rate == 0.0 and Evaluation(0, 0).stderr == 0.0
