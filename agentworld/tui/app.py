"""The `aw tui` application: modes for monitor and list, pushed screens for details, one data service."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any, ClassVar

from textual import events, work
from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.screen import Screen

from agentworld.errors import AgentWorldError, ConfigError
from agentworld.pool import Selection
from agentworld.tui.data import PoolData, TuiConfig, open_pool
from agentworld.tui.decoders import Fetch, Load, NoDecoder, TokenDecoders
from agentworld.tui.dialog import ChoiceDialog
from agentworld.tui.diff import DiffScreen
from agentworld.tui.group import GroupScreen
from agentworld.tui.help import HelpScreen, bindings_of, key_name, what_it_does
from agentworld.tui.inspector import InspectorScreen
from agentworld.tui.messages import PoolRefreshed, TrajectoryLabelled
from agentworld.tui.monitor import MonitorScreen
from agentworld.tui.remote_tokens import RemoteTokensError
from agentworld.tui.runs import RunsScreen
from agentworld.tui.saved_filters import SavedFilters
from agentworld.tui.screenshot import local_fonts
from agentworld.tui.tokens import Decoder, load_decoder
from agentworld.tui.trajectories import TrajectoriesScreen

REFRESH_S = 1.0
REFRESH_NOTICE_S = 30.0  # a refresh that fails is shown once, for longer than a passing notice


class AgentWorldApp(App[None]):
    """Monitor, list, inspect and curate one pool."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("m", "go('monitor')", "Monitor", show=False, tooltip="Go to the monitor"),
        Binding("l", "go('trajectories')", "List", show=False, tooltip="Go to the trajectory list"),
        Binding(
            "r", "review", "Review", show=False, tooltip="Review unlabelled trajectories one by one"
        ),
        Binding("c", "go('runs')", "Runs", show=False, tooltip="Go to the training runs"),
        Binding("question_mark", "help", "Help", key_display="?", tooltip="Keys of this screen"),
        Binding("q", "quit", "Quit", show=False, tooltip="Quit aw tui"),
    ]
    MODES: ClassVar[dict[str, Any]] = {
        "monitor": MonitorScreen,
        "trajectories": TrajectoriesScreen,
        "runs": RunsScreen,
    }

    def __init__(
        self,
        data: PoolData,
        *,
        start: str = "monitor",
        refresh_s: float = REFRESH_S,
        open_trajectory: str | None = None,
        saved_filter: str | None = None,
    ):
        super().__init__()
        self.data = data
        self.start_mode = start
        self.open_trajectory = open_trajectory  # `aw tui --open tr_…`: inspect it at once
        self.refresh_s = refresh_s
        self.saved_filter = saved_filter  # `aw tui --filter NAME`: the list opens with it
        self.saved_filters = SavedFilters(data.pool.root)
        self.selection = Selection()
        self.marked: str | None = None  # the trajectory `d` marked, to diff another against
        self.decoders = TokenDecoders(data.config.tokenizer_path, data.config.models_dir)
        self.last_key_at = 0.0  # monotonic time of the last key: lists hold still while typing
        self.refresh_problem: str | None = None  # why the last refresh failed, while it fails
        # Until the first refresh is done, the index may be cold (being built from every
        # shard): screens say "indexing", not "0 steps". (shards done, shards to index)
        self.indexing: tuple[int, int] | None = (0, 0)
        # A remote pool by its URL: its root is a cache folder named by a hash.
        self.title = f"AgentWorld · {getattr(data.pool, 'url', None) or data.pool.root.name}"

    def on_mount(self) -> None:
        self.switch_mode(self.start_mode)
        if self.saved_filter:
            self.call_after_refresh(self.recall_filter, self.saved_filter)
        if self.open_trajectory:
            self.call_after_refresh(self.inspect, self.open_trajectory)
        if self.refresh_s > 0:
            self.set_interval(self.refresh_s, self.refresh_pool)
        self.refresh_pool()
        path = self.decoders.loading()
        if path:
            self._load_tokenizer(path)

    def on_unmount(self) -> None:
        self.data.close()

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.Key):
            self.last_key_at = time.monotonic()
        await super().on_event(event)

    def user_idle_s(self) -> float:
        """Seconds since the last key press."""
        return time.monotonic() - self.last_key_at

    # -- background work ------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="refresh")
    def refresh_pool(self) -> None:
        """Take new records and labels into the index; tell the screen if anything came."""
        try:
            report = self.data.refresh(self._indexing_progress if self.indexing else None)
        except AgentWorldError as exc:
            # Another writer left a bad label line, say: the labels' part of the refresh
            # rolled back (the shards it read are kept), so the screens keep the last good
            # view, and the app says why nothing updates.
            self.call_from_thread(self._refresh_failed, str(exc))
            return
        if self.refresh_problem is not None:
            self.call_from_thread(self._refresh_ok)
        damaged = [c for c in report.corrupt if c.split(":", 1)[0] in report.changed]
        if damaged:  # said once: the refresh that found the shard changed
            self.call_from_thread(self._shards_damaged, damaged)
        if (
            self.indexing is not None
            or report.records
            or report.shards
            or report.changed
            or report.labels
        ):
            self.call_from_thread(self._refreshed, report.records)  # labels: `aw pool label`

    def _indexing_progress(self, done: int, total: int) -> None:
        self.indexing = (done, total)

    def _shards_damaged(self, problems: list[str]) -> None:
        self.notify(
            "left out, damaged since it was indexed (see `aw pool fsck`): " + "; ".join(problems),
            severity="warning",
            timeout=REFRESH_NOTICE_S,
        )

    def _refreshed(self, records: int) -> None:
        self.indexing = None
        self.screen.post_message(PoolRefreshed(records))

    def _refresh_failed(self, problem: str) -> None:
        """Tell the user once per problem (the refresh retries every tick)."""
        self.indexing = None  # what is indexed is shown; the notice says why no more
        if problem != self.refresh_problem:
            self.refresh_problem = problem
            self.notify(
                f"pool not refreshed: {problem}", severity="error", timeout=REFRESH_NOTICE_S
            )

    def _refresh_ok(self) -> None:
        if self.refresh_problem is not None:
            self.refresh_problem = None
            self.notify("pool readable again: refreshing", timeout=3)

    # -- token decoders (decoders.py keeps the state, these run it) --------------------------

    @work(thread=True, group="tokenizer")
    def _load_tokenizer(self, path: str) -> None:
        try:
            decoder = load_decoder(path)
        except Exception as exc:  # a bad path must not take the app down
            self.decoders.loaded(None)
            self.call_from_thread(self.notify, f"tokenizer {path}: {exc}", severity="error")
            return
        self.decoders.loaded(decoder)
        self.call_from_thread(
            self._decoder_ready, f"tokenizer {path} loaded: tokens are shown as text"
        )

    @work(thread=True, group="tokenizer")
    def _fetch_pieces(self, fetch: Fetch) -> None:
        remote = fetch.remote
        try:
            remote.fetch(fetch.ids)
        except RemoteTokensError as exc:
            self.decoders.fetched(remote, ok=False)
            self.call_from_thread(
                self.notify,
                f"token ids shown: {exc} (aw tui --tokenizer PATH decodes locally)",
                severity="warning",
                timeout=6,
            )
            return
        self.decoders.fetched(remote, ok=True)
        self.call_from_thread(self._decoder_ready, None)

    def _decoder_ready(self, notice: str | None) -> None:
        if notice:
            self.notify(notice, timeout=2)
        for screen in self.screen_stack:  # an open token view shows text now, not ids
            if isinstance(screen, InspectorScreen):
                screen.render_step()

    def decoder(self, step: dict[str, Any]) -> Decoder | None:
        """Token-id → text for ``step``, once a tokenizer has loaded or its server has
        decoded its ids; None: show ids."""
        return self.decoders.for_step(step)

    def want_decoder(self, step: dict[str, Any]) -> None:
        """The token view shows ``step``: get what decodes it, if nothing does yet (a
        tokenizer on disk for its model, else the server that generated it)."""
        plan = self.decoders.plan(step)
        if isinstance(plan, Load):
            self._load_tokenizer(plan.path)
        elif isinstance(plan, Fetch):
            if plan.first:
                self.notify(
                    f"no local tokenizer: decoding with {plan.remote.base_url}/detokenize",
                    timeout=3,
                )
            self._fetch_pieces(plan)
        elif isinstance(plan, NoDecoder):
            self.notify(plan.reason, timeout=4)

    # -- navigation (called by screens) ------------------------------------------------------

    def inspect(
        self, trajectory_id: str, step: int | None = None, highlight: str | None = None
    ) -> None:
        """Open a trajectory in the inspector (at the step of that index, when given;
        ``highlight``: the words the list was searched for, marked where they occur)."""
        self.push_screen(InspectorScreen(trajectory_id, step=step, highlight=highlight))

    def show_group(self, group: str, focus: str | None = None) -> None:
        self.push_screen(GroupScreen(group, focus))

    def diff_mark(self, trajectory_id: str) -> None:
        """``d`` on a trajectory (list or group view): mark it, or, with another marked,
        open the diff of the two (the marked one on the left); ``d`` on the marked one
        unmarks it."""
        marked = self.marked
        if marked is None or marked == trajectory_id:
            self.marked = None if marked == trajectory_id else trajectory_id
            self.notify(
                f"marked {trajectory_id}: d on another trajectory diffs the two"
                if self.marked
                else f"unmarked {trajectory_id}",
                timeout=3,
            )
            return
        self.marked = None
        self.push_screen(DiffScreen(marked, trajectory_id))

    # -- saved filters (kept in the pool's filters.toml) ---------------------------------------

    def save_filter(self, name: str, text: str) -> None:
        """Save the filter line ``text`` as ``name``; a problem is a notice."""
        try:
            self.saved_filters.save(name, text)
        except (ConfigError, OSError) as exc:
            self.notify(f"filter not saved: {exc}", severity="error", timeout=REFRESH_NOTICE_S)
            return
        self.notify(f"saved filter {name!r}: f in the list or ctrl+p recalls it", timeout=3)

    def _saved(self) -> dict[str, str] | None:
        """The saved filters, or None (said in a notice) when their file does not read."""
        try:
            return self.saved_filters.load()
        except ConfigError as exc:
            self.notify(str(exc), severity="error", timeout=REFRESH_NOTICE_S)
            return None

    def choose_filter(self) -> None:
        """Pick a saved filter from a list, and show the list with it."""
        saved = self._saved()
        if saved is None:
            return
        if not saved:
            self.notify("no saved filters yet: w in the list saves the filter line", timeout=4)
            return
        self.push_screen(
            ChoiceDialog("Recall a saved filter", {k: f"{k}   {v}" for k, v in saved.items()}),
            lambda name: None if name is None else self.call_later(self.recall_filter, name),
        )

    async def recall_filter(self, name: str) -> None:
        """Show the list with the filter saved as ``name``."""
        try:
            text = self.saved_filters.get(name)
        except ConfigError as exc:
            self.notify(str(exc), severity="error", timeout=REFRESH_NOTICE_S)
            return
        await self.action_go("trajectories")
        screen = self.screen
        if isinstance(screen, TrajectoriesScreen):
            screen.apply_filter(text)

    def action_review(self) -> None:
        self.push_screen(InspectorScreen(None, review=True, selection=self.selection))

    async def action_go(self, mode: str) -> None:
        """Show a mode's own screen: the list or the monitor, whatever was opened on it."""
        if self.current_mode != mode:
            await self.switch_mode(mode)
        while len(self.screen_stack) > 1:
            await self.pop_screen()

    def action_help(self) -> None:
        """The keys of the screen on top, then the ones that work everywhere."""
        screen = self.screen
        if isinstance(screen, HelpScreen):
            return
        sections = [(screen.sub_title or "this screen", type(screen)), ("everywhere", type(self))]
        self.push_screen(HelpScreen(sections, filter_line=isinstance(screen, TrajectoriesScreen)))

    def on_trajectory_labelled(self, event: TrajectoryLabelled) -> None:
        # The other screens (the list beneath the inspector) reload; the one that labelled
        # has shown it already, unless it was closed meanwhile.
        for screen in self.screen_stack:
            if screen is not event.origin and hasattr(screen, "reload"):
                screen.reload()

    def export_screenshot(self, *, title: str | None = None, simplify: bool = False) -> str:
        """Textual's SVG of the screen, with system fonts instead of a CDN's (screenshot.py)."""
        return local_fonts(super().export_screenshot(title=title, simplify=simplify))

    # -- command palette ----------------------------------------------------------------------

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Textual's commands, then every key of ours (app-wide and of the current
        screen) as what it does, with its key."""
        titles: set[str] = set()
        for command in super().get_system_commands(screen):
            titles.add(command.title)
            yield command
        for owner, cls in ((self, type(self)), (screen, type(screen))):
            for b in bindings_of(cls):
                title = what_it_does(b)
                if title in titles:
                    continue
                titles.add(title)
                yield SystemCommand(
                    title, f"key {key_name(b)}", partial(owner.run_action, b.action)
                )
        for name, text in (self._saved() or {}).items():
            yield SystemCommand(f"Filter: {name}", text, partial(self.recall_filter, name))


def make_app(
    config: TuiConfig,
    *,
    start: str = "monitor",
    clock: Callable[[], float] = time.time,
    refresh_s: float = REFRESH_S,
    open_trajectory: str | None = None,
    saved_filter: str | None = None,
) -> AgentWorldApp:
    """Open the pool and build the app; the CLI, textual-serve and tests all start here.

    A pool the app cannot read (a bad label line) fails here, before the app starts.
    """
    pool = open_pool(config.pool_path)
    return AgentWorldApp(
        PoolData(pool, config, clock=clock),
        start=start,
        refresh_s=refresh_s,
        open_trajectory=open_trajectory,
        saved_filter=saved_filter,
    )
