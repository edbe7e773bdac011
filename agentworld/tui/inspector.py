"""The inspector: one trajectory as a transcript, per-step metadata and the token view.

With ``review=True`` it is the review queue: it walks unlabelled trajectories
of the current filter, and each label key labels and moves to the next.
"""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import DataTable, Footer, Header, Static

from agentworld.errors import AgentWorldError
from agentworld.literal import literal
from agentworld.pool import Selection, Trajectory
from agentworld.pool.labels import label_text
from agentworld.tui.curating import CURATION_BINDINGS, CuratingScreen
from agentworld.tui.delivery import deliver
from agentworld.tui.fulltext import FullTextScreen
from agentworld.tui.messages import TrajectoryLabelled
from agentworld.tui.tokens import token_view
from agentworld.tui.transcript import (
    Clip,
    new_from,
    step_metadata,
    step_summary,
    step_transcript,
)

EARLIER_NOTE = " (the step before sent them too; h: show)"
CLIP = Clip(note=" · v: the whole text")


def info_text(t: Trajectory, review: bool) -> Text:
    """One line: the trajectory, where it came from, its status and reward."""
    first = t.steps[0] if t.steps else t.end or {}
    out = Text(no_wrap=True, overflow="ellipsis")
    if review:
        out.append(" REVIEW ", style="bold reverse magenta")
        out.append(" ")
    out.append(literal(t.id, style="bold"))
    out.append("  ")
    out.append(
        f"{t.status}",
        style="green" if t.status == "done" else "red" if t.status != "open" else "cyan",
    )
    out.append(f"  reward {'-' if t.reward is None else f'{t.reward:.3f}'}  ")
    for key in ("agent", "dataset", "task", "group"):
        if first.get(key) is not None:
            out.append(f"{key} ", style="dim")
            out.append(literal(first[key]))
            out.append("  ")
    return out


def label_line(
    target: str, labels: dict[str, Any], inherited: dict[str, Any] | None = None
) -> Text:
    """What a label key labels now and the labels it has (a step: and those it takes from
    its trajectory, apart): a line of its own, so no header however long pushes it off a
    narrow terminal."""
    out = Text(no_wrap=True, overflow="ellipsis")
    out.append(" labelling ", style="dim")
    out.append(f" {target} ", style="bold reverse")
    out.append(" (. switches)  ", style="dim")
    out.append("labels ", style="dim")
    if labels:
        out.append(literal(label_text(labels), style="bold"))
    else:
        out.append("none")
    if inherited:
        out.append("  from the trajectory ", style="dim")
        out.append(literal(label_text(inherited)))
    return out


def _step_ids(t: Trajectory) -> list[Any]:
    """Which steps ``t`` holds: when they are the same, the step list stands as it is."""
    return [s.get("id") for s in t.steps]


