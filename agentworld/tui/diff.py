"""The diff screen: two trajectories' conversations side by side, aligned by message.

Opened from the group view or the list (``d`` marks one trajectory, ``d`` on another
opens the diff). The messages both share before they first differ are folded into one
line; every run of differing messages is a stop for ``n``/``p``; within a pair of
differing messages the words only one side has are highlighted.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, ClassVar

from rich import box
from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer, Header, Static

from agentworld.errors import AgentWorldError
from agentworld.literal import literal
from agentworld.pool import Trajectory
from agentworld.tui.delivery import deliver
from agentworld.tui.diffing import (
    LEFT_STYLE,
    RIGHT_STYLE,
    Row,
    align,
    conversation,
    difference_starts,
    highlighted_pair,
    message_body,
    role_of,
    shared_prefix_rows,
)
from agentworld.tui.grouping import grpo_advantages
from agentworld.tui.transcript import ROLE_STYLES

if TYPE_CHECKING:
    from agentworld.tui.app import AgentWorldApp

# A cell shows this much of a message: a whole file in a tool result would take seconds
# to lay out on every scroll (the inspector's `v` shows it whole).
CELL_CHARS = 6_000


@dataclass(frozen=True)
class Side:
    """One trajectory as the header shows it."""

    id: str
    status: str
    reward: float | None
    advantage: float | None
    steps: int
    messages: int
    tokens: int


@dataclass(frozen=True)
class Cell:
    """One message, rendered: its role line and its (highlighted) body."""

    role: str
    body: Text


@dataclass(frozen=True)
class Aligned:
    """A row of the alignment with both cells rendered (off the UI thread)."""

    kind: str
    left: Cell | None
    right: Cell | None

    def swapped(self) -> Aligned:
        kind = {"left": "right", "right": "left"}.get(self.kind, self.kind)
        return Aligned(kind, self.right, self.left)


@dataclass(frozen=True)
class DiffModel:
    """Everything the screen shows, computed in a worker."""

    left: Side
    right: Side
    rows: list[Aligned]
    shared: int  # rows before the first difference
    stops: list[int]  # the first row of each difference

    def swapped(self) -> DiffModel:
        rows = [r.swapped() for r in self.rows]
        return replace(self, left=self.right, right=self.left, rows=rows)


def _side(t: Trajectory, advantage: float | None, messages: int) -> Side:
    tokens = sum(
        ((s.get("response") or {}).get("usage") or {}).get("completion_tokens") or 0
        for s in t.steps
    )
    return Side(t.id, t.status, t.reward, advantage, len(t.steps), messages, tokens)


def _clip(body: Text) -> Text:
    if len(body) <= CELL_CHARS:
        return body
    out = body[:CELL_CHARS]
    out.append(f"\n… {len(body) - CELL_CHARS:,} more characters (the inspector shows all)", "dim")
    return out


def _cells(row: Row) -> Aligned:
    if row.kind == "changed" and row.left is not None and row.right is not None:
        a, b = highlighted_pair(message_body(row.left), message_body(row.right))
        return Aligned(
            row.kind, Cell(role_of(row.left), _clip(a)), Cell(role_of(row.right), _clip(b))
        )
    left = Cell(role_of(row.left), _clip(literal(message_body(row.left)))) if row.left else None
    right = Cell(role_of(row.right), _clip(literal(message_body(row.right)))) if row.right else None
    return Aligned(row.kind, left, right)


def diff_model(a: Trajectory, b: Trajectory, group: list[Trajectory] | None = None) -> DiffModel:
    """Align ``a`` and ``b``; ``group``: their group's members, for GRPO advantages."""
    advantage: dict[str, float | None] = {}
    if group:
        advs = grpo_advantages([t.reward for t in group])
        advantage = {t.id: adv for t, adv in zip(group, advs, strict=True)}
    conv_a, conv_b = conversation(a), conversation(b)
    rows = align(conv_a, conv_b)
    return DiffModel(
        left=_side(a, advantage.get(a.id), len(conv_a)),
        right=_side(b, advantage.get(b.id), len(conv_b)),
        rows=[_cells(r) for r in rows],
        shared=shared_prefix_rows(rows),
        stops=difference_starts(rows),
    )


def side_line(mark: str, side: Side, style: str) -> Text:
    """One header line: which side, the trajectory and its numbers."""
    out = Text(no_wrap=True, overflow="ellipsis")
    out.append(f" {mark} ", style=style)
    out.append(" ")
    out.append(literal(side.id, style="bold"))
    out.append(f"  {side.status}", style="green" if side.status == "done" else "red")
    out.append(f"  reward {'-' if side.reward is None else f'{side.reward:.3f}'}")
    if side.advantage is not None:
        out.append(
            f"  adv {side.advantage:+.2f}",
            style="green" if side.advantage > 0 else "red" if side.advantage < 0 else "",
        )
    out.append(f"  {side.steps} steps  {side.messages} msgs  {side.tokens:,} tok")
    return out


def pair_table(row: Aligned) -> Table:
    """One row of the alignment as a two-column table: one widget a row, where a
    container of two would triple the widgets to mount (200 messages: 1.8 s)."""
    table = Table(box=box.MINIMAL, show_header=False, show_edge=False, expand=True, padding=(0, 1))
    table.add_column(ratio=1)
    table.add_column(ratio=1)
    table.add_row(
        _cell_text(row.left, row.kind == "left"), _cell_text(row.right, row.kind == "right")
    )
    return table


