"""Losses against numbers computed by hand."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from agentworld.errors import ConfigError  # noqa: E402
from agentworld.train.losses import (  # noqa: E402
    kl_k3,
    normalise,
    policy_loss,
    sft_loss,
    token_logprobs,
)


def test_token_logprobs_is_log_softmax_at_the_target() -> None:
    logits = torch.tensor([[[0.0, math.log(3.0)], [math.log(3.0), 0.0]]])  # (1, 2, 2)
    got = token_logprobs(logits, torch.tensor([[1, 1]]))
    assert got[0].tolist() == pytest.approx([math.log(0.75), math.log(0.25)])


LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])


def test_normalisers_by_hand() -> None:
    # grpo: per-sequence means (1+2)/2 = 1.5 and 4/1 = 4, then their mean 2.75
    assert float(normalise(LOSS, MASK, "grpo", 4)) == pytest.approx(2.75)
    # dr_grpo: (1+2+4) / (2 sequences x 4 max tokens)
    assert float(normalise(LOSS, MASK, "dr_grpo", 4)) == pytest.approx(7 / 8)
    # dapo: (1+2+4) / 3 sampled tokens
    assert float(normalise(LOSS, MASK, "dapo", 4)) == pytest.approx(7 / 3)
    with pytest.raises(ConfigError):
        normalise(LOSS, MASK, "mean", 4)


def test_masked_tokens_never_contribute() -> None:
    poisoned = LOSS.clone()
    poisoned[MASK == 0] = 1e9
    for name in ("grpo", "dr_grpo", "dapo"):
        assert float(normalise(poisoned, MASK, name, 4)) == float(normalise(LOSS, MASK, name, 4))


def test_sft_loss_is_mean_nll_over_sampled_tokens() -> None:
    logp = torch.tensor([[-1.0, -2.0, -9.0], [-3.0, -9.0, -9.0]])
    assert float(sft_loss(logp, MASK)) == pytest.approx((1 + 2 + 3) / 3)


def test_policy_loss_on_policy_is_minus_advantage_and_its_gradient() -> None:
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -0.7]], requires_grad=True)
    adv = torch.tensor([1.0, -2.0])
    loss, stats = policy_loss(logp, logp.detach(), adv, torch.ones(2, 2), normaliser="dapo")
    assert loss.detach().item() == pytest.approx((-1 - 1 + 2 + 2) / 4)
    loss.backward()
    # d/dlogp of -A * exp(logp - old) at ratio 1, divided by 4 tokens
    assert logp.grad.flatten().tolist() == pytest.approx([-0.25, -0.25, 0.5, 0.5])
    assert float(stats["clip_frac"]) == 0.0
    assert float(stats["ratio_mean"]) == pytest.approx(1.0)


def test_policy_loss_clips_and_caps_by_hand() -> None:
    old = torch.zeros(1, 3)
    logp = torch.tensor([[0.5, -0.5, 0.5]], requires_grad=True)
    adv = torch.tensor([[1.0, -1.0, -1.0]])  # per token
    r_hi, r_lo = math.exp(0.5), math.exp(-0.5)
    loss, stats = policy_loss(logp, old, adv, torch.ones(1, 3), normaliser="dapo")
    # A>0, ratio 1.65 -> clipped at 1.2: -1.2; A<0, ratio 0.61 -> clipped at 0.8: 0.8;
    # A<0, ratio 1.65 -> the unclipped 1.65 is larger and kept.
    assert loss.item() == pytest.approx((-1.2 + 0.8 + r_hi) / 3)
    assert float(stats["clip_frac"]) == pytest.approx(2 / 3)
    loss.backward()
    assert logp.grad[0].tolist() == pytest.approx([0.0, 0.0, r_hi / 3])
    assert r_lo < 0.8

    logp2 = logp.detach().clone().requires_grad_(True)
    capped, _ = policy_loss(logp2, old, adv, torch.ones(1, 3), normaliser="dapo", ratio_cap=1.5)
    # dual clip: the runaway negative-advantage token's loss is bounded by -A x 1.5
    assert capped.detach().item() == pytest.approx((-1.2 + 0.8 + 1.5) / 3)
    capped.backward()
    assert logp2.grad[0].tolist() == pytest.approx([0.0, 0.0, 0.0])


@pytest.mark.parametrize("tis_cap", [2.0, 0.0])
@pytest.mark.parametrize("advantage", [1.0, -1.0])
def test_one_runaway_rollout_logprob_does_not_make_the_update_nan(
    tis_cap: float, advantage: float
) -> None:
    """A recorded log-prob ~90 nats below the trainer's overflowed the ratio to inf: the
    loss (TIS: inf * 0) or the gradient (the unselected branch: 0 * inf) was NaN, and one
    bad token turned every weight NaN. The log-ratio is bounded at +-20, as verl bounds it."""
    logp = torch.tensor([[-1.0, -1.0]], requires_grad=True)
    old = torch.tensor([[-1.0, -95.0]])
    loss, _ = policy_loss(
        logp, old, torch.tensor([advantage]), torch.ones(1, 2), normaliser="dapo", tis_cap=tis_cap
    )
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logp.grad).all()
    # The sane token's gradient is untouched: -A * ratio 1 / 2 tokens.
    assert float(logp.grad[0, 0]) == pytest.approx(-advantage / 2)


def test_kl_k3_by_hand_and_added_with_its_coefficient() -> None:
    logp, ref = torch.tensor([[-1.0]]), torch.tensor([[-2.0]])
    assert float(kl_k3(logp, ref)) == pytest.approx(math.exp(-1) + 1 - 1)
    assert float(kl_k3(ref, ref)) == 0.0
    base, _ = policy_loss(logp, logp, torch.tensor([1.0]), torch.ones(1, 1), normaliser="dapo")
    with_kl, stats = policy_loss(
        logp,
        logp,
        torch.tensor([1.0]),
        torch.ones(1, 1),
        normaliser="dapo",
        ref_logp=ref,
        kl_coef=0.1,
    )
    assert float(with_kl - base) == pytest.approx(0.1 * math.exp(-1))
    assert float(stats["kl"]) == pytest.approx(math.exp(-1))


def test_one_runaway_reference_gap_does_not_make_the_update_nan() -> None:
    """k3 = e^(ref - logp) - (ref - logp) - 1 overflowed to inf once the policy put a sampled
    token ~90 nats below the reference (stale or replayed data at a low temperature): the
    loss was inf and its gradient -inf, which gradient clipping turns into NaN weights. The
    log-ratio is bounded at +-20 as for the policy ratio, as verl's ``low_var_kl`` bounds it."""
    logp = torch.tensor([[-1.0, -95.0]], requires_grad=True)
    ref = torch.tensor([[-2.0, -1.0]])
    loss, stats = policy_loss(
        logp, logp.detach(), torch.tensor([1.0]), torch.ones(1, 2), normaliser="dapo",
        ref_logp=ref, kl_coef=0.1,
    )  # fmt: skip
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logp.grad).all()
    assert torch.isfinite(stats["kl"])
    # The sane token's gradient is untouched: (-A + kl_coef * (1 - e^(ref - logp))) / 2 tokens.
    assert float(logp.grad[0, 0]) == pytest.approx((-1 + 0.1 * (1 - math.exp(-1))) / 2)
    # Within the bound k3 is exact; at the bound it is e^20 - 21, not inf.
    assert float(kl_k3(torch.tensor(-95.0), torch.tensor(-1.0))) == pytest.approx(math.exp(20) - 21)
