"""One micro-batch through the model: its loss under the run's algorithm, cut into parts
that fit ``forward_tokens``, divided by the whole update's counts.

The loop (``loop.py``) calls these for every micro-batch; the losses themselves are in
``losses.py``, the log-probs of the sampled tokens in ``logprobs.py``.
"""

from __future__ import annotations

from typing import Any

import torch

from agentworld.train.config import TrainConfig
from agentworld.train.importance import behaviour_logprobs
from agentworld.train.logprobs import sampled_logprobs
from agentworld.train.losses import policy_loss, sft_loss


def forward_parts(batch: dict[str, Any], forward_tokens: int) -> list[dict[str, Any]]:
    """A micro-batch cut into row ranges of at most ``forward_tokens`` padded tokens each.

    Each part is trimmed to its own longest row. Rows come from ``pack`` sorted by
    length, so the parts pad little more than the whole did.
    """
    ids = batch["input_ids"]  # (B, T)
    b, t = ids.shape
    per = max(1, forward_tokens // t)
    if per >= b:
        return [batch]
    parts = []
    lengths = batch["attention_mask"].sum(-1)  # (B,)
    for s in range(0, b, per):
        n = max(2, int(lengths[s : s + per].max()))
        parts.append(
            {
                k: v[s : s + per, :n] if isinstance(v, torch.Tensor) and v.dim() == 2 else v
                for k, v in batch.items()
            }
            | {"advantages": batch["advantages"][s : s + per]}
        )
    return parts


def forward_loss(
    model: Any,
    ref: Any,
    batch: dict[str, Any],
    cfg: TrainConfig,
    *,
    n_seqs: float | None = None,
    n_tokens: float | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Loss of one micro-batch (or one part of it) under the configured algorithm, and its stats.

    ``n_seqs`` / ``n_tokens``: the whole update's denominators (``update_denominators``)
    when ``batch`` is a part of it, so the parts' losses sum to the update's loss.
    """
    ids = batch["input_ids"]  # (B, T)
    mask = batch["sampled"][:, 1:]  # (B, T-1): only tokens the policy sampled
    # The policy is the distribution that sampled: logits / the step's temperature (RL);
    # SFT imitates the text, so it trains the model's own distribution.
    temp = batch["temperature"][:, 1:] if cfg.algo != "sft" else None  # (B, T-1)
    logp, entropy = sampled_logprobs(
        model,
        ids,
        batch["attention_mask"],
        mask > 0,
        temp,
        chunk_tokens=cfg.logits_chunk_tokens,
        entropy=True,
    )  # (B, T-1) each: log p(token t+1) and the entropy it was drawn with, 0 where not sampled
    # The policy's entropy summed over the sampled tokens (the update's token mean is the
    # sum over its micro-batches / its tokens): collapse shows here before reward stalls.
    entropy_sum = (entropy * mask).sum()
    if cfg.algo == "sft":
        return sft_loss(logp, mask, n_tokens=n_tokens), {"entropy_sum": entropy_sum}
    # The behaviour policy is the rollout's (recorded at capture) for GRPO and PPO alike;
    # tokens without a recorded log-prob fall back to on-policy (ratio 1) and are counted.
    has = batch["has_logprob"][:, 1:]
    old = behaviour_logprobs(logp, batch["rollout_logprobs"][:, 1:], has)
    ref_logp = None
    if ref is not None:
        with torch.no_grad():
            ref_logp = sampled_logprobs(
                ref,
                ids,
                batch["attention_mask"],
                mask > 0,
                temp,
                chunk_tokens=cfg.logits_chunk_tokens,
            )  # (B, T-1)
    loss, stats = policy_loss(
        logp,
        old,
        batch["advantages"],
        mask,
        normaliser=cfg.normaliser,
        max_tokens=cfg.max_completion_len,
        clip_low=cfg.clip_low,
        clip_high=cfg.clip_high,
        ratio_cap=cfg.ratio_cap if cfg.algo == "ppo" else 0.0,
        tis_cap=cfg.tis_cap,
        ref_logp=ref_logp,
        kl_coef=cfg.kl_coef,
        has_logprob=has,
        n_seqs=n_seqs,
        n_tokens=n_tokens,
    )
    return loss, {**stats, "entropy_sum": entropy_sum}


def update_denominators(acc: Any, micro: list[dict[str, Any]]) -> tuple[float, float]:
    """The update's sequences with sampled tokens, and its sampled tokens, over every
    micro-batch of every process (a collective: each process calls it once per update).

    Each micro-batch's loss is divided by these, not by its own counts, so the update's
    loss is the normaliser's over the whole update, as TRL's ``dapo`` divides by the
    generation batch's tokens (``num_items_in_batch``). Micro-batches are packed by
    length: their own token means weighed a token of a batch of short answers several
    times one of long answers, the length bias token-mean is there to remove.
    """
    local = torch.zeros(2, dtype=torch.float64, device=acc.device)  # seqs, tokens
    for mb in micro:
        if mb["weight"]:
            mask = mb["sampled"][:, 1:]  # (B, T-1)
            local += torch.tensor(
                [float((mask.sum(-1) > 0).sum()), float(mask.sum())],
                dtype=torch.float64,
                device=acc.device,
            )
    n_seqs, n_tokens = acc.reduce(local, "sum").tolist()
    return max(n_seqs, 1.0), max(n_tokens, 1.0)


def to_device(batch: dict[str, Any], device: Any) -> dict[str, Any]:
    """A micro-batch's tensors on ``device`` (the rest as they are)."""
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
