"""What an export reads: the training selection, with labels applied the way training applies them.

Trajectories labelled not trainable are dropped by the selection
(``trainable_only``); steps labelled not trainable stay as context but carry
no training signal (weight 0, loss mask 0, no step row). Reward overrides
from labels replace recorded rewards everywhere.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import orjson

from agentworld.pool import Pool, Selection, Trajectory


def step_trainable(step: Mapping[str, Any]) -> bool:
    """False when the step (or its trajectory) is labelled not trainable."""
    return (step.get("_labels") or {}).get("trainable") is not False


def step_reward(step: Mapping[str, Any]) -> float | None:
    """The step's reward with a label override applied."""
    labels = step.get("_labels") or {}
    return labels["reward"] if "reward" in labels else step.get("reward")


def iter_selected(
    pool: Pool,
    selection: Selection,
    *,
    progress: Callable[[int], None] | None = None,
) -> Iterator[Trajectory]:
    """Stream selected trajectories (labels applied); ``progress`` gets the count read so far."""
    for n, traj in enumerate(pool.iter_trajectories(selection), 1):
        if progress is not None:
            progress(n)
        yield traj


def ground_truth(traj: Trajectory) -> Any:
    """The task's reference answer: ``metadata.ground_truth`` of the end or first step, else None.

    Only that key is read: ``aw run`` keeps the agent's own answer in
    ``metadata.answer``, which must never pass for the reference.
    """
    sources = [(traj.end or {}).get("metadata") or {}]
    sources += [s.get("metadata") or {} for s in traj.steps[:1]]
    for meta in sources:
        if meta.get("ground_truth") is not None:
            return meta["ground_truth"]
    return None


@dataclasses.dataclass
class TaskFold:
    """The trajectories of one (dataset, split, task), folded into what a prompt dataset needs."""

    dataset: str | None
    split: str | None
    task: str
    agent: str | None
    first: dict[str, Any]  # the first step with a chat prompt: the task as the agent saw it
    ground_truth: str  # "" when no trajectory recorded one
    rewards: list[float] = dataclasses.field(default_factory=list)

    @property
    def mean_reward(self) -> float | None:
        return sum(self.rewards) / len(self.rewards) if self.rewards else None


def _gt_text(t: Trajectory) -> str:
    gt = ground_truth(t)
    if gt is None:
        return ""
    return gt if isinstance(gt, str) else orjson.dumps(gt).decode()


def fold_tasks(trajs: Iterable[Trajectory], counts: Counter[str]) -> list[TaskFold]:
    """One fold per task, in first-seen order (verl rows, TRL prompt rows)."""
    folds: dict[tuple[Any, ...], TaskFold] = {}
    for t in trajs:
        counts["trajectories"] += 1
        first = next((s for s in t.steps if (s.get("request") or {}).get("messages")), None)
        if first is None:
            counts["skipped_no_chat_prompt"] += 1
            continue
        key = (t.first("dataset"), t.first("split"), t.first("task") or t.id)
        fold = folds.get(key)
        if fold is None:
            fold = folds[key] = TaskFold(*key, t.first("agent"), first, _gt_text(t))
        elif fold.ground_truth == "":
            fold.ground_truth = _gt_text(t)
        if t.reward is not None:
            fold.rewards.append(float(t.reward))
    for fold in folds.values():
        if fold.ground_truth == "":
            counts["tasks_without_ground_truth"] += 1
        counts["tasks"] += 1
    return list(folds.values())
