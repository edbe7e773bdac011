"""The trajectory list: filter line, sortable paged table, and labels on one or all matching."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable, Footer, Header, Input, Static

from agentworld.errors import ConfigError
from agentworld.literal import literal, one_line
from agentworld.pool import Selection
from agentworld.pool.index_queries import TRAJECTORY_SORTS
from agentworld.pool.layout import FILTERS_FILE
from agentworld.tui.curating import CURATION_BINDINGS, CuratingScreen
from agentworld.tui.data import Page
from agentworld.tui.delivery import deliver
from agentworld.tui.dialog import PromptDialog
from agentworld.tui.filters import FILTER_PLACEHOLDER, parse_filter
from agentworld.tui.messages import PoolRefreshed, TrajectoryLabelled
from agentworld.tui.suggest import FilterSuggester

PAGE_SIZE = 100
HOLD_STILL_S = 1.5
SORTS = tuple(TRAJECTORY_SORTS)
# Fixed widths: DataTable then never measures every cell of a page to size columns,
# which made each live reload of a 100-row page cost most of a second.
COLUMNS = {
    "id": 10,
    "status": 7,
    "reward": 6,
    "labels": 5,
    "agent": 8,
    "dataset": 8,
    "group": 8,
    "steps": 5,
    "tokens": 6,
    "pv": 3,
    "last": 11,
    "preview": 60,
}
STATUS_STYLES = {
    "open": "cyan",
    "done": "green",
    "failed": "red",
    "timeout": "red",
    "cancelled": "yellow",
}


def label_badges(row: dict[str, Any]) -> Text:
    out = Text()
    if row.get("label_trainable") is False:
        out.append("✗", style="bold red")
    elif row.get("label_trainable") is True:
        out.append("✓", style="bold green")
    q = row.get("label_quality")
    if q:
        out.append(q[0].upper(), style={"good": "green", "bad": "red"}.get(q, "yellow"))
    if row.get("label_tags"):
        out.append("#", style="magenta")
    if row.get("label_note"):
        out.append("✎")
    if row.get("label_reward") is not None:
        out.append("R", style="bold cyan")
    if not out and row.get("labelled"):
        out.append("·")
    return out


def row_cells(r: dict[str, Any]) -> tuple[Text, ...]:
    reward = r.get("effective_reward")
    when = (
        datetime.fromtimestamp(r["last_at"], UTC).strftime("%m-%d %H:%M")
        if r.get("last_at")
        else "-"
    )
    versions = r.get("policy_min")
    if r.get("policy_max") != versions:
        versions = f"{r.get('policy_min')}-{r.get('policy_max')}"
    cells = {
        "id": literal(r["id"][-10:]),
        "status": Text(r.get("status") or "-", style=STATUS_STYLES.get(r.get("status") or "", "")),
        "reward": Text(
            "-" if reward is None else f"{reward:.2f}",
            style="bold cyan" if r.get("label_reward") is not None else "",
        ),
        "labels": label_badges(r),
        "agent": one_line(r.get("agent") or "-", 8),
        "dataset": one_line(r.get("dataset") or "-", 8),
        "group": one_line((r.get("group") or "-")[-8:], 8),
        "steps": Text(str(r.get("n_steps") or 0)),
        "tokens": Text(f"{r.get('completion_tokens') or 0:,}"),
        "pv": Text(str(versions)),
        "last": Text(when),
        "preview": one_line(r.get("preview"), 60),
    }
    return tuple(cells[c] for c in COLUMNS)


class TrajectoriesScreen(CuratingScreen):
    """A fast paged list over the index; the filter line narrows it, labels apply to the cursor."""

    DEFAULT_CSS = """
    TrajectoriesScreen #filter { height: 3; }
    TrajectoriesScreen #status { height: 1; padding: 0 1; background: $boost; }
    TrajectoriesScreen #list { height: 1fr; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("slash", "focus_filter", "Filter", key_display="/", tooltip="Edit the filter line"),
        Binding(
            "escape", "focus_list", "Back to list", show=False, tooltip="Leave the filter line"
        ),
        Binding("enter", "inspect", "Inspect", show=False, tooltip="Open the trajectory"),
        Binding("g", "group", "Group", tooltip="The trajectory's group, side by side"),
        # At 80 columns the footer has room for Filter, Group and Sort beside the label
        # keys and `? Help`; the keys it leaves out are all in the `?` help.
        Binding(
            "d",
            "diff",
            "Diff",
            show=False,
            tooltip="Diff: mark this trajectory, or diff it against the marked one",
        ),
        Binding("s", "sort", "Sort", tooltip="Sort by the next column"),
        Binding("S", "reverse", "Reverse", show=False, tooltip="Reverse the order"),
        Binding("right_square_bracket", "next_page", "Next page", key_display="]", show=False),
        Binding("left_square_bracket", "prev_page", "Prev page", key_display="[", show=False),
        Binding(
            "a",
            "arm_all",
            "All matching",
            show=False,
            tooltip="The next label applies to every match",
        ),
        Binding("w", "save_filter", "Save filter", show=False, tooltip="Save the filter by name"),
        Binding("f", "recall_filter", "Filters", show=False, tooltip="Recall a saved filter"),
        *CURATION_BINDINGS,
    ]

    def __init__(self) -> None:
        super().__init__()
        self.selection = Selection()
        self.sort_key = "time"
        self.descending = True
        self.page_offset = 0
        self.page: Page | None = None
        self.all_armed = False
        self._shown: list[dict[str, Any]] = []
        self._to_top = False  # a new sort, filter or page starts at its first row
        self._asked = 0  # pages asked for: only the newest one asked is shown
        self._stale = False  # new records arrived while the user was pressing keys
        self.suggester = FilterSuggester()
        self.pending_filter: str | None = None
        self.applied_filter = ""  # the filter line the list shows (a bad one is not applied)

    def compose(self) -> ComposeResult:
        yield Header()
        yield Input(placeholder=FILTER_PLACEHOLDER, id="filter", suggester=self.suggester)
        yield Static(Text("loading…"), id="status")
        yield DataTable(id="list", cursor_type="row", zebra_stripes=True)
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self.sub_title = "trajectories"
        table = self.query_one("#list", DataTable)
        for c, width in COLUMNS.items():
            table.add_column(c, key=c, width=width)
        table.focus()
        self.set_interval(HOLD_STILL_S / 2, self._reload_if_stale)
        if self.pending_filter is not None:
            self.apply_filter(self.pending_filter)
        else:
            self.reload()
        self._load_suggestions()

    @work(thread=True, exclusive=True, group="suggestions")
    def _load_suggestions(self) -> None:
        values = {c: self.aw.data.distinct(c) for c in ("agent", "dataset", "group")}
        self.suggester.set_values(values)

    # -- data -----------------------------------------------------------------------------

    def reload(self, *, to_top: bool = False) -> None:
        self._to_top = self._to_top or to_top
        self._asked += 1
        self._load(self._asked, self.selection, self.sort_key, self.descending, self.page_offset)

    @work(thread=True, exclusive=True, group="page")
    def _load(self, asked: int, sel: Selection, sort: str, descending: bool, offset: int) -> None:
        page = self.aw.data.page(
            sel, sort=sort, descending=descending, limit=PAGE_SIZE, offset=offset
        )
        deliver(self, self.show, page, asked)

    def show(self, page: Page, asked: int | None = None) -> None:
        """Display one page, keeping the cursor on the same trajectory where possible."""
        if asked is not None and asked != self._asked:
            # An exclusive worker's thread is not stopped: a page asked for before a new
            # sort, filter or refresh can arrive after the newer one, and must not win.
            return
        if page.selection != self.selection:
            return  # a newer filter is on its way
        self.page = page
        self.page_offset = page.offset
        self._status()
        if page.rows == self._shown and not self._to_top:
            return
        table = self.query_one("#list", DataTable)
        current = self.current_id()
        cursor = table.cursor_row
        table.clear()
        for r in page.rows:
            table.add_row(*row_cells(r), key=r["id"])
        self._shown = page.rows
        ids = [r["id"] for r in page.rows]
        if self._to_top:
            self._to_top = False
            table.move_cursor(row=0, animate=False)
        elif current in ids:
            table.move_cursor(row=ids.index(current), animate=False)
        elif page.rows:
            table.move_cursor(row=min(cursor, len(ids) - 1), animate=False)

    def _status(self, error: str | None = None) -> None:
        out = Text()
        if error:
            out.append(error, style="bold red")
        elif self.page is not None:
            p = self.page
            first = p.offset + 1 if p.rows else 0
            out.append(f"{first:,}-{p.offset + len(p.rows):,} of {p.total:,}", style="bold")
            out.append(f"  sort {self.sort_key} {'↓' if self.descending else '↑'}")
        if self.aw.marked:
            out.append(f"  marked {self.aw.marked[-10:]}: d on another diffs", style="bold")
        if self.all_armed and self.page is not None:
            out.append(
                f"  next label applies to ALL {self.page.total:,} matching",
                style="bold reverse red",
            )
        self.query_one("#status", Static).update(out)

    def current_id(self) -> str | None:
        table = self.query_one("#list", DataTable)
        if not self._shown or table.cursor_row < 0 or table.cursor_row >= len(self._shown):
            return None
        return self._shown[table.cursor_row]["id"]

    def on_screen_resume(self) -> None:
        self._status()  # a mark may have been used (a diff opened) or set in the group view

    def on_pool_refreshed(self, event: PoolRefreshed) -> None:
        # New agents, datasets or groups may have arrived (or the index was still being
        # built when the screen mounted): completions follow the pool.
        self._load_suggestions()
        # Rebuilding a page costs a few hundred ms of UI time on a busy host, so new
        # records wait until the keyboard has been quiet for a moment.
        if self.aw.user_idle_s() >= HOLD_STILL_S:
            self.reload()
        else:
            self._stale = True

    def _reload_if_stale(self) -> None:
        if self._stale and self.aw.user_idle_s() >= HOLD_STILL_S:
            self._stale = False
            self.reload()

    # -- filter --------------------------------------------------------------------------

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.apply_filter(event.value)

    def apply_filter(self, text: str) -> None:
        """Show what the filter line ``text`` selects (and put it in the filter line)."""
        if not self.is_mounted:  # a mode screen made a moment ago: on_mount applies it
            self.pending_filter = text
            return
        line = self.query_one("#filter", Input)
        line.value = text
        try:
            sel = parse_filter(text)
        except ConfigError as exc:
            # The line keeps the text to mend; the list, and what `a` labels, stay the last
            # filter that parsed, and the status line says which.
            shows = f"'{self.applied_filter}'" if self.applied_filter else "every trajectory"
            self._status(f"{exc}: not applied, the list still shows {shows}")
            line.focus()
            return
        self.applied_filter = text.strip()
        self.selection = sel
        self.aw.selection = sel
        self.page_offset = 0
        self.query_one("#list", DataTable).focus()
        self.reload(to_top=True)

    def action_save_filter(self) -> None:
        text = self.query_one("#filter", Input).value.strip()
        if not text:
            self.notify("the filter line is empty: nothing to save", severity="warning")
            return
        self.app.push_screen(
            PromptDialog(
                "Save the filter as (letters, digits, - and _)",
                hint=f"{text}   (kept in the pool's {FILTERS_FILE})",
            ),
            lambda name: None if not name else self.aw.save_filter(name.strip(), text),
        )

    def action_recall_filter(self) -> None:
        self.aw.choose_filter()

    def action_focus_filter(self) -> None:
        self.query_one("#filter", Input).focus()

    def action_focus_list(self) -> None:
        self.query_one("#list", DataTable).focus()

    # -- navigation -------------------------------------------------------------------------

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_inspect()

    def action_inspect(self) -> None:
        tid = self.current_id()
        if tid:
            self.aw.inspect(tid, highlight=self.selection.text)

    def action_group(self) -> None:
        tid = self.current_id()
        row = next((r for r in self._shown if r["id"] == tid), None)
        if row and row.get("group"):
            self.aw.show_group(row["group"], tid)
        elif row:
            self.notify("this trajectory has no group", severity="warning")

    def action_diff(self) -> None:
        tid = self.current_id()
        if tid:
            self.aw.diff_mark(tid)
            self._status()

    def action_sort(self) -> None:
        self.sort_key = SORTS[(SORTS.index(self.sort_key) + 1) % len(SORTS)]
        self.page_offset = 0
        self.reload(to_top=True)

    def action_reverse(self) -> None:
        self.descending = not self.descending
        self.page_offset = 0
        self.reload(to_top=True)

    def action_next_page(self) -> None:
        if self.page and self.page_offset + PAGE_SIZE < self.page.total:
            self.page_offset += PAGE_SIZE
            self.reload(to_top=True)

    def action_prev_page(self) -> None:
        if self.page_offset:
            self.page_offset = max(0, self.page_offset - PAGE_SIZE)
            self.reload(to_top=True)

    # -- curation ---------------------------------------------------------------------------

    def action_arm_all(self) -> None:
        typed = self.query_one("#filter", Input).value.strip()
        if not self.all_armed and typed != self.applied_filter:
            # "ALL matching" must mean what the filter line says, not an older filter
            shows = f"'{self.applied_filter}'" if self.applied_filter else "every trajectory"
            self.notify(
                f"the filter line is not applied (the list shows {shows}): "
                "mend it and press enter before labelling all",
                severity="warning",
            )
            return
        self.all_armed = not self.all_armed
        self._status()

    def label_targets(self) -> list[str] | Selection:
        if self.all_armed:
            self.all_armed = False
            self._status()
            return self.selection
        tid = self.current_id()
        return [f"trajectory:{tid}"] if tid else []

    def current_labels(self) -> dict[str, Any]:
        tid = self.current_id()
        row = next((r for r in self._shown if r["id"] == tid), None) or {}
        return {
            "tags": row.get("label_tags"),
            "note": row.get("label_note"),
            "reward": row.get("label_reward"),
        }

    def labels_written(self, event: TrajectoryLabelled) -> None:
        verb = "undid" if event.undone else "labelled"
        self.notify(f"{verb}: {event.action.describe()}", timeout=2)
        self.reload()
