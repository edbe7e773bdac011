"""Training losses as pure tensor functions: SFT, clipped policy gradient, KL; one normaliser apart.

All inputs are aligned with the *targets*: position t holds the log-prob of
token t+1 given tokens <= t, and `mask` is 1 only where that token was
sampled by the policy (never prompts, tool results or template tokens).
"""

from __future__ import annotations

from typing import Any

import torch

from agentworld.errors import ConfigError
from agentworld.train.importance import ImportanceStats, truncated_ratio

# |log pi_train - log pi_rollout| beyond this is a data error, not a policy change
# (e^20 ~ 5e8): the ratio is taken at the bound, which every clip and cap already covers.
LOG_RATIO_BOUND = 20.0


def token_logprobs(
    logits: torch.Tensor, targets: torch.Tensor, temperature: torch.Tensor | None = None
) -> torch.Tensor:
    """Log-probability of each target token. logits (B, T, V), targets (B, T) -> (B, T), fp32.

    ``temperature`` (B, T) makes it the log-prob under softmax(logits / T): the
    distribution a step sampled from, not the raw model's.
    """
    logits = logits.float()
    if temperature is not None:
        logits = logits / temperature.unsqueeze(-1)
    picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, T)
    return picked - torch.logsumexp(logits, dim=-1)


def normalise(
    token_loss: torch.Tensor,
    mask: torch.Tensor,
    normaliser: str,
    max_tokens: int,
    *,
    n_seqs: float | None = None,
    n_tokens: float | None = None,
) -> torch.Tensor:
    """Reduce a per-token loss (B, T) to a scalar; the variants differ only here.

    - ``dapo``: token-level mean over every sampled token in the batch (also SFT's;
      verl's ``token-mean``).
    - ``grpo``: mean over each sequence's tokens, then mean over sequences.
    - ``dr_grpo``: sum over tokens divided by a constant, sequences x ``max_tokens``
      (Dr. GRPO: no length bias; the trainer passes the generation budget,
      ``max_completion_len``, as TRL divides by ``max_completion_length``).

    ``n_seqs`` / ``n_tokens`` replace this batch's own counts of sequences with
    sampled tokens / sampled tokens: the trainer gives every micro-batch, and every
    part of one cut for memory, the whole update's denominators (over every process),
    so their losses sum to the update's, as TRL's ``dapo`` divides by the tokens of the
    whole generation batch.
    """
    mask = mask.to(token_loss.dtype)
    summed = token_loss * mask  # (B, T)
    per_seq_tokens = mask.sum(-1)  # (B,)
    seqs = n_seqs if n_seqs is not None else (per_seq_tokens > 0).sum().clamp(min=1)
    if normaliser == "grpo":
        return (summed.sum(-1) / per_seq_tokens.clamp(min=1)).sum() / seqs
    if normaliser == "dr_grpo":
        return summed.sum() / (seqs * max_tokens)
    if normaliser == "dapo":
        tokens = n_tokens if n_tokens is not None else mask.sum().clamp(min=1)
        return summed.sum() / tokens
    raise ConfigError(f"train.normaliser: unknown {normaliser!r}")


def sft_loss(
    logp: torch.Tensor, mask: torch.Tensor, *, n_tokens: float | None = None
) -> torch.Tensor:
    """Cross-entropy on sampled tokens: mean negative log-likelihood per sampled token."""
    return normalise(-logp, mask, "dapo", 1, n_tokens=n_tokens)


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token KL(policy || reference) estimate k3 = e^(ref-logp) - (ref-logp) - 1 (>= 0)."""
    # Bounded as the ratio is (verl's low_var_kl too): a sampled token ~90 nats below the
    # reference overflowed e^d to inf, and the update to NaN. verl's further cap of k3 at 10
    # is left out: it zeroes the KL's gradient from a gap of ~2.6 nats, where it is needed.
    d = (ref_logp - logp).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    return torch.exp(d) - d - 1


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    normaliser: str = "grpo",
    max_tokens: int = 1,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    ratio_cap: float = 0.0,
    tis_cap: float = 0.0,
    ref_logp: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    has_logprob: torch.Tensor | None = None,
    n_seqs: float | None = None,
    n_tokens: float | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """PPO-style clipped importance-ratio loss against ``old_logp``; returns (loss, stats).

    logp, old_logp, mask: (B, T); advantages: (B,) per sequence or (B, T) per token.
    ``old_logp`` is the behaviour policy (the rollout's log-probs, see
    ``importance.behaviour_logprobs``). ``tis_cap`` > 0 truncates the importance
    weight of the unclipped branch at min(r, cap) (TIS); ``ratio_cap`` > 0 bounds the
    loss of negative-advantage tokens at -A * cap (dual clip). ``has_logprob`` (B, T)
    says which tokens had a rollout log-prob, for the stats; ``n_seqs``/``n_tokens``
    are the whole batch's denominators when this is one part of it (see ``normalise``).
    """
    adv = advantages[:, None] if advantages.dim() == 1 else advantages  # (B, 1) or (B, T)
    # Bounded as verl bounds it: one recorded log-prob ~90 nats off overflowed exp to inf,
    # and inf * 0 (TIS, or the branch torch.maximum did not pick) made the update NaN.
    log_ratio = (logp - old_logp).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    ratio = torch.exp(log_ratio)  # (B, T)
    unclipped = -adv * truncated_ratio(ratio, tis_cap)
    clipped = -adv * ratio.clamp(1 - clip_low, 1 + clip_high)
    token_loss = torch.maximum(unclipped, clipped)  # (B, T)
    if ratio_cap > 0:
        capped = torch.minimum(token_loss, -adv * ratio_cap)
        token_loss = torch.where(adv < 0, capped, token_loss)
    kl = None
    if ref_logp is not None:
        kl = kl_k3(logp, ref_logp)  # (B, T)
        if kl_coef:
            token_loss = token_loss + kl_coef * kl
    loss = normalise(token_loss, mask, normaliser, max_tokens, n_seqs=n_seqs, n_tokens=n_tokens)
    with torch.no_grad():
        m = mask.bool()
        n = m.sum().clamp(min=1)
        has = has_logprob if has_logprob is not None else torch.ones_like(m)
        stats = {
            "clip_frac": ((clipped > unclipped) & m).sum().float() / n,
            "ratio_mean": (ratio * m).sum() / n,
            "kl": (kl * m).sum() / n if kl is not None else None,
            "kl_sum": (kl * m).sum() if kl is not None else None,
            "importance": ImportanceStats.of(
                logp, old_logp, has, mask, clipped > unclipped, tis_cap
            ),
        }
    return loss, stats
