"""The monitor: live counts, rates, rewards, per agent/dataset tables, errors and disk use."""

from __future__ import annotations

import logging
import sqlite3
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Container, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Sparkline, Static

from agentworld.literal import literal, one_line
from agentworld.plural import plural
from agentworld.tui.data import MonitorSnapshot
from agentworld.tui.delivery import deliver
from agentworld.tui.messages import PoolRefreshed
from agentworld.tui.proxy_panel import ProxyPanel

if TYPE_CHECKING:
    from agentworld.tui.app import AgentWorldApp

TICK_S = 1.0
PER_AGENT_COLUMNS = {
    "agent": 10,
    "dataset": 10,
    "traj": 7,
    "steps": 9,
    "open": 5,
    "done": 7,
    "failed": 6,
    "reward": 6,
}
# The table's width in cells (each column is padded a cell either side): given it whole,
# no column is cut off behind a scrollbar no key moves.
TABLE_WIDTH = sum(PER_AGENT_COLUMNS.values()) + 2 * len(PER_AGENT_COLUMNS)
# Keys that scroll the monitor: key, how the page moves, the words for it, the key shown.
SCROLL_KEYS = (
    ("pagedown", "page_down", "a page down", None),
    ("pageup", "page_up", "a page up", None),
    ("down", "down", "a line down", "↓"),
    ("up", "up", "a line up", "↑"),
    ("home", "home", "to the top", None),
    ("end", "end", "to the end", None),
)
# From this many columns the table and the reward bins sit left of the errors, disk and
# proxy (about 40 columns are left for those); below it everything is stacked.
WIDE_AT = TABLE_WIDTH + 44


log = logging.getLogger(__name__)


def human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _n(x: Any) -> str:
    return f"{x:,}" if isinstance(x, int) else "-" if x is None else f"{x:.3g}"


def summary_text(s: MonitorSnapshot, indexing: tuple[int, int] | None = None) -> Text:
    """The counts at the top; while the index is first built, a line saying so (its
    counts grow as it goes: they are not the pool's yet)."""
    st = (s.heavy or {}).get("stats") or {}
    by = s.by_status
    out = Text()
    if indexing is not None:
        done, total = indexing
        out.append(" indexing the pool… ", style="bold reverse yellow")
        out.append(f" {done:,}/{total:,} shards" if total else "", style="yellow")
        out.append("  (a first open reads every shard; the counts are not all in yet)\n")
    out.append("steps ", style="bold")
    out.append(f"{s.steps:,}")
    out.append(
        f"  (errors {_n(st.get('step_errors'))})", style="red" if st.get("step_errors") else "dim"
    )
    out.append("   now ", style="bold")
    # The newest bucket is still filling (and the index lags the writers by up to a
    # refresh), so "now" is the mean of the five buckets before it.
    recent = s.rate[-6:-1] or [0.0]
    out.append(f"{sum(recent) / len(recent):.1f} steps/s\n")
    out.append("trajectories ", style="bold")
    out.append(f"{sum(by.values()):,}: ")
    for name, style in (
        ("open", "cyan"),
        ("done", "green"),
        ("failed", "red"),
        ("timeout", "red"),
        ("cancelled", "yellow"),
    ):
        if by.get(name):
            out.append(f"{name} {by[name]:,}  ", style=style)
    out.append("\ntokens ", style="bold")
    out.append(
        f"prompt {_n(st.get('prompt_tokens'))} · completion {_n(st.get('completion_tokens'))}"
    )
    if st.get("steps"):
        out.append(
            f" · engine ids on {100 * (st.get('engine_token_steps') or 0) / st['steps']:.0f}% of steps"
        )
    out.append("\nlabelled ", style="bold")
    out.append(plural(st.get("labelled_trajectories"), "trajectory"))
    versions = st.get("policy_versions") or {}
    # Steps, not trajectories (one trajectory can span versions): the unit says so.
    out.append("   steps per policy version ", style="bold")
    out.append(
        " ".join(
            f"v{v}:{n:,}"
            for v, n in sorted(versions.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))
        )
        or "-"
    )
    return out


