"""The behaviour policy in every ratio: rollout log-probs, truncated importance weights, their stats.

The policy that sampled a token is the one the pool recorded (the engine's
log-prob of that token under the step's sampling parameters). The trainer's
ratio r = pi_train / pi_rollout is taken against it, so stale or replayed data
is clipped against the policy that produced it, and engine/trainer mismatch
(other kernels, precision, a lagging checkpoint) shows up in the numbers
logged here instead of silently biasing the gradient.

Truncated importance sampling (TIS, as in verl's rollout correction and TRL's
``vllm_importance_sampling_cap``): where the clipped surrogate uses the raw
ratio, its gradient weight is min(r, C) instead of r, so one token whose
ratio exploded cannot dominate an update; unlike a hard clip its gradient is
kept, only bounded.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch


def behaviour_logprobs(
    logp: torch.Tensor, rollout_logp: torch.Tensor, has_logprob: torch.Tensor
) -> torch.Tensor:
    """The behaviour policy's log-prob per token: the rollout's where recorded, else on-policy.

    All (B, T). Where a step recorded none (rendered data, an upstream without
    log-probs) the trainer's own detached log-prob stands in: ratio 1 there.
    """
    return torch.where(has_logprob.bool(), rollout_logp, logp.detach())


def truncated_ratio(ratio: torch.Tensor, cap: float) -> torch.Tensor:
    """min(r, cap) in value and in gradient weight: d/dθ = min(r, cap) * d log π / dθ.

    ``cap`` <= 0 leaves the ratio alone. (B, T) -> (B, T).
    """
    if cap <= 0:
        return ratio
    # r * stopgrad(min(r, C) / r): the value is min(r, C); its gradient is min(r, C) ∇log π.
    return ratio * (ratio.clamp(max=cap) / ratio).detach()


@dataclass
class ImportanceStats:
    """Sums over sampled tokens, so micro-batches, processes and updates add up exactly."""

    tokens: float = 0.0  # sampled (loss) tokens
    rollout_tokens: float = 0.0  # of those, with a recorded rollout log-prob
    abs_diff: float = 0.0  # sum |log pi_train - log pi_rollout| over rollout tokens
    mismatch_kl: float = 0.0  # sum of k3 = r - 1 - log r over rollout tokens: KL(rollout||train)
    clipped: float = 0.0  # tokens whose surrogate took the clipped branch
    ratio: float = 0.0  # sum r
    ratio_sq: float = 0.0  # sum r^2
    tis: float = 0.0  # sum min(r, C)
    truncated: float = 0.0  # tokens with r > C

    @classmethod
    def of(
        cls,
        logp: torch.Tensor,
        rollout_logp: torch.Tensor,
        has_logprob: torch.Tensor,
        mask: torch.Tensor,
        clipped: torch.Tensor,
        tis_cap: float,
    ) -> ImportanceStats:
        """The sums for one batch; all inputs (B, T), ``clipped`` a bool of the clipped tokens."""
        with torch.no_grad():
            m = mask.bool()
            has = has_logprob.bool() & m
            d = (logp.detach().float() - rollout_logp.float()).masked_fill(~has, 0.0)  # (B, T)
            r = torch.exp(d)  # 1 where no rollout log-prob: on-policy
            rm = r[m]
            capped = rm.clamp(max=tis_cap) if tis_cap > 0 else rm
            return cls(
                tokens=float(m.sum()),
                rollout_tokens=float(has.sum()),
                abs_diff=float(d.abs()[has].sum()),
                mismatch_kl=float((r - 1 - d)[has].sum()),
                clipped=float((clipped.bool() & m).sum()),
                ratio=float(rm.sum()),
                ratio_sq=float((rm * rm).sum()),
                tis=float(capped.sum()),
                truncated=float((rm > tis_cap).sum()) if tis_cap > 0 else 0.0,
            )

    def add(self, other: ImportanceStats) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def to_list(self) -> list[float]:
        """The sums in field order, for one all-reduce across processes."""
        return [getattr(self, f.name) for f in fields(self)]

    @classmethod
    def from_list(cls, values: list[float]) -> ImportanceStats:
        return cls(*values)

    def metrics(self) -> dict[str, float | int | None]:
        """The per-update metrics row entries (None where nothing was measured)."""
        n, nr = self.tokens, self.rollout_tokens

        def per(x: float, d: float) -> float | None:
            return x / d if d else None

        return {
            "logprob_diff_mean": per(self.abs_diff, nr),
            "mismatch_kl": per(self.mismatch_kl, nr),
            "clip_frac": per(self.clipped, n),
            "ratio_mean": per(self.ratio, n),
            "tis_mean": per(self.tis, n),
            "tis_truncated_frac": per(self.truncated, n),
            # Kish's effective sample size of the ratios, as a fraction of the tokens:
            # (sum r)^2 / (n sum r^2); 1 when every ratio is equal (on-policy).
            "ess": per(self.ratio**2, n * self.ratio_sq),
            "rollout_tokens": int(nr),
            "onpolicy_tokens": int(n - nr),
        }
