"""The TUI's one door to storage: thread-safe index queries, refresh, trajectories and labels.

Screens call these methods from ``@work(thread=True)`` workers. Queries share
one SQLite connection guarded by a lock; the incremental refresh runs on a
second connection so a long refresh never holds up a page of the list.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson

from agentworld.errors import AgentWorldError
from agentworld.pool import Pool, Selection, Trajectory
from agentworld.pool.index import Index, RefreshReport
from agentworld.pool.opener import open_pool as open_pool_at
from agentworld.tui import queries
from agentworld.tui.curation import Curator, LabelAction


class LabelNotShown(AgentWorldError):
    """A label was written, but the index could not be refreshed to show it (a label file
    went bad under another writer): it shows once the pool refreshes again."""

    def __init__(self, action: LabelAction, why: AgentWorldError) -> None:
        super().__init__(str(why))
        self.action, self.why = action, why


@dataclass(frozen=True)
class TuiConfig:
    """What the CLI resolved: where, who, and optional extras."""

    pool_path: str
    author: str
    proxy_url: str | None = None
    tokenizer_path: str | None = None
    runs_path: str = "runs"  # training run folders (`aw train`'s output_dir is runs/train)
    # Where `aw serve` keeps its models (AW_HOME/models): without --tokenizer, the token
    # view looks there for the model a step names (and the embedded default).
    models_dir: str | None = None


def open_pool(path: str | Path) -> Pool:
    """Open the pool and read its label files once, so that a bad label line fails here.

    The CLI then reports it as every other command does (``aw: error: FILE:LINE: bad
    label line``, exit 6) before the app starts; the app's first refresh would otherwise
    meet it in a worker, and Textual would end the app with a traceback.
    """
    pool = open_pool_at(path)
    try:
        for _ in pool.labels.entries():
            pass
    except BaseException:
        pool.close()
        raise
    return pool


@dataclass
class MonitorSnapshot:
    """Everything the monitor shows at one tick."""

    at: float
    steps: int
    by_status: dict[str, int]
    rate: list[float]
    errors: list[dict[str, Any]]
    heavy: dict[str, Any] | None = None  # stats, histogram, disk: recomputed less often
    proxy: dict[str, Any] | str | None = None


@dataclass
class Page:
    rows: list[dict[str, Any]]
    total: int
    offset: int
    selection: Selection = field(default_factory=Selection)


class PoolData:
    """Thread-safe access to one pool for the app and its screens."""

    def __init__(self, pool: Pool, config: TuiConfig, *, clock: Callable[[], float] = time.time):
        self.pool = pool
        self.config = config
        self.clock = clock
        self._qlock = threading.Lock()
        self._rlock = threading.Lock()
        self._hlock = threading.Lock()
        self._query = pool.index(refresh=False)
        self._refresher: Index | None = None
        self.curator = Curator(pool.labels, self.own_labels, config.author)
        self._heavy_db: sqlite3.Connection | None = None  # full scans: off the query lock
        self._heavy: dict[str, Any] | None = None
        self._heavy_at = 0.0
        self._heavy_cost_s = 0.0

    def close(self) -> None:
        with self._rlock:
            if self._refresher is not None:
                self._refresher.close()
                self._refresher = None
        with self._qlock:
            self.pool.close()
        with self._hlock:
            if self._heavy_db is not None:
                self._heavy_db.close()
                self._heavy_db = None

    # -- refresh ------------------------------------------------------------------

    def refresh(self, progress: Callable[[int, int], None] | None = None) -> RefreshReport:
        """Bring the index up to date (new shards, journal tails, labels); ``progress``
        is told (shards done, shards new) as a cold index is built."""
        with self._rlock:
            if self._refresher is None:
                # The pool's own kind of index (a remote pool's lists its store).
                self._refresher = type(self._query)(self.pool.layout, self.pool.labels)
            return self._refresher.refresh(progress)

    # -- lists ------------------------------------------------------------------------

    def page(self, sel: Selection, *, sort: str, descending: bool, limit: int, offset: int) -> Page:
        with self._qlock:
            total = self._query.count_trajectories(sel)
            offset = max(0, min(offset, max(0, total - 1) // limit * limit))
            rows = self._query.trajectories(
                sel, sort=sort, descending=descending, limit=limit, offset=offset
            )
        return Page(rows, total, offset, sel)

    def trajectory_ids(self, sel: Selection) -> list[str]:
        with self._qlock:
            return self._query.trajectory_ids(sel)

    def summary(self, trajectory_id: str) -> dict[str, Any] | None:
        with self._qlock:
            return self._query.trajectory(trajectory_id)

    def distinct(self, column: str) -> list[str]:
        with self._qlock:
            return queries.distinct(self._query.db, column)

    def reward_by_version(self) -> list[dict[str, Any]]:
        """Reward of ended trajectories per policy version (the runs screen's table)."""
        with self._qlock:
            return queries.reward_by_version(self._query.db)

    def next_unreviewed(self, sel: Selection, skip: Sequence[str] = ()) -> str | None:
        """The oldest trajectory matching ``sel`` with no label at all, not in ``skip``."""
        skipped = set(skip)
        unlabelled = replace(sel, labelled=False)
        with self._qlock:
            rows = self._query.trajectories(
                unlabelled, sort="time", descending=False, limit=len(skipped) + 1
            )
        return next((r["id"] for r in rows if r["id"] not in skipped), None)

    # -- one trajectory -----------------------------------------------------------------

    def trajectory(self, trajectory_id: str) -> Trajectory:
        with self._qlock:
            return self.pool.get_trajectory(trajectory_id)

    def relabelled(self, t: Trajectory) -> Trajectory:
        """``t`` with its labels as the index has them now (as ``trajectory`` gives them).

        After a label that is all that changed; reading the trajectory again would parse
        every step, megabytes for a long session, to learn it.
        """
        targets = [f"trajectory:{t.id}"] + [f"step:{s['id']}" for s in t.steps]
        labels = self.own_labels(targets)
        own = labels.get(targets[0], {})
        steps = [{**s, "_labels": {**own, **labels.get(f"step:{s['id']}", {})}} for s in t.steps]
        return Trajectory(t.id, steps=steps, end=t.end, labels=own)

    def group(self, group: str, limit: int = 64) -> list[Trajectory]:
        with self._qlock:
            ids = queries.group_members(self._query.db, group)[:limit]
            return [self.pool.get_trajectory(t) for t in ids]

    # -- labels -----------------------------------------------------------------------

    def own_labels(self, targets: Sequence[str]) -> dict[str, dict[str, Any]]:
        with self._qlock:
            return self._query.labels_of(list(targets))

    def label(self, targets: Sequence[str], fields: Mapping[str, Any]) -> LabelAction:
        """Write labels, then refresh so lists and counts show them at once."""
        action = self.curator.label(targets, fields)
        self._refresh_after(action)
        return action

    def undo(self) -> LabelAction | None:
        action = self.curator.undo()
        if action is not None:
            self._refresh_after(action)
        return action

    def _refresh_after(self, action: LabelAction) -> None:
        try:
            self.refresh()
        except AgentWorldError as exc:  # the label is on disk: say so, not "failed"
            raise LabelNotShown(action, exc) from exc

    # -- monitor ----------------------------------------------------------------------

    def monitor(self) -> MonitorSnapshot:
        """Cheap numbers (counts, rate, latest errors), plus the last whole-pool aggregates."""
        now = self.clock()
        with self._qlock:
            db = self._query.db
            snap = MonitorSnapshot(
                at=now,
                steps=queries.step_count(db),
                by_status=queries.trajectories_by_status(db),
                rate=queries.steps_per_second(db, now=now),
                errors=queries.recent_errors(db),
            )
        snap.heavy = self._heavy
        if self.config.proxy_url:
            snap.proxy = proxy_stats(self.config.proxy_url)
        return snap

    def heavy_due(self, min_interval_s: float = 1.0) -> bool:
        """Whether the whole-pool aggregates should be recomputed now.

        They are full scans (seconds on a million steps), so they run at most
        a quarter of the wall time, and never hold up the cheap numbers.
        """
        due = max(min_interval_s, 4 * self._heavy_cost_s)
        return self._heavy is None or time.monotonic() - self._heavy_at >= due

    def monitor_heavy(self) -> dict[str, Any]:
        """Recompute the whole-pool aggregates: stats, reward histogram, disk use."""
        t0 = time.monotonic()
        with self._hlock:
            if self._heavy_db is None:
                self._heavy_db = sqlite3.connect(
                    self._query.path, timeout=60, check_same_thread=False
                )
                self._heavy_db.row_factory = sqlite3.Row
            stats = queries.pool_totals(self._heavy_db)
            hist = queries.reward_histogram(self._heavy_db)
        heavy = {"stats": stats, "histogram": hist, "disk": queries.disk_use(self.pool.root)}
        self._heavy = heavy
        self._heavy_cost_s = time.monotonic() - t0
        self._heavy_at = time.monotonic()
        return heavy


def proxy_stats(url: str, timeout_s: float = 0.5) -> dict[str, Any] | str:
    """The proxy's GET /aw/stats, or a one-line reason it could not be read."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/aw/stats", timeout=timeout_s) as resp:
            data = orjson.loads(resp.read())
        return data if isinstance(data, dict) else {"stats": data}
    except Exception as exc:  # any network or parse failure is shown, never raised
        return f"unreachable: {exc}"