def bin_digits(bins: list[tuple[float, float]]) -> int:
    """Decimals that tell every bin's bounds apart (rewards of 0.008…0.012 in ten bins
    need four; two printed ``0.01…0.01`` over and over)."""
    for digits in range(2, 7):
        labels = [f"{lo:.{digits}f}…{hi:.{digits}f}" for lo, hi in bins]
        if len(set(labels)) == len(labels) and all(
            f"{lo:.{digits}f}" != f"{hi:.{digits}f}" for lo, hi in bins
        ):
            return digits
    return 6


def rewards_text(s: MonitorSnapshot) -> Text:
    """The effective rewards' bins; rewards all of one value are one bin saying so
    (``all 0``), not a range no reward had."""
    hist = (s.heavy or {}).get("histogram") or []
    out = Text()
    out.append("reward distribution\n", style="bold underline")
    top = max((c for _, _, c in hist), default=0)
    digits = bin_digits([(lo, hi) for lo, hi, _ in hist if lo != hi])
    for lo, hi, c in hist:
        bar = "█" * (round(20 * c / top) if top else 0)
        label = f"{lo:6.{digits}f}…{hi:<6.{digits}f}" if lo != hi else f"all {lo:.6g}".ljust(13)
        out.append(f"{label} ")
        out.append(bar, style="green")
        out.append(f" {c:,}\n")
    if not hist:
        out.append("no rewards yet", style="dim")
    out.rstrip()  # the panels' margins space them
    return out


def side_text(s: MonitorSnapshot) -> Text:
    """The latest errors and the disk use (the proxy's stats are a panel of their own)."""
    heavy = s.heavy or {}
    out = Text()
    out.append("errors (latest)\n", style="bold underline")
    for e in s.errors:
        when = datetime.fromtimestamp(e["started_at"] or 0, UTC).strftime("%H:%M:%S")
        out.append(f"{when} ", style="dim")
        out.append(literal(e.get("agent") or "-", style="bold"))
        out.append(" ")
        out.append(one_line(e.get("error"), 60, style="red"))
        out.append("\n")
    if not s.errors:
        out.append("none\n", style="dim")
    disk = heavy.get("disk") or {}
    out.append("\ndisk ", style="bold underline")
    out.append("  ".join(f"{name.strip('.')} {human_bytes(n)}" for name, n in disk.items()))
    return out


