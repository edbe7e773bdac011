"""The behaviour policy, truncated importance sampling and their stats, against numbers by hand."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from agentworld.train.importance import (  # noqa: E402
    ImportanceStats,
    behaviour_logprobs,
    truncated_ratio,
)
from agentworld.train.losses import policy_loss  # noqa: E402

e = math.exp


def test_behaviour_is_the_rollout_where_recorded_and_on_policy_elsewhere() -> None:
    logp = torch.tensor([[-1.0, -2.0, -3.0]], requires_grad=True)
    rollout = torch.tensor([[-1.5, 0.0, -2.5]])
    has = torch.tensor([[True, False, True]])
    old = behaviour_logprobs(logp, rollout, has)
    assert old.tolist() == [[-1.5, -2.0, -2.5]]
    assert not old.requires_grad  # the fallback is the trainer's value, not its graph


def test_truncated_ratio_caps_the_value_and_the_gradient_weight() -> None:
    logp = torch.tensor([math.log(3.0), math.log(0.5)], requires_grad=True)
    r = torch.exp(logp)  # ratio against a behaviour log-prob of 0
    w = truncated_ratio(r, 2.0)
    assert w.tolist() == pytest.approx([2.0, 0.5])
    w.sum().backward()
    # d/dlogp: min(r, C) where a plain ratio would give r (3 and 0.5).
    assert logp.grad.tolist() == pytest.approx([2.0, 0.5])
    assert truncated_ratio(r, 0.0) is r  # 0 turns it off


def test_stale_data_is_clipped_against_the_rollout_policy_by_hand() -> None:
    # The trainer now gives every token log-prob -1; the rollout that sampled gave
    # -1.5, -0.5 and -1: ratios e^0.5, e^-0.5 and 1, advantage +1.
    logp = torch.tensor([[-1.0, -1.0, -1.0]], requires_grad=True)
    rollout = torch.tensor([[-1.5, -0.5, -1.0]])
    has = torch.ones(1, 3, dtype=torch.bool)
    old = behaviour_logprobs(logp, rollout, has)
    loss, stats = policy_loss(
        logp, old, torch.tensor([1.0]), torch.ones(1, 3), normaliser="dapo", tis_cap=2.0
    )
    # token 0: max(-e^0.5, -1.2) = -1.2 (clipped); token 1: max(-e^-0.5, -0.8) = -e^-0.5;
    # token 2: -1; token mean over 3.
    assert float(loss.detach()) == pytest.approx((-1.2 - e(-0.5) - 1.0) / 3)
    assert float(stats["clip_frac"]) == pytest.approx(1 / 3)
    assert float(stats["ratio_mean"]) == pytest.approx((e(0.5) + e(-0.5) + 1) / 3)
    loss.backward()
    # The clipped token gets no gradient; the others -A * r / 3.
    assert logp.grad[0].tolist() == pytest.approx([0.0, -e(-0.5) / 3, -1 / 3])
    imp = stats["importance"].metrics()
    assert imp["clip_frac"] == pytest.approx(1 / 3)
    assert imp["logprob_diff_mean"] == pytest.approx(1 / 3)


def test_tis_bounds_a_negative_advantage_token_whose_ratio_exploded() -> None:
    logp = torch.tensor([[math.log(3.0)]], requires_grad=True)  # ratio 3 against rollout 0
    old = torch.zeros(1, 1)
    adv = torch.tensor([-1.0])
    loss, stats = policy_loss(logp, old, adv, torch.ones(1, 1), normaliser="dapo", tis_cap=2.0)
    # max(+min(3, 2), +clip(3) = 1.2) = 2, gradient weight 2 instead of 3.
    assert float(loss.detach()) == pytest.approx(2.0)
    loss.backward()
    assert float(logp.grad) == pytest.approx(2.0)
    imp = stats["importance"].metrics()
    assert imp["tis_mean"] == pytest.approx(2.0) and imp["tis_truncated_frac"] == 1.0
    # Without TIS the plain ratio: loss 3, gradient 3.
    logp2 = logp.detach().clone().requires_grad_(True)
    plain, _ = policy_loss(logp2, old, adv, torch.ones(1, 1), normaliser="dapo", tis_cap=0.0)
    plain.backward()
    assert float(plain.detach()) == pytest.approx(3.0) and float(logp2.grad) == pytest.approx(3.0)


def test_importance_stats_by_hand() -> None:
    logp = torch.tensor([[-1.0, -1.0, -1.0, -2.0]])
    rollout = torch.tensor([[-1.5, -0.5, -1.0, 0.0]])
    has = torch.tensor([[True, True, True, False]])  # the last token: no rollout log-prob
    clipped = torch.tensor([[True, False, False, False]])
    st = ImportanceStats.of(logp, rollout, has, torch.ones(1, 4), clipped, tis_cap=1.5)
    m = st.metrics()
    r = [e(0.5), e(-0.5), 1.0, 1.0]  # on-policy fallback: ratio 1
    assert m["rollout_tokens"] == 3 and m["onpolicy_tokens"] == 1
    assert m["logprob_diff_mean"] == pytest.approx((0.5 + 0.5 + 0) / 3)
    # k3 = r - 1 - log r over the rollout tokens
    assert m["mismatch_kl"] == pytest.approx(((e(0.5) - 1.5) + (e(-0.5) - 0.5) + 0) / 3)
    assert m["clip_frac"] == pytest.approx(1 / 4)
    assert m["ratio_mean"] == pytest.approx(sum(r) / 4)
    assert m["tis_mean"] == pytest.approx((1.5 + e(-0.5) + 1 + 1) / 4)
    assert m["tis_truncated_frac"] == pytest.approx(1 / 4)
    assert m["ess"] == pytest.approx(sum(r) ** 2 / (4 * sum(x * x for x in r)))
    # Sums add across parts and processes: two halves give the whole.
    a = ImportanceStats.of(
        logp[:, :2], rollout[:, :2], has[:, :2], torch.ones(1, 2), clipped[:, :2], 1.5
    )
    b = ImportanceStats.of(
        logp[:, 2:], rollout[:, 2:], has[:, 2:], torch.ones(1, 2), clipped[:, 2:], 1.5
    )
    a.add(b)
    assert ImportanceStats.from_list(a.to_list()).metrics() == pytest.approx(m)


def test_on_policy_everything_is_neutral() -> None:
    logp = torch.tensor([[-1.0, -2.0]])
    st = ImportanceStats.of(
        logp, logp, torch.ones(1, 2), torch.ones(1, 2), torch.zeros(1, 2), tis_cap=2.0
    )
    m = st.metrics()
    assert m["ratio_mean"] == 1.0 and m["ess"] == 1.0 and m["mismatch_kl"] == 0.0
    assert m["clip_frac"] == 0.0 and m["tis_truncated_frac"] == 0.0
