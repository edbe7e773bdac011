"""The group view: one task's trajectories side by side, rewards, GRPO advantages, shared prefix."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import ItemGrid, VerticalScroll
from textual.widget import AwaitMount
from textual.widgets import DataTable, Footer, Header, Static

from agentworld import records
from agentworld.errors import AgentWorldError
from agentworld.literal import literal
from agentworld.pool import Trajectory
from agentworld.pool.labels import label_text
from agentworld.tui.curating import CURATION_BINDINGS, CuratingScreen
from agentworld.tui.delivery import deliver
from agentworld.tui.grouping import final_sequence, grpo_advantages, shared_prefix
from agentworld.tui.messages import TrajectoryLabelled

# The narrowest a member's card gets: as many side by side as fit, the rest on the rows
# below (a fixed row of cards ran off the right edge, its last ones unreachable).
CARD_WIDTH = 32


def member_card(t: Trajectory, reward: float | None, advantage: float | None) -> Text:
    """A narrow column for one member: status, reward, advantage and its final answer."""
    out = Text()
    out.append(literal(t.id[-10:], style="bold"))
    out.append(f"  {t.status}\n", style="green" if t.status == "done" else "red")
    out.append(f"reward {'-' if reward is None else f'{reward:.3f}'}  ")
    if advantage is not None:
        out.append(
            f"adv {advantage:+.2f}",
            style="bold green" if advantage > 0 else "bold red" if advantage < 0 else "",
        )
    out.append("\n")
    if t.steps:
        last = t.steps[-1]
        msg = (last.get("response") or {}).get("message") or {}
        out.append(f"── final answer (step {last['index']})\n", style="dim")
        out.append(literal(records.completion_text(last)[:600]))
        for call in msg.get("tool_calls") or ():
            out.append("\n→ ", style="yellow")
            out.append(
                literal(f"{call.get('name')}({call.get('arguments', '')[:120]})", style="yellow")
            )
    return out


def notes_last(labels: dict[str, Any]) -> dict[str, Any]:
    """The labels with a free-text note after the short fields, so a long note can't push
    ``trainable=`` or ``quality=`` off the table's right edge."""
    return {k: v for k, v in labels.items() if k != "note"} | (
        {"note": labels["note"]} if "note" in labels else {}
    )