class MonitorScreen(Screen[None]):
    """Live view of the pool, refreshed every second from a worker thread."""

    DEFAULT_CSS = f"""
    MonitorScreen #summary {{ height: auto; padding: 0 1; }}
    MonitorScreen #rate-label {{ height: 1; padding: 0 1; color: $text-muted; }}
    MonitorScreen #rate {{ height: 3; margin: 0 1; }}
    MonitorScreen #panels {{ height: auto; layout: vertical; }}
    MonitorScreen.-wide #panels {{ layout: horizontal; }}
    MonitorScreen #left, MonitorScreen #right {{ height: auto; }}
    MonitorScreen.-wide #left {{ width: {TABLE_WIDTH + 2}; }}
    MonitorScreen.-wide #right {{ width: 1fr; }}
    MonitorScreen #per-agent {{ width: {TABLE_WIDTH}; height: auto; margin: 0 1; }}
    MonitorScreen #rewards, MonitorScreen #side, MonitorScreen #proxy {{
        height: auto; padding: 0 1; margin-top: 1;
    }}
    MonitorScreen.-wide #side {{ margin-top: 0; }}
    """
    HORIZONTAL_BREAKPOINTS: ClassVar[list[tuple[int, str]] | None] = [
        (0, "-narrow"),
        (WIDE_AT, "-wide"),
    ]

    # The app's keys, shown in this footer (the other screens' footers have no room).
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("l", "app.go('trajectories')", "List", tooltip="Go to the trajectory list"),
        Binding("r", "app.review", "Review", tooltip="Review unlabelled trajectories one by one"),
        Binding("q", "app.quit", "Quit", tooltip="Quit aw tui"),
        # The monitor is taller than a small terminal: these scroll it whatever holds
        # the focus (the per-agent table takes none; its rows scroll with the page).
        *(
            Binding(
                key,
                f"scroll_body('{how}')",
                f"Scroll {tip}",
                show=False,
                priority=True,
                key_display=shown,
                tooltip=f"Scroll the monitor {tip}",
            )
            for key, how, tip, shown in SCROLL_KEYS
        ),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.snapshot: MonitorSnapshot | None = None
        self._heavy_running = False
        self._per_agent_shown: list[dict[str, Any]] = []
        self.shown_indexing: tuple[int, int] | None = (0, 0)  # what the summary says

    @property
    def aw(self) -> AgentWorldApp:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll(id="body"):
            yield Static(Text("loading…"), id="summary")
            yield Static(Text("steps per second, last 2 minutes"), id="rate-label")
            yield Sparkline([0.0], id="rate")
            with Container(id="panels"):
                with Vertical(id="left"):
                    yield DataTable(id="per-agent", show_cursor=False, zebra_stripes=True)
                    yield Static(Text(""), id="rewards")
                with Vertical(id="right"):
                    yield Static(Text(""), id="side")
                    yield Static(Text(""), id="proxy")
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self.sub_title = "monitor"
        table = self.query_one("#per-agent", DataTable)
        table.can_focus = False  # the page scrolls, rows and all; arrows are not the table's
        for col, width in PER_AGENT_COLUMNS.items():
            table.add_column(col, key=col, width=width)
        self.set_interval(TICK_S, self.tick)
        self.call_after_refresh(self.tick, shown=True)

    def on_pool_refreshed(self, event: PoolRefreshed) -> None:
        self.tick()  # the first refresh ends "indexing": say so now, not a tick later

    def on_screen_resume(self) -> None:
        self.tick(shown=True)  # at once when shown, not at the next interval

    def action_scroll_body(self, how: str) -> None:
        """Scroll the monitor (``page_down``, ``up``, ``home``…)."""
        getattr(self.query_one("#body", VerticalScroll), f"scroll_{how}")(animate=False)

    @property
    def ready(self) -> bool:
        """Whether both the cheap numbers and the whole-pool aggregates are on screen,
        the index built."""
        return (
            self.snapshot is not None
            and self.snapshot.heavy is not None
            and self.shown_indexing is None
        )

    def tick(self, *, shown: bool = False) -> None:
        if not (shown or self.is_current):
            return  # no scans for a screen nobody is looking at
        self._load()
        if not self._heavy_running and self.aw.data.heavy_due():
            self._heavy_running = True
            self._load_heavy()

    @work(thread=True, exclusive=True, group="monitor")
    def _load(self) -> None:
        snap = self.aw.data.monitor()
        deliver(self, self.show, snap)

    @work(thread=True, exclusive=True, group="monitor-heavy")
    def _load_heavy(self) -> None:
        try:
            heavy = self.aw.data.monitor_heavy()
        except sqlite3.Error as exc:
            # A busy or rebuilding index is retried at the next tick, never fatal.
            log.warning("monitor: whole-pool totals failed, retrying: %s", exc)
            return
        finally:
            self._heavy_running = False
        deliver(self, self.show_heavy, heavy)

    def show_heavy(self, heavy: dict[str, Any]) -> None:
        if self.snapshot is not None:
            self.snapshot.heavy = heavy
            self.show(self.snapshot)

    def show(self, snap: MonitorSnapshot) -> None:
        """Put one snapshot on screen (UI thread)."""
        self.snapshot = snap
        self.shown_indexing = self.aw.indexing
        self.query_one("#summary", Static).update(summary_text(snap, self.shown_indexing))
        self.query_one("#rate", Sparkline).data = snap.rate or [0.0]
        self.query_one("#rewards", Static).update(rewards_text(snap))
        self.query_one("#side", Static).update(side_text(snap))
        proxy = self.query_one("#proxy", Static)
        proxy.display = snap.proxy is not None
        if snap.proxy is not None:
            proxy.update(ProxyPanel(snap.proxy))
        table = self.query_one("#per-agent", DataTable)
        rows = ((snap.heavy or {}).get("stats") or {}).get("per_agent") or []
        if rows == self._per_agent_shown:
            return
        self._per_agent_shown = rows
        table.clear()
        for r in rows:
            table.add_row(
                one_line(r["agent"] or "-", 10),
                one_line(r["dataset"] or "-", 10),
                Text(f"{r['trajectories']:,}"),
                Text(f"{r['steps'] or 0:,}"),
                Text(f"{r['open'] or 0:,}"),
                Text(f"{r['done'] or 0:,}"),
                Text(f"{r['failed'] or 0:,}"),
                Text("-" if r["reward_mean"] is None else f"{r['reward_mean']:.3f}"),
            )
