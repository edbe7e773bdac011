"""What `aw train` says of its data and of its run: the plan line before the first update,
a metrics row and a status line per logged update, the summary table after the last."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from rich.table import Table
from rich.text import Text

from agentworld.plural import plural
from agentworld.train.advantages import advantage_stats
from agentworld.train.config import TrainConfig
from agentworld.train.data import Plan
from agentworld.train.fidelity import FidelityReport
from agentworld.train.importance import ImportanceStats
from agentworld.train.sequences import SequenceStats
from agentworld.train.update_stats import UpdateStats


def plan_line(plan: Plan, sources: int) -> str:
    """How many trajectories the plan trains on, from what, and what it dropped and why."""
    groups = f" in {plural(plan.groups, 'group')}" if plan.groups else ""  # none for SFT
    return (
        f"plan: {plural(len(plan.advantages), 'trajectory')}{groups} "
        f"from {plural(sources, 'shard')} ({plan.matched} matched; dropped "
        f"{plan.zero_advantage} zero-advantage, {plan.no_reward} without reward, "
        f"{plan.infra_failures} infrastructure failures)"
    )


def update_row(
    cfg: TrainConfig,
    step: int,
    upd: UpdateStats,
    importance: ImportanceStats,
    counts: Sequence[float],
    *,
    dt_s: float,
    seqs: SequenceStats,
    lr: float,
    grad_norm: Any,
    policy_version: int,
    rollout_versions: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """One update's metrics.jsonl row. ``counts``: its tokens, padded tokens, sampled tokens
    and rows over every process; ``seqs``: the run's sequence counts so far; ``grad_norm``:
    a float or a 0-d tensor, None when the update clipped none; ``rollout_versions``: the
    lowest and highest policy version that sampled its rows (None: no row said)."""
    adv = advantage_stats(upd.advantages)
    adv_row = {
        "adv_mean": adv.mean,
        "adv_std": adv.std,
        "adv_min": adv.min,
        "adv_max": adv.max,
        "adv_zero_fraction": adv.zero_fraction,
    }
    tokens = int(counts[0])
    return {
        "step": step,
        "time": time.time(),
        "loss": upd.loss.total if upd.loss.n else None,  # the micro-batches' sum
        "lr": lr,
        "grad_norm": float(grad_norm) if grad_norm is not None else None,
        "reward_mean": upd.rewards.mean,
        # SFT has no advantages (each row's 1.0 is a weight): None, not 1.0.
        **(adv_row if cfg.algo != "sft" else dict.fromkeys(adv_row)),
        "kl": upd.kl.total if upd.kl.n else None,
        # Mean entropy (nats) of the policy's distribution over the sampled tokens.
        "entropy": upd.entropy.total if upd.entropy.n else None,
        # Behaviour policy vs trainer (RL; None for SFT): see train/importance.py.
        **(
            importance.metrics()
            if cfg.algo != "sft"
            else dict.fromkeys(ImportanceStats().metrics())
        ),
        "tokens": tokens,
        "padded_tokens": int(counts[1]),
        "sampled_tokens": int(counts[2]),
        "rows": int(counts[3]),
        "tokens_per_s": tokens / dt_s if dt_s > 0 else None,
        "merged": seqs.merged,
        "breaks": seqs.breaks,
        "rendered": seqs.rendered,
        "onpolicy_steps": seqs.no_logprobs,
        "policy_version": policy_version,
        # The versions that sampled the update's rows, and how far the oldest is behind the
        # trainer's weights (0: on-policy; online, a server that missed a reload shows here).
        "rollout_version_min": rollout_versions[0] if rollout_versions else None,
        "rollout_version_max": rollout_versions[1] if rollout_versions else None,
        "policy_lag": policy_version - rollout_versions[0] if rollout_versions else None,
    }


def row_status(row: Mapping[str, Any], max_steps: int, *, live: bool) -> str:
    """A logged update in a few words: the bar's text on a terminal (the bar shows the step),
    else a log line of its own."""
    loss_s = f"{row['loss']:.4f}" if row["loss"] is not None else "-"
    speed = f"{row['tokens_per_s'] or 0:,.0f} tok/s"
    if live:
        return f"loss {loss_s}  {speed}"
    reward = row["reward_mean"]
    reward_s = f"  reward {reward:.3f}" if reward is not None else ""
    return f"train {row['step']}/{max_steps}  loss {loss_s}{reward_s}  {speed}"


def summary_table(summary: dict[str, Any]) -> Table:
    """The run's summary as a two-column table (``interrupted`` only when it was)."""
    table = Table(title="aw train", show_header=False)
    for k, v in summary.items():
        if k == "interrupted" and not v:
            continue
        if isinstance(v, FidelityReport):
            v = v.line().removeprefix("fidelity: ")  # the row is named already
        elif isinstance(v, float):
            v = f"{v:,.4g}"
        table.add_row(k, Text(str(v)))
    return table
