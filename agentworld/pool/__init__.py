"""The pool: a plain directory of content-addressed shards, writer journals and a label overlay.

``Pool`` is the one entry point the proxy, TUI, trainer and exporters use.
The on-disk format is specified in docs/pool-format.md.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentworld.errors import NotFoundError, PoolError
from agentworld.pool.index import Index
from agentworld.pool.journal import Recovery, journal_is_live, recover_orphans
from agentworld.pool.labels import Labels
from agentworld.pool.layout import Layout, check_version, init_pool
from agentworld.pool.reader import RecordFetcher, Trajectory, iter_records, iter_trajectories
from agentworld.pool.selection import Selection
from agentworld.pool.writer import Durability, PoolWriter

__all__ = ["Pool", "PoolWriter", "Recovery", "Selection", "Trajectory"]


class Pool:
    """An open pool directory."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.labels = Labels(layout)
        self.recovered: list[Recovery] = []
        self._index: Index | None = None
        self._index_lock = threading.Lock()
        self._fetcher: RecordFetcher | None = None

    @classmethod
    def open(
        cls, path: str | os.PathLike[str], *, recover: bool = True, log_cuts: bool = True
    ) -> Pool:
        """Open an existing pool folder, refusing unknown format versions, and recover dead
        writers (``recovered``; ``log_cuts``: as ``seal_journal``'s). An object-store URL is opened by ``agentworld.pool.opener.open_pool``
        (a ``RemotePool``; this base class does not know its subclass)."""
        from agentworld.pool.remote_store import remote_url

        if remote_url(path) is not None:
            raise PoolError(
                f"{path}: an object-store URL; open it with "
                "agentworld.pool.opener.open_pool (Pool.open takes a pool folder)"
            )
        layout = Layout(Path(path))
        check_version(layout)
        pool = cls(layout)
        if recover:
            pool.recovered = recover_orphans(layout, log_cuts=log_cuts)
        return pool

    @classmethod
    def create(cls, path: str | os.PathLike[str]) -> Pool:
        """Create (or open) a pool directory (a local one: writers keep journals on disk)."""
        from agentworld.pool.remote_store import remote_url

        if remote_url(path) is not None:
            raise PoolError(
                f"{path}: writers keep their pool on local disk; give a local --pool and "
                "upload its sealed shards with --remote URL (or `aw pool push URL`)"
            )
        layout = init_pool(Path(path))
        return cls.open(layout.root)

    @property
    def root(self) -> Path:
        return self.layout.root

    def writer(
        self,
        *,
        durability: Durability = "batched",
        commit_records: int = 512,
        commit_interval_s: float = 0.05,
        rotate_bytes: int = 64 * 1024 * 1024,
        name: str = "w",
    ) -> PoolWriter:
        """A new writer with its own journal. Close it to seal the journal into a shard."""
        return PoolWriter(
            self.layout,
            durability=durability,
            commit_records=commit_records,
            commit_interval_s=commit_interval_s,
            rotate_bytes=rotate_bytes,
            name=name,
        )

    def fetch_all(self, *, verify: bool = True) -> int:
        """Make every shard readable from ``layout`` (a remote pool downloads what its cache
        lacks; a local one has them all); returns how many were fetched."""
        return 0

    def shard_bytes(self) -> int:
        """The size of the sealed shards, in bytes."""
        return sum(p.stat().st_size for p in self.layout.shard_paths())

    def recover(self) -> list[Recovery]:
        """Seal journals of writers that are gone."""
        return recover_orphans(self.layout)

    def index(self, *, refresh: bool = True) -> Index:
        """The SQLite index, brought up to date unless ``refresh`` is False."""
        with self._index_lock:  # threads share one index (and its connection)
            if self._index is None:
                self._index = Index(self.layout, self.labels)
        if refresh:
            self._index.refresh()
        return self._index

    def iter_records(
        self, *, journals: bool = True, strict: bool = False
    ) -> Iterator[dict[str, Any]]:
        """Every valid record once, in pool order. A corrupt shard, or a line that is not
        a valid record, is logged and skipped (``strict``: raises CorruptDataError);
        `aw pool fsck` names it."""
        return iter_records(self.layout, journals=journals, strict=strict)

    def iter_trajectories(
        self, selection: Selection | None = None, *, journals: bool = True
    ) -> Iterator[Trajectory]:
        """Stream trajectories with labels applied, keeping those the selection matches."""
        labels = self.labels.effective()
        for t in iter_trajectories(self.layout, labels, journals=journals):
            if selection is None or selection.admits(t):
                yield t

    def _fetch(self, row: dict[str, Any]) -> dict[str, Any]:
        if self._fetcher is None:
            self._fetcher = RecordFetcher(self.layout)
        return self._fetcher.get(row["source"], row["line"])

    def read_step(self, row: dict[str, Any]) -> dict[str, Any]:
        """The step an index row (``Index.steps`` / ``steps_of``) points at; when its journal
        was sealed since the index saw it, looked up again by id."""
        try:
            return self._fetch(row)
        except NotFoundError:
            return self.get_step(row["id"])

    def read_steps(self, rows: list[dict[str, Any]]) -> dict[str, dict[str, Any] | Exception]:
        """The steps index rows point at, by id, reading each shard or journal once (not once
        per row: a live journal is not cached, and rereading it per row made a restart scale
        with its size). A step that cannot be read maps to its exception."""
        if self._fetcher is None:
            self._fetcher = RecordFetcher(self.layout)
        by_source: dict[str, list[dict[str, Any]]] = {}
        for row in rows:
            by_source.setdefault(row["source"], []).append(row)
        out: dict[str, dict[str, Any] | Exception] = {}
        for source, group in by_source.items():
            try:
                got = self._fetcher.get_many(source, [r["line"] for r in group])
            except NotFoundError:  # sealed (or compacted) since the index saw it
                for r in group:
                    try:
                        out[r["id"]] = self.get_step(r["id"])
                    except Exception as exc:
                        out[r["id"]] = exc
                continue
            except Exception as exc:
                got = [exc] * len(group)
            for r, rec in zip(group, got, strict=True):
                out[r["id"]] = rec
        return out

    def live_journals(self) -> set[str]:
        """The journals (paths relative to the pool) that a live writer holds locked."""
        return {
            str(p.relative_to(self.root)) for p in self.layout.journal_paths() if journal_is_live(p)
        }

    def get_step(self, step_id: str) -> dict[str, Any]:
        """One step by id, via the index (refreshed when the id or its source is not found)."""
        for attempt in (0, 1):
            idx = self.index(refresh=attempt > 0)
            row = idx.step(step_id)
            if row is None:
                if attempt == 0:
                    continue
                raise NotFoundError(f"no step {step_id!r} in {self.root}")
            try:
                return self._fetch(row)
            except NotFoundError:
                if attempt:
                    raise  # its journal was sealed (or shard compacted) since the index saw it
        raise AssertionError("unreachable")

    def get_trajectory(self, trajectory_id: str) -> Trajectory:
        """One trajectory with all its steps and labels, via the index."""
        try:
            return self._get_trajectory(trajectory_id)
        except NotFoundError:
            # A source moved (journal sealed, shard compacted) since the last refresh.
            self.index()
            return self._get_trajectory(trajectory_id)

    def _get_trajectory(self, trajectory_id: str) -> Trajectory:
        idx = self.index(refresh=False)
        rows = idx.steps(trajectory_id)
        end = idx.end(trajectory_id)
        if not rows and end is None:
            idx.refresh()
            rows, end = idx.steps(trajectory_id), idx.end(trajectory_id)
        if not rows and end is None:
            raise NotFoundError(f"no trajectory {trajectory_id!r} in {self.root}")
        t = Trajectory(trajectory_id)
        t.steps = [self._fetch(r) for r in rows]
        t.end = self._fetch(end) if end else None
        targets = [f"trajectory:{trajectory_id}"] + [f"step:{s['id']}" for s in t.steps]
        idx.refresh_labels()  # labels change often (curation) and are cheap to check
        labels = idx.labels_of(targets)
        t.labels = labels.get(f"trajectory:{trajectory_id}", {})
        for s in t.steps:
            s["_labels"] = {**t.labels, **labels.get(f"step:{s['id']}", {})}
        return t

    def close(self) -> None:
        if self._index is not None:
            self._index.close()
            self._index = None