class InspectorScreen(CuratingScreen):
    """Transcript, metadata and tokens of one trajectory, step by step."""

    DEFAULT_CSS = """
    InspectorScreen #info { height: 1; padding: 0 1; background: $boost; }
    InspectorScreen #labelbar { height: 1; background: $boost; }
    InspectorScreen .line { text-wrap: nowrap; text-overflow: ellipsis; }
    InspectorScreen #steps { width: 28; height: 1fr; }
    InspectorScreen #detail { width: 1fr; height: 1fr; padding: 0 1; }
    InspectorScreen #meta { height: auto; margin-bottom: 1; color: $text-muted; }
    InspectorScreen #body { height: auto; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back", tooltip="Back to where the inspector was opened"),
        Binding("t", "toggle_tokens", "Tokens", tooltip="Tokens of the step / its conversation"),
        # At 80 columns the footer has room for Back and Tokens beside the label keys and
        # `? Help`; `.` is named on the label line ("(. switches)"), and the keys the
        # footer leaves out are all in the `?` help.
        Binding(
            "full_stop",
            "toggle_target",
            "Step/traj",
            key_display=".",
            show=False,
            tooltip="Label keys label the step / the trajectory",
        ),
        Binding(
            "i",
            "toggle_details",
            "Details",
            show=False,
            tooltip="The step's metadata in full / folded",
        ),
        Binding(
            "h",
            "toggle_history",
            "History",
            show=False,
            tooltip="All the step sent / only what it added",
        ),
        Binding(
            "v",
            "full_text",
            "Whole text",
            show=False,
            tooltip="The step's texts unclipped, in a view that scrolls",
        ),
        Binding("j", "step(1)", "Next step", show=False, tooltip="Next step (also ↓)"),
        Binding("k", "step(-1)", "Prev step", show=False, tooltip="Previous step (also ↑)"),
        # The step table holds the focus (arrows pick a step); these scroll the
        # conversation beside it wherever the focus is, so no Tab is needed.
        Binding(
            "pagedown",
            "scroll_body('page_down')",
            "Scroll down",
            show=False,
            priority=True,
            tooltip="Scroll the conversation a page down",
        ),
        Binding(
            "pageup",
            "scroll_body('page_up')",
            "Scroll up",
            show=False,
            priority=True,
            tooltip="Scroll the conversation a page up",
        ),
        Binding(
            "J",
            "scroll_body('down')",
            "Line down",
            show=False,
            tooltip="Scroll the conversation a line down",
        ),
        Binding(
            "K",
            "scroll_body('up')",
            "Line up",
            show=False,
            tooltip="Scroll the conversation a line up",
        ),
        Binding(
            "home",
            "scroll_body('home')",
            "Top",
            show=False,
            priority=True,
            tooltip="Top of the conversation",
        ),
        Binding(
            "end",
            "scroll_body('end')",
            "End",
            show=False,
            priority=True,
            tooltip="End of the conversation",
        ),
        Binding("g", "group", "Group", show=False, tooltip="The trajectory's group, side by side"),
        Binding(
            "f",
            "forked_from",
            "Forked from",
            show=False,
            tooltip="Open the trajectory this one branched off",
        ),
        Binding(
            "space",
            "skip",
            "Skip (review)",
            show=False,
            tooltip="Review queue: skip this one, unlabelled",
        ),
        *CURATION_BINDINGS,
    ]

    def __init__(
        self,
        trajectory_id: str | None,
        *,
        review: bool = False,
        selection: Selection | None = None,
        step: int | None = None,
        highlight: str | None = None,
    ) -> None:
        super().__init__()
        self.highlight = highlight or None  # searched-for words, marked in the transcript
        self.trajectory_id = trajectory_id
        self.review = review
        self.selection = selection or Selection()
        self.trajectory: Trajectory | None = None
        self.step_i = 0
        self.start_step = step  # the step index to show first (else the first step)
        self.show_tokens = False
        # A step shows what it added to the conversation; ``h``, everything it sent (a long
        # session's history is hundreds of kilobytes of text: slow to lay out on every step).
        self.full_history = False
        self.target_step = False
        self.details = False  # the step's metadata in full (else one summary line)
        self.skipped: list[str] = []
        self.body_shown: tuple[Any, ...] | None = None  # what #body shows (see body_key)

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(Text("loading…"), id="info", classes="line")
        yield Static(Text(""), id="labelbar", classes="line")
        with Horizontal():
            yield DataTable(id="steps", cursor_type="row")
            with VerticalScroll(id="detail"):
                yield Static(Text(""), id="meta")
                yield Static(Text(""), id="body")
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self.sub_title = "review queue" if self.review else "inspector"
        table = self.query_one("#steps", DataTable)
        for c in ("#", "status", "finish", "tok", "pv"):
            table.add_column(c, key=c)
        table.focus()
        if self.trajectory_id is None and self.review:
            self._next_unreviewed()
        else:
            self.load(self.trajectory_id)

    # -- data ---------------------------------------------------------------------------------

    def load(self, trajectory_id: str | None) -> None:
        if trajectory_id is None:
            return
        self.trajectory_id = trajectory_id
        self._load(trajectory_id)

    @work(thread=True, exclusive=True, group="trajectory")
    def _load(self, trajectory_id: str) -> None:
        try:
            t = self.aw.data.trajectory(trajectory_id)
        except AgentWorldError as exc:
            self.app.call_from_thread(self.notify, str(exc), severity="error")
            return
        deliver(self, self.show, t)

    # A description, or Textual names the worker by repr() of its argument: megabytes.
    @work(thread=True, exclusive=True, group="trajectory", description="relabel")
    def _relabel(self, t: Trajectory) -> None:
        deliver(self, self.show, self.aw.data.relabelled(t))

    @work(thread=True, exclusive=True, group="trajectory")
    def _next_unreviewed(self) -> None:
        tid = self.aw.data.next_unreviewed(self.selection, self.skipped)
        if tid is None:
            deliver(self, self._queue_empty)
            return
        try:
            t = self.aw.data.trajectory(tid)
        except AgentWorldError as exc:
            self.app.call_from_thread(self.notify, str(exc), severity="error")
            return
        deliver(self, self.show, t)

    def _queue_empty(self) -> None:
        self.trajectory = None
        self.query_one("#info", Static).update(
            Text(" REVIEW  queue empty: every matching trajectory has a label", style="bold")
        )
        self.query_one("#labelbar", Static).update(Text(""))
        self.query_one("#meta", Static).update(Text(""))
        self.show_body(None, Text(""))
        self.query_one("#steps", DataTable).clear()

    def show(self, t: Trajectory) -> None:
        """Display a trajectory (UI thread); keeps the step cursor when it is the same one."""
        before = self.trajectory
        same = before is not None and before.id == t.id
        self.trajectory = t
        self.trajectory_id = t.id
        if not same:
            self.step_i = 0
            if self.start_step is not None:
                at = [i for i, s in enumerate(t.steps) if s.get("index") == self.start_step]
                self.step_i = at[0] if at else 0
                self.start_step = None
        if before is None or _step_ids(before) != _step_ids(t):  # not for a label's reload
            self.fill_steps(t)
        self.render_step()

    def fill_steps(self, t: Trajectory) -> None:
        """One row a step, the cursor on the current one."""
        table = self.query_one("#steps", DataTable)
        table.clear()
        for s in t.steps:
            usage = (s.get("response") or {}).get("usage") or {}
            finish = (s.get("response") or {}).get("finish_reason") or "-"
            idx = s["index"] if s.get("choice") is None else f"{s['index']}.{s['choice']}"
            table.add_row(
                Text(str(idx)),
                Text(s["status"], style="red" if s["status"] != "ok" else ""),
                literal(finish[:8]),
                Text(
                    str(
                        usage.get("completion_tokens")
                        or len((s.get("tokens") or {}).get("completion_ids") or ())
                    )
                ),
                Text(str(s.get("policy_version"))),
            )
        if t.steps:
            self.step_i = min(self.step_i, len(t.steps) - 1)
            table.move_cursor(row=self.step_i, animate=False)

    def render_step(self) -> None:
        """Show the current step: the info line and metadata each time (labels change
        them), the body only when what it shows changed (it is the part slow to lay out)."""
        t = self.trajectory
        if t is None:
            return
        self.query_one("#info", Static).update(info_text(t, self.review))
        self.query_one("#labelbar", Static).update(
            label_line(self.target_name(), *self.label_parts())
        )
        if not t.steps:
            self.query_one("#meta", Static).update(Text("no steps"))
            self.show_body(None, Text(""))
            return
        step = t.steps[self.step_i]
        prev = t.steps[self.step_i - 1] if self.step_i > 0 else None
        meta = self.query_one("#meta", Static)
        meta.set_class(not self.details, "line")
        meta.update(step_metadata(step) if self.details else step_summary(step, "▸ "))
        if self.show_tokens:  # a step whose ids nothing decodes yet: get what does
            self.aw.want_decoder(step)
        key = self.body_key(step, prev)
        if key != self.body_shown:
            self.show_body(key, self.body(step, prev))

    def body_key(self, step: dict[str, Any], prev: dict[str, Any] | None) -> tuple[Any, ...]:
        """What the body shows, by identity: steps never change once written, so a reload
        after a label (a new Trajectory, the same steps) keeps it."""
        ids = (self.step_i, step.get("id"), prev.get("id") if prev else None)
        if self.show_tokens:
            return ("tokens", *ids, self.aw.decoder(step) is not None)
        return ("transcript", *ids, self.full_history)

    def body(self, step: dict[str, Any], prev: dict[str, Any] | None) -> Text:
        """The step's tokens, or its transcript with long texts clipped."""
        if self.show_tokens:
            return token_view(step, prev, decode=self.aw.decoder(step))
        text = self.transcript(step, prev, CLIP)
        if self.highlight:
            text.highlight_words([self.highlight], "bold black on yellow", case_sensitive=False)
        return text

    def transcript(
        self, step: dict[str, Any], prev: dict[str, Any] | None, clip: Clip | None
    ) -> Text:
        """What the step added to the conversation (all it sent, with ``h``) and its answer."""
        start = 0 if self.full_history else new_from(step, prev)
        return step_transcript(step, only_new_from=start, earlier_note=EARLIER_NOTE, clip=clip)

    def show_body(self, key: tuple[Any, ...] | None, body: Text) -> None:
        self.body_shown = key
        self.query_one("#body", Static).update(body)

    def target_name(self) -> str:
        t = self.trajectory
        if self.target_step and t is not None and t.steps:
            return f"step {t.steps[self.step_i]['index']}"
        return "trajectory"

    # -- actions -----------------------------------------------------------------------------

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        t = self.trajectory
        if (
            t is not None
            and 0 <= event.cursor_row < len(t.steps)
            and event.cursor_row != self.step_i
            # Refilling the table puts the cursor on row 0, then back: not a move to follow.
            and event.cursor_row == event.data_table.cursor_row
        ):
            self.step_i = event.cursor_row
            self.render_step()

    def action_step(self, delta: int) -> None:
        if self.trajectory is None or not self.trajectory.steps:
            return
        step_i = max(0, min(len(self.trajectory.steps) - 1, self.step_i + delta))
        if step_i == self.step_i:
            return  # at an end already
        self.step_i = step_i
        self.query_one("#steps", DataTable).move_cursor(row=self.step_i, animate=False)
        self.render_step()

    def action_toggle_tokens(self) -> None:
        self.show_tokens = not self.show_tokens
        self.render_step()

    def action_toggle_details(self) -> None:
        self.details = not self.details
        self.render_step()

    def action_scroll_body(self, how: str) -> None:
        """Scroll the step's conversation (``page_down``, ``up``, ``home``…)."""
        getattr(self.query_one("#detail", VerticalScroll), f"scroll_{how}")(animate=False)

    def action_toggle_history(self) -> None:
        self.full_history = not self.full_history
        if not self.show_tokens:
            self.render_step()

    def action_full_text(self) -> None:
        """The step's transcript (as ``h`` has it) unclipped, in a view that scrolls it."""
        t = self.trajectory
        if t is None or not t.steps:
            return
        step = t.steps[self.step_i]
        prev = t.steps[self.step_i - 1] if self.step_i > 0 else None
        text = self.transcript(step, prev, None).plain
        self.app.push_screen(FullTextScreen(f"{t.id} · step {step.get('index')}", text))

    def action_toggle_target(self) -> None:
        self.target_step = not self.target_step
        self.render_step()

    def action_back(self) -> None:
        self.dismiss()

    def action_group(self) -> None:
        t = self.trajectory
        group = t.first("group") if t else None
        if t and group:
            self.aw.show_group(group, t.id)

    def action_forked_from(self) -> None:
        """Open the trajectory this one branched off, at the step it branched from."""
        t = self.trajectory
        links = [
            s["metadata"].get("forked_from") for s in (t.steps if t else ()) if s.get("metadata")
        ]
        link = next((x for x in links if isinstance(x, dict)), None)
        if link is None or not isinstance(link.get("trajectory"), str):
            self.notify("this trajectory did not branch off another", timeout=2)
            return
        step = link.get("step")
        self.aw.inspect(link["trajectory"], step if isinstance(step, int) else None)

    def action_skip(self) -> None:
        if self.review and self.trajectory is not None:
            self.skipped.append(self.trajectory.id)
            self._next_unreviewed()

    # -- curation -------------------------------------------------------------------------

    def label_targets(self) -> list[str]:
        t = self.trajectory
        if t is None:
            return []
        if self.target_step and t.steps:
            return [f"step:{t.steps[self.step_i]['id']}"]
        return [f"trajectory:{t.id}"]

    def current_labels(self) -> dict[str, Any]:
        t = self.trajectory
        if t is None:
            return {}
        if self.target_step and t.steps:
            return t.steps[self.step_i].get("_labels") or {}
        return t.labels

    def label_parts(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The labels of what a key labels now, and, a step's, those it takes from its
        trajectory (a step's labels are its trajectory's with its own on top)."""
        labels = self.current_labels()
        t = self.trajectory
        if t is None or not (self.target_step and t.steps):
            return labels, {}
        inherited = {k: v for k, v in labels.items() if k in t.labels and t.labels[k] == v}
        return {k: v for k, v in labels.items() if k not in inherited}, inherited

    def labels_written(self, event: TrajectoryLabelled) -> None:
        verb = "undid" if event.undone else "labelled"
        self.notify(f"{verb}: {event.action.describe()}", timeout=2)
        kind, _, ident = event.action.targets[0].partition(":")
        if self.review and not event.undone:
            self._next_unreviewed()
        elif self.review and kind == "trajectory":
            self.load(ident)  # back to what was just un-labelled, to label it again
        elif self.trajectory is not None and self.trajectory.id == self.trajectory_id:
            self._relabel(self.trajectory)
        elif self.trajectory_id:
            self.load(self.trajectory_id)
