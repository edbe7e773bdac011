"""What an export reads: the training selection, with labels applied the way training applies them.

Trajectories labelled not trainable are dropped by the selection
(``trainable_only``); steps labelled not trainable stay as context but carry
no training signal (weight 0, loss mask 0, no step row). Reward overrides
from labels replace recorded rewards everywhere.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any

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
