"""Which trajectories a command works on: one selection shared by ls, the TUI, training and export."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentworld.errors import ConfigError
from agentworld.pool.labels import QUALITIES
from agentworld.pool.search_text import text_matches

if TYPE_CHECKING:
    from agentworld.pool.reader import Trajectory

TRAJECTORY_STATUSES = ("open", "done", "failed", "timeout", "cancelled")


@dataclass(frozen=True)
class Selection:
    """Filters over trajectories. ``None`` means "any".

    Label-aware fields use effective labels (a step's own over its
    trajectory's): ``trainable_only`` drops anything labelled not trainable;
    ``quality`` keeps only the listed qualities; ``tag`` keeps trajectories with
    the tag on them or on any of their steps; rewards use label overrides.
    """

    agent: str | None = None
    dataset: str | None = None
    split: str | None = None
    task: str | None = None
    group: str | None = None
    trajectory: str | None = None
    status: tuple[str, ...] = ()
    min_reward: float | None = None
    max_reward: float | None = None
    min_policy: int | None = None
    max_policy: int | None = None
    since: float | None = None
    until: float | None = None
    trainable_only: bool = False
    quality: tuple[str, ...] = ()
    tag: str | None = None
    labelled: bool | None = None
    text: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        bad = [s for s in self.status if s not in TRAJECTORY_STATUSES]
        if bad:
            raise ConfigError(
                f"--status: unknown status {bad[0]!r}; known: {', '.join(TRAJECTORY_STATUSES)}"
            )
        # A quality no label can hold would select nothing, silently: a typo, refused.
        bad = [q for q in self.quality if q not in QUALITIES]
        if bad:
            raise ConfigError(
                f"--quality: unknown quality {bad[0]!r}; known: {', '.join(QUALITIES)}"
            )

    @classmethod
    def from_flags(
        cls, *, status: str | None = None, quality: str | None = None, **filters: Any
    ) -> Selection:
        """A selection from command-line filters: ``status`` and ``quality`` are comma
        lists, the other fields as they are."""
        return cls(
            status=tuple(s for s in (status or "").split(",") if s),
            quality=tuple(q for q in (quality or "").split(",") if q),
            **filters,
        )

    def admits(self, t: Trajectory) -> bool:
        """Whether a trajectory read from the pool passes (its summary, as ``matches``)."""
        return self.matches(t.summary(texts=self.text is not None), t.labels)

    def matches(self, t: Mapping[str, Any], labels: Mapping[str, Any]) -> bool:
        """Whether a trajectory summary (``Trajectory.summary``: its fields, and ``texts``,
        each step's search text) passes, given its labels."""
        for key in ("agent", "dataset", "split", "task", "group"):
            want = getattr(self, key)
            if want is not None and t.get(key) != want:
                return False
        if self.trajectory is not None and t.get("id") != self.trajectory:
            return False
        if self.status and t.get("status") not in self.status:
            return False
        reward = labels.get("reward", t.get("reward"))
        if self.min_reward is not None and (reward is None or reward < self.min_reward):
            return False
        if self.max_reward is not None and (reward is None or reward > self.max_reward):
            return False
        pmin, pmax = t.get("policy_min"), t.get("policy_max")
        if self.min_policy is not None and (pmin is None or pmin < self.min_policy):
            return False
        if self.max_policy is not None and (pmax is None or pmax > self.max_policy):
            return False
        if self.since is not None and (t.get("last_at") or 0) < self.since:
            return False
        if self.until is not None and (t.get("first_at") or 0) > self.until:
            return False
        if self.trainable_only and labels.get("trainable") is False:
            return False
        if self.quality and labels.get("quality") not in self.quality:
            return False
        # A tag on the trajectory or on any of its steps (the index's rule, index_queries).
        tags = [*(labels.get("tags") or ()), *(t.get("step_tags") or ())]
        if self.tag is not None and self.tag not in tags:
            return False
        if self.labelled is not None and bool(labels) != self.labelled:
            return False
        # The index's own rule and fields (search_text.py): every role, tool results too.
        return not self.text or text_matches(self.text, t.get("texts") or ())
