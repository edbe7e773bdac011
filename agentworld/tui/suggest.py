"""Completion for the filter line: ``agent:so`` suggests ``agent:solver`` from the index."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from textual.suggester import Suggester

from agentworld.tui.filters import FILTER_KEYS

STATIC_VALUES = {
    "status": ("open", "done", "failed", "timeout", "cancelled"),
    "label": ("good", "bad", "unsure", "any", "none", "trainable"),
}


class FilterSuggester(Suggester):
    """Suggests filter keys, then values seen in the pool for the key being typed."""

    def __init__(self) -> None:
        super().__init__(use_cache=False, case_sensitive=True)
        self.values: dict[str, Sequence[str]] = dict(STATIC_VALUES)

    def set_values(self, values: Mapping[str, Sequence[str]]) -> None:
        """Values per key (distinct agents, datasets, groups), loaded by the screen."""
        self.values = {**STATIC_VALUES, **values}

    async def get_suggestion(self, value: str) -> str | None:
        head, _, last = value.rpartition(" ")
        prefix = f"{head} " if head else ""
        key, sep, partial = last.partition(":")
        if not last:
            return None
        if not sep:
            match = next((k for k in FILTER_KEYS if k.startswith(key) and k != key), None)
            return f"{prefix}{match}:" if match else None
        options = self.values.get(key, ())
        done, _, current = partial.rpartition(",")  # status:done,fa → failed
        match = next((v for v in options if v.startswith(current) and v != current), None)
        if match is None:
            return None
        return f"{prefix}{key}:{done + ',' if done else ''}{match}"
