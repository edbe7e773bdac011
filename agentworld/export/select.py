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


def selection_dict(selection: Selection) -> dict[str, Any]:
    """The selection's non-default filters, for the manifest."""
    default = Selection()
    out = {}
    for f in dataclasses.fields(selection):
        value = getattr(selection, f.name)
        if value != getattr(default, f.name):
            out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


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


def _flag(name: str, value: Any) -> str:
    """A selection field as the CLI flag that sets it."""
    if name == "trainable_only":
        return "not labelled untrainable (default; --include-untrainable)"
    if isinstance(value, tuple | list):
        value = ",".join(value)
    return f"--{name.replace('_', '-')} {value}"


def explain_empty(pool: Pool, selection: Selection) -> list[str]:
    """Why a selection matched nothing: its filters, each one's count when dropped, what the pool has.

    For a person fixing the command line: the first line names every filter;
    the next say how many trajectories each filter alone removed (the count
    without it), and for ``--agent`` / ``--dataset`` the names the pool holds.
    """
    idx = pool.index()
    filters = selection_dict(selection)
    lines = ["nothing matched " + ", ".join(_flag(k, v) for k, v in filters.items())]
    default = Selection()
    for name in filters:
        without = dataclasses.replace(selection, **{name: getattr(default, name)})
        n = idx.count_trajectories(without)
        if n:
            lines.append(f"  without {_flag(name, filters[name])}: {n} trajectories")
    per = idx.stats()["per_agent"]
    for name in ("dataset", "agent"):
        if name in filters:
            held: dict[str, int] = {}
            for r in per:
                held[str(r[name])] = held.get(str(r[name]), 0) + r["trajectories"]
            names = ", ".join(f"{k} ({v})" for k, v in sorted(held.items())) or "none"
            lines.append(f"  {name}s in the pool (trajectories): {names}")
    if len(lines) == 1:
        lines.append(f"  the pool holds {idx.count_trajectories(Selection())} trajectories")
    return lines
