"""The runs screen: a training run's curves in the terminal, and reward by policy version.

The run folders are those `aw train` writes (``metrics.jsonl`` in each) under
``--runs`` (default ``runs``, where ``output_dir = runs/train`` puts them);
the panels are the ones ``curves.png`` draws (``agentworld.curves``). The table reads
the pool: did the versions the trainer published earn more reward?
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, OptionList, Static
from textual.widgets.option_list import Option

from agentworld.curves import METRICS, Chart, charts, read_rows, run_folders
from agentworld.tui.delivery import deliver

if TYPE_CHECKING:
    from agentworld.tui.app import AgentWorldApp

POLL_S = 2.0  # an online run appends a row per update: redraw when its file changed


def run_label(run: Path, root: Path) -> Text:
    """A run's name as the list shows it: its path under the runs folder, literally."""
    try:
        name = str(run.relative_to(root)) if run != root else run.name
    except ValueError:
        name = str(run)
    return Text(name or run.name)


def latest_text(rows: list[dict[str, Any]]) -> Text:
    """The last update's headline numbers: ``key=value`` pairs, so a narrow pane wraps
    between pairs, never inside one."""
    if not rows:
        return Text("no updates logged yet", style="dim")
    last = rows[-1]
    out = Text()
    out.append(f"update {last.get('step')}", style="bold")
    for key in (
        "policy_version",
        "policy_lag",
        "reward_mean",
        "loss",
        "kl",
        "entropy",
        "clip_frac",
        "tokens_per_s",
    ):
        v = last.get(key)
        if isinstance(v, int | float) and not isinstance(v, bool):
            out.append(f"   {key}=", style="dim")
            out.append(f"{v:,.4g}")
    return out


class RunsScreen(Screen[None]):
    """Pick a run folder; see its curves; see reward by policy version in the pool."""

    BINDINGS: ClassVar[list[BindingType]] = [
        # not g: g is the group view everywhere else
        Binding("ctrl+r", "reload", "Reload", tooltip="Look for runs again"),
        Binding("escape", "focus_list", "Runs", show=False),
    ]
    DEFAULT_CSS = """
    RunsScreen #runs { width: 28; border: round $primary-darken-2; }
    RunsScreen #right { width: 1fr; }
    RunsScreen #latest { height: auto; padding: 0 1; }
    RunsScreen #charts { height: auto; }
    RunsScreen PlotextPlot { height: 12; }
    RunsScreen #by-version { height: auto; max-height: 14; margin-top: 1; }
    RunsScreen .title { text-style: bold; padding: 0 1; }
    """

    def __init__(self) -> None:
        super().__init__()
        self.runs: list[Path] = []
        self.run: Path | None = None
        self.rows: list[dict[str, Any]] = []
        self.charts: list[Chart] = []
        self.by_version: list[dict[str, Any]] | None = None
        self._seen: tuple[float, int] | None = None  # (mtime, size) of the run's metrics drawn

    @property
    def awapp(self) -> AgentWorldApp:
        return self.app  # type: ignore[return-value]

    @property
    def root(self) -> Path:
        return Path(self.awapp.data.config.runs_path)

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal():
            yield OptionList(id="runs")
            with VerticalScroll(id="right"):
                yield Static(id="latest")
                yield VerticalScroll(id="charts")
                yield Static("reward by policy version (pool)", classes="title")
                yield DataTable(id="by-version", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = "training runs"
        table = self.query_one("#by-version", DataTable)
        for col in ("version", "trajectories", "scored", "reward mean", "failed"):
            table.add_column(col, key=col)
        self.action_reload()
        self.set_interval(POLL_S, self._poll)

    # -- loading (workers) -------------------------------------------------------------------

    def action_reload(self) -> None:
        self.load_runs()
        self.load_by_version()

    def action_focus_list(self) -> None:
        self.query_one("#runs", OptionList).focus()

    @work(thread=True, exclusive=True, group="runs-list")
    def load_runs(self) -> None:
        deliver(self, self._show_runs, run_folders(self.root))

    @work(thread=True, exclusive=True, group="runs-metrics")
    def load_metrics(self, run: Path) -> None:
        path = run / METRICS
        try:
            st = path.stat()
            seen: tuple[float, int] | None = (st.st_mtime, st.st_size)
        except OSError:
            seen = None
        rows = read_rows(path)
        deliver(self, self._show_metrics, run, rows, seen)

    @work(thread=True, exclusive=True, group="runs-by-version")
    def load_by_version(self) -> None:
        deliver(self, self._show_by_version, self.awapp.data.reward_by_version())

    def _poll(self) -> None:
        if self.run is None:
            return
        try:
            st = (self.run / METRICS).stat()
        except OSError:
            return
        if (st.st_mtime, st.st_size) != self._seen:
            self.load_metrics(self.run)
            self.load_by_version()

    def on_pool_refreshed(self) -> None:
        self.load_by_version()

    # -- showing (UI thread) -----------------------------------------------------------------

    def _show_runs(self, runs: list[Path]) -> None:
        self.runs = runs
        ol = self.query_one("#runs", OptionList)
        ol.clear_options()
        ol.add_options([Option(run_label(r, self.root), id=str(r)) for r in runs])
        if not runs:
            self.run = None
            self.query_one("#latest", Static).update(
                Text(f"no training runs under {self.root} (a folder with metrics.jsonl)")
            )
            return
        keep = self.run if self.run in runs else runs[0]
        ol.highlighted = runs.index(keep)
        self.load_metrics(keep)

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if event.option.id is not None and Path(event.option.id) != self.run:
            self.load_metrics(Path(event.option.id))

    def _show_metrics(
        self, run: Path, rows: list[dict[str, Any]], seen: tuple[float, int] | None
    ) -> None:
        from textual_plotext import PlotextPlot

        self.run, self.rows, self._seen = run, rows, seen
        self.charts = charts(rows)
        head = Text()
        head.append_text(run_label(run, self.root))
        head.append("\n")
        head.append_text(latest_text(rows))
        self.query_one("#latest", Static).update(head)
        box = self.query_one("#charts", VerticalScroll)
        plots = list(box.query(PlotextPlot))
        while len(plots) > len(self.charts):
            plots.pop().remove()
        while len(plots) < len(self.charts):
            plot = PlotextPlot()
            box.mount(plot)
            plots.append(plot)
        for plot, chart in zip(plots, self.charts, strict=True):
            plt = plot.plt
            plt.clear_figure()
            plt.title(chart.title)
            plt.xlabel("update")
            for s in chart.series:
                plt.plot(s.steps, s.values, label=s.key, marker="braille")
            plot.refresh()

    def _show_by_version(self, rows: list[dict[str, Any]]) -> None:
        self.by_version = rows
        table = self.query_one("#by-version", DataTable)
        table.clear()
        for r in rows:
            mean = r["reward_mean"]
            table.add_row(
                "-" if r["version"] is None else str(r["version"]),
                f"{r['trajectories']:,}",
                f"{r['scored']:,}",
                "-" if mean is None else f"{mean:.3f}",
                f"{r['failed'] or 0:,}",
            )