def _cell_text(cell: Cell | None, only: bool) -> Text:
    if cell is None:
        return Text("")
    out = Text()
    role = cell.role.split(" ", 1)[0]
    out.append(f"── {cell.role}", style=ROLE_STYLES.get(role, "bold"))
    if only:
        out.append("  only here", style="italic yellow")
    out.append("\n")
    out.append_text(cell.body)
    return out


class DiffScreen(Screen[None]):
    """Two trajectories, aligned: ``n``/``p`` step through the differences, ``s`` swaps."""

    DEFAULT_CSS = """
    DiffScreen #dinfo { height: 3; padding: 0 1; background: $boost; }
    DiffScreen #rows { height: 1fr; }
    DiffScreen .pair { height: auto; }
    DiffScreen .differs { background: $boost; }
    DiffScreen .current { border-left: thick $warning; }
    DiffScreen .fold, DiffScreen .divider { height: 1; padding: 0 1; color: $text-muted; }
    DiffScreen .divider { color: $warning; text-style: bold; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back", tooltip="Back to where the diff was opened"),
        Binding("n", "step(1)", "Next diff", tooltip="Go to the next difference"),
        Binding("p", "step(-1)", "Prev diff", tooltip="Go to the previous difference"),
        Binding("s", "swap", "Swap", tooltip="Swap the two sides"),
        Binding("f", "fold", "Fold", tooltip="Show or fold the shared prefix"),
    ]

    def __init__(self, left_id: str, right_id: str) -> None:
        super().__init__()
        self.left_id = left_id
        self.right_id = right_id
        self.model: DiffModel | None = None
        self.at = 0  # which difference is current (an index into model.stops)
        self.folded = True
        self._row_widgets: dict[int, Widget] = {}

    @property
    def aw(self) -> AgentWorldApp:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(Text("loading…"), id="dinfo")
        yield VerticalScroll(id="rows")
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self.sub_title = "diff"
        self.query_one("#rows", VerticalScroll).focus()
        self._load(self.left_id, self.right_id)

    @work(thread=True, exclusive=True, group="diff")
    def _load(self, left_id: str, right_id: str) -> None:
        data = self.aw.data
        try:
            a, b = data.trajectory(left_id), data.trajectory(right_id)
            group = a.first("group")
            members = data.group(group) if group is not None and group == b.first("group") else None
        except (AgentWorldError, KeyError) as exc:  # gone, or a bad label file
            self.app.call_from_thread(self.notify, f"diff: {exc}", severity="error")
            return
        deliver(self, self.show, diff_model(a, b, members))

    # -- showing ------------------------------------------------------------------------

    def show(self, model: DiffModel) -> None:
        """Show ``model`` (rows are mounted before the view scrolls to a difference)."""
        self.call_later(self._show, model)

    async def _show(self, model: DiffModel) -> None:
        self.model = model
        self.at = min(self.at, max(0, len(model.stops) - 1))
        self._info()
        await self._rows()
        self._go(self.at)

    def _info(self) -> None:
        m = self.model
        assert m is not None
        out = Text(no_wrap=True, overflow="ellipsis")
        out.append_text(side_line("A", m.left, LEFT_STYLE))
        out.append("\n")
        out.append_text(side_line("B", m.right, RIGHT_STYLE))
        out.append("\n")
        if not m.stops:
            out.append(f"the same {len(m.rows)} messages", style="bold")
        else:
            out.append(f"shared prefix {m.shared} msgs  ", style="dim")
            out.append(f"difference {self.at + 1} of {len(m.stops)}", style="bold")
            out.append("  (n/p: next/prev, s: swap)", style="dim")
        self.query_one("#dinfo", Static).update(out)

    async def _rows(self) -> None:
        m = self.model
        assert m is not None
        scroll = self.query_one("#rows", VerticalScroll)
        await scroll.remove_children()
        self._row_widgets = {}
        widgets: list[Widget] = []
        start = m.shared if self.folded else 0
        if self.folded and m.shared:
            widgets.append(
                Static(f"… {m.shared} shared messages folded (f shows them)", classes="fold")
            )
        for i in range(start, len(m.rows)):
            row = m.rows[i]
            if i == m.shared and m.stops:
                widgets.append(Static(f"▼ first difference: message {i + 1}", classes="divider"))
            pair = Static(
                pair_table(row), classes="pair" + ("" if row.kind == "same" else " differs")
            )
            self._row_widgets[i] = pair
            widgets.append(pair)
        if not m.rows:
            widgets.append(Static("neither trajectory has a message", classes="fold"))
        await scroll.mount_all(widgets)

    def _go(self, at: int) -> None:
        m = self.model
        if m is None or not m.stops:
            return
        previous = self._row_widgets.get(m.stops[self.at])
        if previous is not None:
            previous.remove_class("current")
        self.at = at
        widget = self._row_widgets.get(m.stops[at])
        self._info()
        if widget is not None:
            widget.add_class("current")
            self.call_after_refresh(
                self.query_one("#rows", VerticalScroll).scroll_to_widget,
                widget,
                animate=False,
                top=True,
            )

    # -- actions ------------------------------------------------------------------------

    def action_step(self, delta: int) -> None:
        m = self.model
        if m is None or not m.stops:
            self.notify("no differences", timeout=2)
            return
        at = self.at + delta
        if not 0 <= at < len(m.stops):
            self.notify("no more differences " + ("below" if delta > 0 else "above"), timeout=2)
            return
        self._go(at)

    async def action_swap(self) -> None:
        if self.model is not None:
            self.left_id, self.right_id = self.right_id, self.left_id
            await self._show(self.model.swapped())

    async def action_fold(self) -> None:
        if self.model is not None:
            self.folded = not self.folded
            await self._rows()
            self._go(self.at)

    def action_back(self) -> None:
        self.dismiss()
