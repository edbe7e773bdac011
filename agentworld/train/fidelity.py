"""Before the first update: do the trainer's log-probs of the sampled tokens match the rollout's?

With the same weights, precision and tokens they agree to ~1e-4; a large gap
means the token ids, the masks or the chat template are not what the policy
saw, and every update after it would train on the wrong thing. Unless the
weights are not the same: rollouts sampled by an older policy version than the
trainer's (a resumed online run, one reload behind) differ by that lag, which
is off-policy data, not a data error; the report says which of the two it is.

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

from agentworld.train.config import TrainConfig
from agentworld.train.forward import forward_parts, to_device
from agentworld.train.logprobs import sampled_logprobs


@dataclass(frozen=True)
class FidelityReport:
    tokens: int  # sampled tokens that had rollout log-probs
    mean_abs: float
    max_abs: float
    tolerance: float
    trainer_version: int | None = None  # the policy version of the trainer's weights
    rollout_versions: tuple[int, ...] = ()  # the versions that sampled the batch checked
    # Sampling parameters the steps set that the trainer does not apply, e.g. {"top_p": 0.9}.
    unapplied: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        if self.tokens and self.unapplied:
            return False
        return self.tokens == 0 or self.mean_abs <= self.tolerance

    @property
    def lagging(self) -> tuple[int, ...]:
        """Rollout versions other than the trainer's: their log-probs came from other weights."""
        if self.trainer_version is None:
            return ()
        return tuple(v for v in self.rollout_versions if v != self.trainer_version)

    @property
    def style(self) -> str:
        return "green" if self.ok else "yellow" if self.lagging else "bold red"

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
        elif self.lagging:
            versions = ", ".join(map(str, self.lagging))
            verdict = (
                f"policy lag: sampled by version {versions}, the trainer is at version "
                f"{self.trainer_version}; an off-policy gap, not a token or template mismatch"
            )
        else:
            verdict = "MISMATCH: tokens, masks or template differ from the rollout"
            if self.trainer_version is not None and self.rollout_versions:
                verdict += f" (same policy version {self.trainer_version})"
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
    trainer_version: int | None = None,
    rollout_versions: tuple[int, ...] = (),
    unapplied: dict[str, Any] | None = None,
) -> FidelityReport:
    """The check's verdict from the summed gaps (all processes), the versions involved and
    the sampling parameters the trainer cannot apply."""
    return FidelityReport(
        count,
        sum_abs / count if count else 0.0,
        max_abs,
        tolerance,
        trainer_version,
        tuple(sorted(set(rollout_versions))),
        dict(unapplied or {}),
    )


def measure_fidelity(
    model: Any, micro: list[dict[str, Any]], cfg: TrainConfig, acc: Any, trainer_version: int
) -> FidelityReport:
    """Trainer vs rollout log-probs of the sampled tokens in the first update's micro-batches,
    over every process (a collective: every process calls it, with its own micro-batches)."""
    from accelerate.utils import gather_object

    model.eval()
    gap = torch.zeros(3, device=acc.device)  # sum |d|, max |d|, count
    unapplied: dict[str, Any] = {}
    with torch.no_grad():
        for mb in micro:
            unapplied.update(mb["meta"].get("unapplied") or {})
            for b in forward_parts(to_device(mb, acc.device), cfg.forward_tokens):
                has = b["has_logprob"][:, 1:]  # (B, T-1)
                # Like with like: the distribution the step sampled from.
                logp = sampled_logprobs(
                    model,
                    b["input_ids"],
                    b["attention_mask"],
                    has,
                    b["temperature"][:, 1:],
                    chunk_tokens=cfg.logits_chunk_tokens,
                )  # (B, T-1)
                s_, m_, n_ = logprob_gap(logp, b["rollout_logprobs"][:, 1:], has)
                gap += torch.tensor([s_, 0.0, n_], device=acc.device)
                gap[1] = max(gap[1], m_)
    sums = acc.reduce(gap[[0, 2]].clone(), "sum")
    peak = acc.reduce(gap[1:2].clone(), "max")
    sampled_by = gather_object([v for mb in micro for v in mb["meta"]["policy_versions"]])
    for seen in gather_object([unapplied]):
        unapplied.update(seen)
    return report(
        float(sums[0]),
        float(peak[0]),
        int(sums[1]),
        cfg.fidelity_tolerance,
        trainer_version=trainer_version,
        rollout_versions=tuple(sampled_by),
        unapplied=unapplied,
    )
