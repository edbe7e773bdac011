"""Base screen with the curation keys shared by the list, inspector, group view and review."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from textual import work
from textual.binding import Binding
from textual.screen import Screen

from agentworld.errors import AgentWorldError
from agentworld.pool import Selection
from agentworld.tui.data import LabelNotShown
from agentworld.tui.delivery import taken_down
from agentworld.tui.dialog import PromptDialog
from agentworld.tui.messages import TrajectoryLabelled

if TYPE_CHECKING:
    from agentworld.tui.app import AgentWorldApp

CURATION_BINDINGS = [
    Binding("y", "label_trainable(True)", "Train", tooltip="Label trainable"),
    Binding("x", "label_trainable(False)", "No train", tooltip="Label not trainable"),
    Binding("1", "label_quality('good')", "Good", tooltip="Label quality good"),
    Binding("2", "label_quality('bad')", "Bad", tooltip="Label quality bad"),
    Binding("3", "label_quality('unsure')", "Unsure", tooltip="Label quality unsure"),
    Binding(
        "number_sign", "edit_tags", "Tags", key_display="#", show=False, tooltip="Edit the tags"
    ),
    Binding("n", "edit_note", "Note", show=False, tooltip="Write a note"),
    Binding("o", "edit_reward", "Reward override", show=False, tooltip="Override the reward"),
    Binding("u", "undo", "Undo", tooltip="Undo the last label"),
]


class CuratingScreen(Screen[None]):
    """Subclasses say what a label applies to (``label_targets``) and how to show it.

    Each subclass lists ``CURATION_BINDINGS`` after its own keys, so the footer
    shows the screen's own keys first.
    """

    @property
    def aw(self) -> AgentWorldApp:
        return self.app  # type: ignore[return-value]

    def label_targets(self) -> list[str] | Selection:
        """Targets the next label applies to (``trajectory:<id>`` / ``step:<id>``).

        A Selection means every trajectory it matches (resolved in the worker).
        """
        return []

    def current_labels(self) -> dict[str, Any]:
        """Label values of the (first) target, to prefill dialogs."""
        return {}

    def labels_written(self, event: TrajectoryLabelled) -> None:
        """Called on the UI thread once a label (or an undo) is in the index."""

    # -- actions --------------------------------------------------------------------

    def action_label_trainable(self, value: bool) -> None:
        self._label({"trainable": value})

    def action_label_quality(self, value: str) -> None:
        self._label({"quality": value})

    def action_edit_tags(self) -> None:
        tags = ", ".join(self.current_labels().get("tags") or [])
        self.app.push_screen(
            PromptDialog("Tags (comma separated; empty clears)", tags),
            lambda v: (
                None
                if v is None
                else self._label({"tags": [t.strip() for t in v.split(",") if t.strip()] or None})
            ),
        )

    def action_edit_note(self) -> None:
        self.app.push_screen(
            PromptDialog("Note (empty clears)", self.current_labels().get("note") or ""),
            lambda v: None if v is None else self._label({"note": v or None}),
        )

    def action_edit_reward(self) -> None:
        current = self.current_labels().get("reward")
        self.app.push_screen(
            PromptDialog(
                "Reward override (a number; empty clears)", "" if current is None else str(current)
            ),
            self._reward_entered,
        )

    def _reward_entered(self, value: str | None) -> None:
        if value is None:
            return
        if not value.strip():
            self._label({"reward": None})
            return
        try:
            reward = float(value)
        except ValueError:
            reward = math.nan
        if not math.isfinite(reward):  # float() takes "nan" and "inf"; a label does not
            self.notify(f"a reward is a finite number, not {value.strip()!r}", severity="error")
            return
        self._label({"reward": reward})

    def action_undo(self) -> None:
        self._undo()

    # -- workers ------------------------------------------------------------------------

    def _label(self, fields: dict[str, Any]) -> None:
        targets = self.label_targets()
        if not targets:
            self.notify("nothing to label here", severity="warning")
            return
        self._write(targets, fields)

    @work(thread=True, group="labels")
    def _write(self, targets: list[str] | Selection, fields: dict[str, Any]) -> None:
        if isinstance(targets, Selection):
            targets = [f"trajectory:{t}" for t in self.aw.data.trajectory_ids(targets)]
            if not targets:
                self.app.call_from_thread(self.notify, "no trajectory matches", severity="warning")
                return
        try:
            action = self.aw.data.label(targets, fields)
        except LabelNotShown as exc:
            self.app.call_from_thread(self._not_shown, exc, "labelled")
            return
        except AgentWorldError as exc:
            self.app.call_from_thread(self.notify, str(exc), severity="error")
            return
        self.app.call_from_thread(self._written, TrajectoryLabelled(action, self))

    @work(thread=True, group="labels")
    def _undo(self) -> None:
        try:
            action = self.aw.data.undo()
        except LabelNotShown as exc:
            self.app.call_from_thread(self._not_shown, exc, "undid")
            return
        except AgentWorldError as exc:
            self.app.call_from_thread(self.notify, str(exc), severity="error")
            return
        if action is None:
            self.app.call_from_thread(self.notify, "nothing to undo", severity="warning")
            return
        self.app.call_from_thread(self._written, TrajectoryLabelled(action, self, undone=True))

    def _not_shown(self, exc: LabelNotShown, verb: str) -> None:
        """Written, but the screens cannot show it yet: labelling again would only repeat it."""
        self.notify(
            f"{verb}: {exc.action.describe()} (saved; shown once the pool refreshes: {exc.why})",
            severity="warning",
            timeout=8,
        )

    def _written(self, event: TrajectoryLabelled) -> None:
        if taken_down(self):  # popped while the label was being written: the app tells the
            self.app.post_message(event)  # screens left, the one on top included
            return
        self.post_message(event)
        self.labels_written(event)
