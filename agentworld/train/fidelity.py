"""Before the first update: do the trainer's log-probs of the sampled tokens match the rollout's?

With the same weights, precision and tokens they agree to ~1e-4; a large gap
means the token ids, the masks or the chat template are not what the policy
saw, and every update after it would train on the wrong thing.

Like is compared with like: the engine records log-probs of the distribution it
sampled from (logits / temperature: vLLM's ``processed_logprobs``, `aw serve`),
and the trainer applies each step's recorded temperature. A step that sampled
with a parameter the trainer does not reproduce (top-p, top-k, penalties) fails
the check by name, whatever the numbers say.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass(frozen=True)
class FidelityReport:
    tokens: int  # sampled tokens that had rollout log-probs
    mean_abs: float
    max_abs: float
    tolerance: float
    # Sampling parameters the steps set that the trainer does not apply, e.g. {"top_p": 0.9}.
    unapplied: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        if self.tokens and self.unapplied:
            return False
        return self.tokens == 0 or self.mean_abs <= self.tolerance

    def line(self) -> str:
        if self.tokens == 0:
            return "fidelity: no rollout log-probs in the first batch (rendered data); not checked"
        if self.unapplied:
            names = ", ".join(f"{k}={v!r}" for k, v in sorted(self.unapplied.items()))
            verdict = (
                f"MISMATCH: the rollout sampled with {names}, which the trainer does not "
                "apply (it applies temperature only); sample without it to train on-policy"
            )
        elif self.ok:
            verdict = "ok"
        else:
            verdict = "MISMATCH: tokens, masks or template differ from the rollout"
        return (
            f"fidelity: |trainer - rollout| log-prob over {self.tokens} tokens: "
            f"mean {self.mean_abs:.2e}, max {self.max_abs:.2e} ({verdict})"
        )


def logprob_gap(
    trainer_logp: torch.Tensor, rollout_logp: torch.Tensor, has_logprob: torch.Tensor
) -> tuple[float, float, int]:
    """(sum |diff|, max |diff|, count) over tokens with a rollout log-prob. All (B, T)."""
    m = has_logprob.bool()
    diff = (trainer_logp.float() - rollout_logp.float()).abs()[m]  # (N,)
    if diff.numel() == 0:
        return 0.0, 0.0, 0
    return float(diff.sum()), float(diff.max()), int(diff.numel())


def report(
    sum_abs: float,
    max_abs: float,
    count: int,
    tolerance: float,
    *,
    unapplied: dict[str, Any] | None = None,
) -> FidelityReport:
    """The check's verdict from the summed gaps (and the parameters the trainer cannot apply)."""
    mean = sum_abs / count if count else 0.0
    return FidelityReport(count, mean, max_abs, tolerance, dict(unapplied or {}))
