"""Training losses as pure tensor functions: SFT, clipped policy gradient, KL; one normaliser apart.

All inputs are aligned with the *targets*: position t holds the log-prob of
token t+1 given tokens <= t, and `mask` is 1 only where that token was
sampled by the policy (never prompts, tool results or template tokens).
"""

from __future__ import annotations

from typing import Any

import torch

from agentworld.errors import ConfigError


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Log-probability of each target token. logits (B, T, V), targets (B, T) -> (B, T), fp32."""
    logits = logits.float()
    picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, T)
    return picked - torch.logsumexp(logits, dim=-1)


def normalise(
    token_loss: torch.Tensor, mask: torch.Tensor, normaliser: str, max_tokens: int
) -> torch.Tensor:
    """Reduce a per-token loss (B, T) to a scalar; the variants differ only here.

    - ``grpo``: mean over each sequence's tokens, then mean over sequences.
    - ``dr_grpo``: sum over tokens divided by a constant, sequences x ``max_tokens``
      (Dr. GRPO: no length bias).
    - ``dapo``: token-level mean over every sampled token in the batch (also SFT's).
    """
    mask = mask.to(token_loss.dtype)
    summed = token_loss * mask  # (B, T)
    per_seq_tokens = mask.sum(-1)  # (B,)
    n_seqs = (per_seq_tokens > 0).sum().clamp(min=1)
    if normaliser == "grpo":
        return (summed.sum(-1) / per_seq_tokens.clamp(min=1)).sum() / n_seqs
    if normaliser == "dr_grpo":
        return summed.sum() / (n_seqs * max_tokens)
    if normaliser == "dapo":
        return summed.sum() / mask.sum().clamp(min=1)
    raise ConfigError(f"train.normaliser: unknown {normaliser!r}")


def sft_loss(logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Cross-entropy on sampled tokens: mean negative log-likelihood per sampled token."""
    return normalise(-logp, mask, "dapo", 1)


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token KL(policy || reference) estimate k3 = e^(ref-logp) - (ref-logp) - 1 (>= 0)."""
    d = ref_logp - logp
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
    ref_logp: torch.Tensor | None = None,
    kl_coef: float = 0.0,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """PPO-style clipped importance-ratio loss against ``old_logp``; returns (loss, stats).

    logp, old_logp, mask: (B, T); advantages: (B,) per sequence or (B, T) per token.
    ``ratio_cap`` > 0 bounds the loss of negative-advantage tokens at -A * cap (dual
    clip), so a stale off-policy step whose ratio exploded cannot dominate the update.
    """
    adv = advantages[:, None] if advantages.dim() == 1 else advantages  # (B, 1) or (B, T)
    ratio = torch.exp(logp - old_logp)  # (B, T)
    unclipped = -adv * ratio
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
    loss = normalise(token_loss, mask, normaliser, max_tokens)
    with torch.no_grad():
        m = mask.bool()
        n = m.sum().clamp(min=1)
        stats = {
            "clip_frac": ((clipped > unclipped) & m).sum().float() / n,
            "ratio_mean": (ratio * m).sum() / n,
            "kl": (kl * m).sum() / n if kl is not None else None,
        }
    return loss, stats
