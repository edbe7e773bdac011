"""Labelling with undo: every action remembers what it replaced and can write that back."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentworld.pool.labels import Labels, label_text


@dataclass(frozen=True)
class LabelAction:
    """One labelling action: the fields set on targets and each target's previous values."""

    targets: tuple[str, ...]
    fields: Mapping[str, Any]
    previous: Mapping[str, Mapping[str, Any]]

    def describe(self) -> str:
        what = label_text(self.fields)
        n = len(self.targets)
        return f"{what} on {self.targets[0] if n == 1 else f'{n} targets'}"


class Curator:
    """Writes labels to the overlay as one author and keeps an undo stack."""

    def __init__(
        self,
        labels: Labels,
        current: Callable[[Sequence[str]], dict[str, dict[str, Any]]],
        author: str,
    ) -> None:
        self.labels = labels
        self.current = current  # target -> its own (not inherited) effective label values
        self.author = author
        self.undo_stack: list[LabelAction] = []

    def label(self, targets: Sequence[str], fields: Mapping[str, Any]) -> LabelAction:
        """Set ``fields`` on ``targets`` (``None`` clears a field) and remember the old values."""
        targets = tuple(dict.fromkeys(targets))
        before = self.current(targets)
        previous = {t: {f: before.get(t, {}).get(f) for f in fields} for t in targets}
        self.labels.set(targets, fields, author=self.author)
        action = LabelAction(targets, dict(fields), previous)
        self.undo_stack.append(action)
        return action

    def undo(self) -> LabelAction | None:
        """Write back what the last action replaced; None when there is nothing to undo."""
        if not self.undo_stack:
            return None
        action = self.undo_stack.pop()
        by_values: dict[tuple[tuple[str, Any], ...], list[str]] = {}
        for target, values in action.previous.items():
            key = tuple(sorted((f, _freeze(v)) for f, v in values.items()))
            by_values.setdefault(key, []).append(target)
        for key, targets in by_values.items():
            self.labels.set(targets, {f: _thaw(v) for f, v in key}, author=self.author)
        return action


def _freeze(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


def _thaw(v: Any) -> Any:
    return list(v) if isinstance(v, tuple) else v
