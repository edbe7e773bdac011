"""Our losses, normalisers and advantages against the reference implementations users trust.

Each reference below is copied, formula for formula, from the file and function its
docstring names (TRL at f2cd577, verl at b178a3c), on tiny random tensors; ours must
give the same value and the same gradient. Ours runs with ``tis_cap=0`` here (its
truncation of the unclipped branch is ours, tested in ``test_importance.py``); where ours
chooses differently from both (a group of one), the test says so and pins ours.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from agentworld.group_advantage import group_relative  # noqa: E402
from agentworld.train.advantages import group_advantages  # noqa: E402
from agentworld.train.losses import kl_k3, policy_loss  # noqa: E402


def _verl_agg_loss(loss_mat: Any, loss_mask: Any, loss_agg_mode: str) -> Any:
    """verl ``verl/trainer/ppo/core_algos.py::agg_loss`` (dp_size 1, no global counts)."""
    if loss_agg_mode == "token-mean":
        return (loss_mat * loss_mask).sum() / loss_mask.sum()
    if loss_agg_mode == "seq-mean-token-mean":
        seq_mask = torch.sum(loss_mask, dim=-1)
        seq_losses = torch.sum(loss_mat * loss_mask, dim=-1) / (seq_mask + 1e-8)
        seq_mask = (seq_mask > 0).float()
        return (seq_losses * seq_mask).sum() / seq_mask.sum()
    raise ValueError(loss_agg_mode)


def _verl_vanilla(
    old_log_prob: Any,
    log_prob: Any,
    advantages: Any,
    response_mask: Any,
    *,
    cliprange_low: float,
    cliprange_high: float,
    clip_ratio_c: float | None,
    loss_agg_mode: str,
) -> tuple[Any, Any]:
    """verl ``core_algos.py::compute_policy_loss_vanilla`` (``clip_ratio_c`` None: no dual
    clip, as our GRPO; verl always applies it). Returns (loss, pg_clipfrac)."""
    negative_approx_kl = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    ratio = torch.exp(negative_approx_kl)
    pg_losses1 = -advantages * ratio
    pg_losses2 = -advantages * torch.clamp(ratio, 1 - cliprange_low, 1 + cliprange_high)
    clip_pg_losses1 = torch.maximum(pg_losses1, pg_losses2)
    clipped = torch.gt(pg_losses2, pg_losses1).float()
    pg_clipfrac = (clipped * response_mask).sum() / response_mask.sum()
    pg_losses = clip_pg_losses1
    if clip_ratio_c is not None:
        pg_losses3 = -advantages * clip_ratio_c
        clip_pg_losses2 = torch.min(pg_losses3, clip_pg_losses1)
        pg_losses = torch.where(advantages < 0, clip_pg_losses2, clip_pg_losses1)
    return _verl_agg_loss(pg_losses, response_mask, loss_agg_mode), pg_clipfrac


def _trl_loss(
    per_token_logps: Any,
    old_per_token_logps: Any,
    advantages: Any,
    mask: Any,
    *,
    loss_type: str,
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
    beta: float = 0.0,
    ref_per_token_logps: Any = None,
    max_completion_length: int = 512,
) -> Any:
    """TRL ``trl/trainer/grpo_trainer.py::GRPOTrainer._compute_loss``, token-level importance
    sampling, one process, no gradient accumulation (``num_items_in_batch`` = mask.sum())."""
    advantages = advantages.unsqueeze(1)
    coef_1 = torch.exp(per_token_logps - old_per_token_logps)
    if beta != 0.0:
        d = ref_per_token_logps - per_token_logps
        per_token_kl = torch.exp(d) - d - 1
    coef_2 = torch.clamp(coef_1, 1 - epsilon_low, 1 + epsilon_high)
    per_token_loss = -torch.min(coef_1 * advantages, coef_2 * advantages)
    if beta != 0.0:
        per_token_loss = per_token_loss + beta * per_token_kl
    if loss_type == "grpo":
        return ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    if loss_type == "bnpo":
        return (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)
    if loss_type == "dr_grpo":
        return (per_token_loss * mask).sum() / (per_token_loss.size(0) * max_completion_length)
    if loss_type == "dapo":
        return (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)
    raise ValueError(loss_type)


def _batch(seed: int = 0, b: int = 4, t: int = 7) -> tuple[Any, Any, Any, Any, Any]:
    """logp (with a graph), old and ref log-probs, per-sequence advantages of both signs,
    and a mask of ragged lengths: ratios up to ~e^0.6, so some clip and some do not."""
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(b, t, generator=g) * 3
    logp = (old + (torch.rand(b, t, generator=g) - 0.5) * 1.2).requires_grad_(True)
    ref = old + (torch.rand(b, t, generator=g) - 0.5)
    adv = torch.tensor([1.3, -0.7, 0.4, -1.9])[:b]
    lengths = torch.tensor([7, 2, 5, 1])[:b]
    mask = (torch.arange(t)[None, :] < lengths[:, None]).float()
    return logp, old, ref, adv, mask


def _value_and_grad(fn: Any, logp: Any) -> tuple[float, Any]:
    x = logp.detach().clone().requires_grad_(True)
    loss = fn(x)
    loss.backward()
    return float(loss.detach()), x.grad


@pytest.mark.parametrize(
    ("ours", "trl", "verl"),
    [("dapo", "dapo", "token-mean"), ("grpo", "grpo", "seq-mean-token-mean"),
     ("dr_grpo", "dr_grpo", None)],
)  # fmt: skip
@pytest.mark.parametrize("clip", [(0.2, 0.2), (0.2, 0.28)])
def test_clipped_surrogate_matches_trl_and_verl(
    ours: str, trl: str, verl: str | None, clip: tuple[float, float]
) -> None:
    logp, old, _, adv, mask = _batch()
    lo, hi = clip
    got, got_grad = _value_and_grad(
        lambda x: policy_loss(
            x, old, adv, mask, normaliser=ours, max_tokens=16, clip_low=lo, clip_high=hi,
            tis_cap=0.0,
        )[0],
        logp,
    )  # fmt: skip
    want, want_grad = _value_and_grad(
        lambda x: _trl_loss(
            x, old, adv, mask, loss_type=trl, epsilon_low=lo, epsilon_high=hi,
            max_completion_length=16,
        ),
        logp,
    )  # fmt: skip
    assert got == pytest.approx(want, rel=1e-6)
    assert torch.allclose(got_grad, want_grad, atol=1e-7)
    if verl is not None:
        v, v_grad = _value_and_grad(
            lambda x: _verl_vanilla(
                old, x, adv[:, None], mask, cliprange_low=lo, cliprange_high=hi,
                clip_ratio_c=None, loss_agg_mode=verl,
            )[0],
            logp,
        )  # fmt: skip
        assert got == pytest.approx(v, rel=1e-6)
        assert torch.allclose(got_grad, v_grad, atol=1e-7)


def test_dual_clip_and_clip_fraction_match_verl() -> None:
    logp, old, _, adv, mask = _batch(seed=1)
    logp = (old + torch.tensor([[0.0, 1.5, -1.0, 2.0, 0.1, 1.3, 0.0]])).requires_grad_(True)
    (loss, stats) = policy_loss(logp, old, adv, mask, normaliser="dapo", ratio_cap=3.0, tis_cap=0.0)
    want, clipfrac = _verl_vanilla(
        old, logp, adv[:, None], mask, cliprange_low=0.2, cliprange_high=0.2, clip_ratio_c=3.0,
        loss_agg_mode="token-mean",
    )  # fmt: skip
    assert float(loss.detach()) == pytest.approx(float(want.detach()), rel=1e-6)
    (g,) = torch.autograd.grad(loss, logp)
    (wg,) = torch.autograd.grad(want, logp)
    assert torch.allclose(g, wg, atol=1e-7)
    assert float(stats["clip_frac"]) == pytest.approx(float(clipfrac))
    plain, _ = _verl_vanilla(
        old, logp, adv[:, None], mask, cliprange_low=0.2, cliprange_high=0.2, clip_ratio_c=None,
        loss_agg_mode="token-mean",
    )  # fmt: skip
    assert float(plain.detach()) > float(want.detach())  # the dual clip bounded a token here


def test_kl_term_matches_trl_beta_and_verl_low_var_kl() -> None:
    """k3 = e^(ref - logp) - (ref - logp) - 1, added per token to the loss with its
    coefficient before the normaliser (TRL's ``beta``; verl's ``use_kl_loss`` aggregates it
    with the same ``loss_agg_mode``, ``core_algos.py::kl_penalty_forward`` "low_var_kl",
    whose clamps at +-20 and 10 are not reached here)."""
    logp, old, ref, adv, mask = _batch(seed=2)
    for ours, trl in (("dapo", "dapo"), ("grpo", "grpo")):
        got, got_grad = _value_and_grad(
            lambda x, n=ours: policy_loss(
                x, old, adv, mask, normaliser=n, tis_cap=0.0, ref_logp=ref, kl_coef=0.04
            )[0],
            logp,
        )
        want, want_grad = _value_and_grad(
            lambda x, n=trl: _trl_loss(
                x, old, adv, mask, loss_type=n, beta=0.04, ref_per_token_logps=ref
            ),
            logp,
        )
        assert got == pytest.approx(want, rel=1e-6)
        assert torch.allclose(got_grad, want_grad, atol=1e-7)
    kl = ref - logp.detach()
    verl_kld = torch.clamp(torch.exp(kl.clamp(-20, 20)) - kl.clamp(-20, 20) - 1, min=-10, max=10)
    assert torch.allclose(kl_k3(logp.detach(), ref), verl_kld, atol=1e-7)


def _verl_grpo_advantage(
    scores: list[float], index: list[str], epsilon: float = 1e-6, norm_adv_by_std: bool = True
) -> list[float]:
    """verl ``core_algos.py::compute_grpo_outcome_advantage`` (one scalar score per response)."""
    s = torch.tensor(scores, dtype=torch.float64)
    id2score: dict[str, list[Any]] = defaultdict(list)
    for i in range(len(s)):
        id2score[index[i]].append(s[i])
    id2mean, id2std = {}, {}
    for idx, group in id2score.items():
        if len(group) == 1:
            id2mean[idx], id2std[idx] = torch.tensor(0.0), torch.tensor(1.0)
        else:
            st = torch.stack(group)
            id2mean[idx], id2std[idx] = torch.mean(st), torch.std(st)
    out = s.clone()
    for i in range(len(s)):
        if norm_adv_by_std:
            out[i] = (s[i] - id2mean[index[i]]) / (id2std[index[i]] + epsilon)
        else:
            out[i] = s[i] - id2mean[index[i]]
    return out.tolist()


@pytest.mark.parametrize("scale_std", [True, False])
def test_group_advantages_match_verl_and_trl(scale_std: bool) -> None:
    """Sample std (torch.std, n - 1) in both; verl's epsilon 1e-6 is ours. A group of one:
    verl gives the raw score (mean 0, std 1), TRL never trains one; ours gives 0 (no
    baseline), a documented choice. All-equal rewards: 0 in all three."""
    rewards = [1.0, 0.0, 0.0, 1.0, 0.5, 0.2, 0.9, 0.3, 0.3, 0.3]
    groups = ["a"] * 4 + ["b"] * 3 + ["c"] * 3
    got = group_advantages(rewards, groups, scale_std=scale_std)
    want = _verl_grpo_advantage(rewards, groups, norm_adv_by_std=scale_std)
    assert got == pytest.approx(want, abs=1e-9)
    # TRL (grpo_trainer.py, scale_rewards="group"): (r - mean) / (nanstd + 1e-4)
    r = torch.tensor(rewards[:4], dtype=torch.float64)
    trl = (r - r.mean()) / (r.std() + 1e-4) if scale_std else r - r.mean()
    assert group_relative(rewards[:4], scale_std=scale_std, eps=1e-4) == pytest.approx(trl.tolist())
    assert group_advantages([0.7], ["solo"]) == [0.0]


@pytest.mark.parametrize("normaliser", ["dapo", "grpo", "dr_grpo"])
def test_micro_batches_on_two_processes_sum_to_the_whole_batch(normaliser: str) -> None:
    """The loop's arithmetic (``loop.py`` / ``forward.update_denominators``): 2 processes x
    2 accumulation steps, each micro-batch divided by the update's counts; Accelerate
    divides each loss by grad_accum and DDP averages the processes, and the loop scales
    each loss by processes x grad_accum to undo both. Uneven micro-batches (1 and 3 rows,
    lengths 7 / 2, 5, 1) must give the whole batch's loss and gradient exactly."""
    logp, old, ref, adv, mask = _batch(seed=4)
    kw = {"normaliser": normaliser, "max_tokens": 16, "kl_coef": 0.1}
    want, want_grad = _value_and_grad(
        lambda x: policy_loss(x, old, adv, mask, ref_logp=ref, **kw)[0], logp
    )
    n_seqs = float((mask.sum(-1) > 0).sum())
    n_tokens = float(mask.sum())
    processes, accum = 2, 2
    # (rows, weight): process 0 ran out after one micro-batch and trains a zero-weight filler
    slots = [[(slice(0, 1), 1.0), (slice(0, 1), 0.0)], [(slice(1, 2), 1.0), (slice(2, 4), 1.0)]]
    x = logp.detach().clone().requires_grad_(True)
    per_process_grads, total = [], 0.0
    for micro in slots:
        grad = torch.zeros_like(x)
        for s, weight in micro:
            loss, _ = policy_loss(
                x[s], old[s], adv[s], mask[s], ref_logp=ref[s], n_seqs=n_seqs,
                n_tokens=n_tokens, **kw,
            )  # fmt: skip
            total += weight * float(loss.detach())
            (g,) = torch.autograd.grad(loss * (weight * processes * accum) / accum, x)
            grad += g
        per_process_grads.append(grad)
    ddp_grad = sum(per_process_grads) / processes
    assert total == pytest.approx(want, rel=1e-6)
    assert torch.allclose(ddp_grad, want_grad, atol=1e-7)