class GroupScreen(CuratingScreen):
    """Members of one group with what GRPO would make of their rewards."""

    DEFAULT_CSS = """
    GroupScreen #ginfo { height: 2; padding: 0 1; background: $boost; }
    GroupScreen #members { height: auto; max-height: 12; }
    GroupScreen #side { height: 1fr; }
    GroupScreen .card { height: auto; padding: 0 1; border-right: vkey $primary-darken-2; }
    GroupScreen .card.-current { background: $boost; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back", tooltip="Back to where the group was opened"),
        Binding("enter", "inspect", "Inspect", show=False, tooltip="Open the trajectory"),
        Binding(
            "d",
            "diff",
            "Diff",
            tooltip="Diff: mark this trajectory, or diff it against the marked one",
        ),
        # The member table holds the focus (its cursor brings a member's card into
        # view); these scroll the cards wherever the focus is, for a card taller than
        # the screen.
        Binding(
            "pagedown",
            "scroll_cards('page_down')",
            "Scroll down",
            show=False,
            priority=True,
            tooltip="Scroll the cards a page down",
        ),
        Binding(
            "pageup",
            "scroll_cards('page_up')",
            "Scroll up",
            show=False,
            priority=True,
            tooltip="Scroll the cards a page up",
        ),
        *CURATION_BINDINGS,
    ]

    def __init__(self, group: str, focus: str | None = None) -> None:
        super().__init__()
        self.group = group
        self.focus_id = focus
        self.members: list[Trajectory] = []
        self.advantages: list[float | None] = []
        self.cards: list[Static] = []
        self.card_ids: list[str] = []  # whose cards ``cards`` are, in order

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(Text("loading…"), id="ginfo")
        yield DataTable(id="members", cursor_type="row", zebra_stripes=True)
        with VerticalScroll(id="side"):
            yield ItemGrid(id="cards", min_column_width=CARD_WIDTH, stretch_height=False)
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self.sub_title = "group"
        table = self.query_one("#members", DataTable)
        for c in (
            "trajectory",
            "status",
            "reward",
            "advantage",
            "steps",
            "tokens",
            "shared",
            "labels",
        ):
            table.add_column(c, key=c)
        table.focus()
        self.reload()

    def reload(self) -> None:
        self._load(self.group)

    @work(thread=True, exclusive=True, group="group")
    def _load(self, group: str) -> None:
        try:
            members = self.aw.data.group(group)
        except AgentWorldError as exc:  # a bad label file, say: keep what is shown
            self.app.call_from_thread(self.notify, str(exc), severity="error")
            return
        deliver(self, self.show, members)

    def show(self, members: list[Trajectory]) -> None:
        self.members = members
        rewards = [t.reward for t in members]
        self.advantages = grpo_advantages(rewards)
        seqs, units = (
            zip(*(final_sequence(t.steps) for t in members), strict=True) if members else ((), ())
        )
        unit = "tokens" if units and all(u == "tokens" for u in units) else "chars"
        if unit == "chars":
            seqs = tuple(s if isinstance(s, str) else " ".join(map(str, s)) for s in seqs)
        n_shared, fractions = shared_prefix(list(seqs))
        info = Text()
        info.append("group ", style="dim")
        info.append(literal(self.group, style="bold"))
        info.append(f"   {len(members)} trajectories")
        present = [r for r in rewards if r is not None]
        if present:
            info.append(f"   mean reward {sum(present) / len(present):.3f}")
        info.append(
            f"\nshared prefix: {n_shared:,} {unit}   advantage = (r - mean) / std within the group (GRPO)"
        )
        self.query_one("#ginfo", Static).update(info)
        table = self.query_one("#members", DataTable)
        # The table is rebuilt without announcing its highlights: the first row added would
        # post one for row 0, and handled late (a slow terminal) it scrolled card 0 into
        # view over a PgDn pressed meanwhile. The cards are placed below instead.
        with table.prevent(DataTable.RowHighlighted):
            focus_row = self._fill_table(table, members, fractions)
        texts = [
            member_card(t, t.reward, adv) for t, adv in zip(members, self.advantages, strict=True)
        ]
        if [t.id for t in members] == self.card_ids:  # a reload: the cards stay where they are
            for card, text in zip(self.cards, texts, strict=True):
                card.update(text)
        else:
            cards = self.query_one("#cards", ItemGrid)
            cards.remove_children()
            self.card_ids = [t.id for t in members]
            self.cards = [Static(text, classes="card") for text in texts]
            mounted = cards.mount_all(self.cards)
            self.call_next(self._show_card_once_mounted, mounted, focus_row)
        self.show_card(focus_row, scroll=False)  # new cards are placed once laid out

    def _fill_table(
        self, table: DataTable, members: list[Trajectory], fractions: list[float]
    ) -> int:
        """The member rows, the cursor on the focused member; returns its row."""
        table.clear()
        focus_row = 0
        for i, (t, adv, frac) in enumerate(zip(members, self.advantages, fractions, strict=True)):
            if t.id == self.focus_id:
                focus_row = i
            tokens = sum(
                ((s.get("response") or {}).get("usage") or {}).get("completion_tokens") or 0
                for s in t.steps
            )
            table.add_row(
                literal(t.id[-12:]),
                Text(t.status),
                Text("-" if t.reward is None else f"{t.reward:.3f}"),
                Text(
                    "-" if adv is None else f"{adv:+.3f}",
                    style="green" if (adv or 0) > 0 else "red" if (adv or 0) < 0 else "",
                ),
                Text(str(len(t.steps))),
                Text(f"{tokens:,}"),
                Text(f"{100 * frac:.0f}%"),
                literal(label_text(notes_last(t.labels))),
                key=t.id,
            )
        if members:
            table.move_cursor(row=focus_row, animate=False)
        return focus_row

    def current(self) -> Trajectory | None:
        row = self.query_one("#members", DataTable).cursor_row
        return self.members[row] if 0 <= row < len(self.members) else None

    def show_card(self, row: int, *, scroll: bool = True) -> None:
        """Mark the card of the member under the cursor and scroll it into view: the
        cursor is how a card on a row below (or past the screen's foot) is reached. The
        scroll is immediate, so that it lands in the order the keys were pressed."""
        for i, card in enumerate(self.cards):
            card.set_class(i == row, "-current")
        if scroll and 0 <= row < len(self.cards) and self.cards[row].is_mounted:
            self.cards[row].scroll_visible(animate=False, top=True, immediate=True)

    async def _show_card_once_mounted(self, mounted: AwaitMount, row: int) -> None:
        """New cards (the first show, or members that changed) have no place until they
        are mounted and laid out: bring the cursor's card into view then, unless the cards
        were scrolled meanwhile (a PgDn pressed as the group opened is not undone)."""
        side = self.query_one("#side", VerticalScroll)
        before = side.scroll_y
        await mounted
        self.call_after_refresh(self._place_cards, row, side, before)

    def _place_cards(self, row: int, side: VerticalScroll, before: float) -> None:
        self.show_card(row, scroll=side.scroll_y == before)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self.show_card(event.cursor_row)

    def action_scroll_cards(self, how: str) -> None:
        """Scroll the cards (``page_down``, ``page_up``)."""
        getattr(self.query_one("#side", VerticalScroll), f"scroll_{how}")(animate=False)

    def action_back(self) -> None:
        self.dismiss()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_inspect()

    def action_inspect(self) -> None:
        t = self.current()
        if t is not None:
            self.aw.inspect(t.id)

    def action_diff(self) -> None:
        t = self.current()
        if t is not None:
            self.aw.diff_mark(t.id)

    def label_targets(self) -> list[str]:
        t = self.current()
        return [f"trajectory:{t.id}"] if t else []

    def current_labels(self) -> dict[str, Any]:
        t = self.current()
        return t.labels if t else {}

    def labels_written(self, event: TrajectoryLabelled) -> None:
        self.notify(
            f"{'undid' if event.undone else 'labelled'}: {event.action.describe()}", timeout=2
        )
        t = self.current()
        self.focus_id = t.id if t else None
        self.reload()
