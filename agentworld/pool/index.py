"""The pool's derived index: SQLite under ``.cache/``, rebuildable from shards and labels at any time.

It makes listing, filtering and fetching by id fast on millions of steps. It
is a cache: deleting it loses nothing, and ``refresh`` brings it up to date
incrementally (new shards, the tails of live journals, changed label files).
"""

from __future__ import annotations

import functools
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from agentworld import records
from agentworld.errors import CorruptDataError, PoolFormatError, RecordError
from agentworld.pool.index_queries import CORRUPT, IndexQueries
from agentworld.pool.journal import crc32, parse_journal, scan_journal, split_trailer
from agentworld.pool.labels import Labels
from agentworld.pool.layout import Layout, hidden_shards
from agentworld.pool.search_text import step_search_text
from agentworld.pool.shards import iter_shard_lines, verify_shard

log = logging.getLogger(__name__)

INDEX_VERSION = 6  # 4: sources.mtime_ns (a shard changed since it was read); 5: a step's
# search text holds every role it added, not one message; 6: sources.tail (a journal cut back)

# A live journal is read on from where the last refresh stopped; the checksum of the bytes
# just before that offset tells the same file from one cut back and written again since.
JOURNAL_TAIL_BYTES = 64

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS sources (
    path TEXT PRIMARY KEY, kind TEXT NOT NULL, size INTEGER NOT NULL, records INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL DEFAULT 0, tail INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS steps (
    id TEXT PRIMARY KEY, trajectory TEXT NOT NULL, idx INTEGER NOT NULL, choice INTEGER,
    agent TEXT, dataset TEXT, split TEXT, task TEXT, grp TEXT, policy_version INTEGER,
    protocol TEXT, status TEXT, reward REAL, started_at REAL, ended_at REAL,
    prompt_tokens INTEGER, completion_tokens INTEGER, token_source TEXT, error TEXT,
    text TEXT, source TEXT NOT NULL, line INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS steps_traj ON steps (trajectory, idx);
CREATE INDEX IF NOT EXISTS steps_source ON steps (source);
CREATE INDEX IF NOT EXISTS steps_started ON steps (started_at);
CREATE INDEX IF NOT EXISTS steps_errors ON steps (started_at) WHERE error IS NOT NULL;
-- Covers the monitor's per-version aggregates so they scan this, not the wide rows.
CREATE INDEX IF NOT EXISTS steps_totals ON steps (
    policy_version, status, token_source, prompt_tokens, completion_tokens
);
CREATE TABLE IF NOT EXISTS ends (
    trajectory TEXT PRIMARY KEY, id TEXT, status TEXT, reward REAL, ended_at REAL, steps INTEGER,
    error TEXT, source TEXT NOT NULL, line INTEGER NOT NULL,
    agent TEXT, dataset TEXT, split TEXT, task TEXT, grp TEXT, policy_version INTEGER
);
CREATE INDEX IF NOT EXISTS ends_source ON ends (source);
CREATE TABLE IF NOT EXISTS trajectories (
    id TEXT PRIMARY KEY, agent TEXT, dataset TEXT, split TEXT, task TEXT, grp TEXT,
    status TEXT, reward REAL, n_steps INTEGER, n_errors INTEGER, first_at REAL, last_at REAL,
    policy_min INTEGER, policy_max INTEGER, prompt_tokens INTEGER, completion_tokens INTEGER,
    token_source TEXT, preview TEXT
);
CREATE INDEX IF NOT EXISTS traj_agent ON trajectories (agent, dataset);
CREATE INDEX IF NOT EXISTS traj_grp ON trajectories (grp);
CREATE INDEX IF NOT EXISTS traj_last ON trajectories (last_at, id);
CREATE INDEX IF NOT EXISTS traj_first ON trajectories (first_at, id);
CREATE INDEX IF NOT EXISTS traj_status ON trajectories (status);
CREATE TABLE IF NOT EXISTS labels (
    target TEXT NOT NULL, field TEXT NOT NULL, value TEXT NOT NULL, author TEXT, time REAL,
    PRIMARY KEY (target, field)
);
CREATE TABLE IF NOT EXISTS tlabels (
    trajectory TEXT PRIMARY KEY, trainable INTEGER, quality TEXT, tags TEXT, note TEXT,
    reward REAL, any_label INTEGER NOT NULL
);
"""


@dataclass
class RefreshReport:
    shards: int = 0
    journals: int = 0
    records: int = 0
    labels: bool = False  # the label files changed and were read again
    seconds: float = 0.0
    corrupt: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)  # shards whose size or mtime moved


def _count(reported: Any, ids: Any) -> int | None:
    """A step's token count: the usage the upstream reported, else its ids'. A pool may
    hold records from before counts had to be integers: anything else counts as unknown."""
    if reported.__class__ is int and reported >= 0:
        return reported
    return len(ids) or None if isinstance(ids, list) else None


def _step_row(rec: dict[str, Any], source: str, line: int) -> tuple[Any, ...]:
    usage = (rec.get("response") or {}).get("usage") or {}
    tokens = rec.get("tokens") or {}
    timings = rec.get("timings") or {}
    err = rec.get("error")
    return (
        rec["id"],
        rec["trajectory"],
        rec["index"],
        rec.get("choice"),
        rec.get("agent"),
        rec.get("dataset"),
        rec.get("split"),
        rec.get("task"),
        rec.get("group"),
        rec.get("policy_version"),
        rec.get("protocol"),
        rec.get("status"),
        rec.get("reward"),
        timings.get("started_at"),
        timings.get("ended_at"),
        _count(usage.get("prompt_tokens"), tokens.get("prompt_ids")),
        _count(usage.get("completion_tokens"), tokens.get("completion_ids")),
        tokens.get("source"),
        f"{err.get('type')}: {err.get('message')}"[:500] if err else None,
        step_search_text(rec),
        source,
        line,
    )


def _end_row(rec: dict[str, Any], source: str, line: int) -> tuple[Any, ...]:
    err = rec.get("error")
    return (
        rec["trajectory"],
        rec["id"],
        rec["status"],
        rec.get("reward"),
        rec.get("ended_at"),
        rec.get("steps"),
        f"{err.get('type')}: {err.get('message')}"[:500] if err else None,
        source,
        line,
        rec.get("agent"),
        rec.get("dataset"),
        rec.get("split"),
        rec.get("task"),
        rec.get("group"),
        rec.get("policy_version"),
    )


_STEP_INSERT = "INSERT OR REPLACE INTO steps VALUES (" + ",".join("?" * 22) + ")"
_END_INSERT = "INSERT OR REPLACE INTO ends VALUES (" + ",".join("?" * 15) + ")"

_SUMMARISE = """
INSERT OR REPLACE INTO trajectories
SELECT s.trajectory,
       MIN(s.agent), MIN(s.dataset), MIN(s.split), MIN(s.task), MIN(s.grp),
       COALESCE(e.status, 'open'), e.reward, COUNT(*), SUM(s.status != 'ok'),
       MIN(s.started_at), MAX(COALESCE(e.ended_at, s.ended_at, s.started_at)),
       MIN(s.policy_version), MAX(s.policy_version),
       SUM(s.prompt_tokens), SUM(s.completion_tokens),
       MIN(s.token_source),
       (SELECT text FROM steps f WHERE f.trajectory = s.trajectory ORDER BY f.idx LIMIT 1)
FROM steps s LEFT JOIN ends e ON e.trajectory = s.trajectory
WHERE s.trajectory IN (SELECT id FROM touched)
GROUP BY s.trajectory
"""

# A trajectory can end before its first model call (an agent that crashed at
# start): it has an end record and no steps, and must still be listed.
_SUMMARISE_ENDS_ONLY = """
INSERT OR REPLACE INTO trajectories
SELECT e.trajectory, e.agent, e.dataset, e.split, e.task, e.grp, e.status, e.reward, 0, 0,
       e.ended_at, e.ended_at, e.policy_version, e.policy_version, 0, 0, NULL, e.error
FROM ends e
WHERE e.trajectory IN (SELECT id FROM touched)
  AND NOT EXISTS (SELECT 1 FROM steps s WHERE s.trajectory = e.trajectory)
"""


def _one_at_a_time(method: Callable[..., Any]) -> Callable[..., Any]:
    """Run an index update under the index's lock: threads share its connection (a proxy's
    and a TUI's workers do), and a second update begun inside the first's transaction
    fails ("cannot start a transaction within a transaction")."""

    @functools.wraps(method)
    def locked(self: Index, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)

    return locked


class Index(IndexQueries):
    """Incrementally maintained SQLite index of one pool."""

    def __init__(self, layout: Layout, labels: Labels, *, path: Path | None = None) -> None:
        self._lock = threading.RLock()
        self._log_corrupt = True
        self.layout = layout
        self.labels = labels
        self.path = path or layout.cache / "index.sqlite"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, timeout=60, check_same_thread=False)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        version = None
        try:
            row = self.db.execute("SELECT value FROM meta WHERE key='version'").fetchone()
            version = row[0] if row else None
        except sqlite3.OperationalError:
            pass
        if version is not None and version != str(INDEX_VERSION):
            self.db.close()
            self.path.unlink()
            for suffix in ("-wal", "-shm"):
                Path(str(self.path) + suffix).unlink(missing_ok=True)
            self.db = sqlite3.connect(self.path, timeout=60, check_same_thread=False)
            self.db.row_factory = sqlite3.Row
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(_SCHEMA)
        self.db.execute("INSERT OR REPLACE INTO meta VALUES ('version', ?)", (str(INDEX_VERSION),))
        self.db.commit()

    def close(self) -> None:
        self.db.close()

    # -- maintenance --------------------------------------------------------------------

    @_one_at_a_time
    def refresh(
        self, progress: Callable[[int, int], None] | None = None, *, log_corrupt: bool = True
    ) -> RefreshReport:
        """Bring the index up to date with shards, journals and labels. ``log_corrupt``:
        log each shard found corrupt (False when the caller says so itself, from
        ``report.corrupt`` or ``corrupt_shards``, as the CLI does: said once)."""
        t0 = time.perf_counter()
        self._log_corrupt = log_corrupt
        report = RefreshReport()
        known = {r["path"]: r for r in self.db.execute("SELECT * FROM sources")}
        superseded = _read_superseded(self.layout)
        shards = [p for p in self.layout.shard_paths() if p.name not in superseded]
        journals = self.layout.journal_paths()
        new_shards = [p for p in shards if self._rel(p) not in known]
        present = {self._rel(p) for p in shards} | {self._rel(p) for p in journals}
        gone = [k for k in known if k not in present and not k.startswith("labels")]
        total = len(new_shards)
        label_error: CorruptDataError | None = None
        self.db.execute("BEGIN IMMEDIATE")
        try:
            self.db.execute("CREATE TEMP TABLE IF NOT EXISTS touched (id TEXT PRIMARY KEY)")
            self.db.execute("DELETE FROM touched")
            for i, path in enumerate(new_shards):
                rel = self._rel(path)
                if self._index_shard(rel, path, report):
                    report.shards += 1
                if progress:
                    progress(i + 1, total)
            # A sealed shard never changes: one whose size or mtime moved since it was
            # read was damaged (or replaced), and its rows must not be served from the
            # cache. Read it again: a corrupt one is then skipped and named. A shard
            # found corrupt is remembered as such (kind "corrupt"), not hashed again on
            # every refresh, until it changes (a good copy fetched over it, say).
            for path in shards:
                rel = self._rel(path)
                prev = known.get(rel)
                if prev is None or prev["kind"] not in ("shard", CORRUPT):
                    continue
                try:
                    st = path.stat()
                except FileNotFoundError:
                    continue  # collected meanwhile: forgotten on the next refresh
                # mtime 0: indexed from a remote pool's rows object, before the shard was here
                if st.st_size == prev["size"] and prev["mtime_ns"] in (0, st.st_mtime_ns):
                    continue
                if prev["kind"] == "shard":
                    log.warning(
                        "index: shard %s changed since it was indexed (%d bytes, now %d):"
                        " reading it again",
                        rel,
                        prev["size"],
                        st.st_size,
                    )
                    report.changed.append(rel)
                self._forget(rel)
                self._index_shard(rel, path, report)
            for rel in gone:
                # A sealed journal's records now live in a shard indexed above;
                # rows still pointing at it were never sealed (or the shard was gc'd).
                self._forget(rel)
            for path in journals:
                rel = self._rel(path)
                prev = known.get(rel)
                try:
                    st = path.stat()
                except FileNotFoundError:
                    continue
                if prev is not None and (prev["size"], prev["mtime_ns"]) == (
                    st.st_size,
                    st.st_mtime_ns,
                ):
                    continue
                try:
                    report.records += self._index_journal(rel, path, prev, st.st_mtime_ns)
                except FileNotFoundError:
                    # Sealed while we read: its shard is indexed on the next refresh.
                    self._forget(rel)
                    continue
                except PoolFormatError as exc:
                    self._forget(rel)
                    report.corrupt.append(f"{rel}: {exc}")
                    continue
                report.journals += 1
            # Step labels attach to trajectories through the steps table, so new
            # rows can change the label summary even when no label file changed.
            # A bad label line fails the refresh, but only after what was read of the
            # shards is kept: rolled back, every command read them again (a changed
            # shard re-hashed) for as long as the line stayed. The labels keep their
            # last good state and are read again once the file changes.
            try:
                report.labels = self._refresh_labels(force=bool(report.records or gone))
            except CorruptDataError as exc:
                label_error = exc
                self.db.execute("DELETE FROM meta WHERE key = 'labels_sig'")  # read them next
            self.db.execute(
                "DELETE FROM trajectories WHERE id IN (SELECT id FROM touched) "
                "AND id NOT IN (SELECT trajectory FROM steps) "
                "AND id NOT IN (SELECT trajectory FROM ends)"
            )
            self.db.execute(_SUMMARISE)
            self.db.execute(_SUMMARISE_ENDS_ONLY)
            self.db.execute("DELETE FROM touched")
            self.db.commit()
        except BaseException:
            self.db.rollback()
            raise
        if label_error is not None:
            raise label_error
        report.seconds = time.perf_counter() - t0
        return report

    @_one_at_a_time
    def rebuild(
        self, progress: Callable[[int, int], None] | None = None, *, log_corrupt: bool = True
    ) -> RefreshReport:
        """Drop everything and index the pool from scratch."""
        for table in ("sources", "steps", "ends", "trajectories", "labels", "tlabels"):
            self.db.execute(f"DELETE FROM {table}")
        self.db.execute("DELETE FROM meta WHERE key = 'labels_sig'")
        self.db.commit()
        return self.refresh(progress, log_corrupt=log_corrupt)

    def _index_shard(self, rel: str, path: Path, report: RefreshReport) -> bool:
        """Index one shard; a corrupt one is left out, remembered and named (False)."""
        try:
            report.records += self._index_source(rel, "shard", path)
            return True
        except FileNotFoundError:
            self._forget(rel)  # collected meanwhile
            return False
        except CorruptDataError as exc:
            # One bad shard must not keep the rest of the pool out of the index.
            self._forget(rel)
            report.corrupt.append(f"{rel}: {exc}")
            (log.error if self._log_corrupt else log.debug)("index: skipping %s: %s", rel, exc)
            try:
                st = path.stat()
                size, mtime_ns = st.st_size, st.st_mtime_ns
            except OSError:
                size, mtime_ns = -1, 0  # a remote pool's shard that never arrived
            self.db.execute(
                "INSERT OR REPLACE INTO sources VALUES (?, ?, ?, 0, ?, 0)",
                (rel, CORRUPT, size, mtime_ns),
            )
            return False

    def _forget(self, rel: str) -> None:
        """Drop every row read from one source (it vanished or is corrupt)."""
        self.db.execute(
            "INSERT OR IGNORE INTO touched SELECT trajectory FROM steps WHERE source=?", (rel,)
        )
        self.db.execute(
            "INSERT OR IGNORE INTO touched SELECT trajectory FROM ends WHERE source=?", (rel,)
        )
        self.db.execute("DELETE FROM steps WHERE source=?", (rel,))
        self.db.execute("DELETE FROM ends WHERE source=?", (rel,))
        self.db.execute("DELETE FROM sources WHERE path=?", (rel,))

    def _rel(self, path: Path) -> str:
        return str(path.relative_to(self.layout.root))

    def _index_source(self, rel: str, kind: str, path: Path) -> int:
        st = path.stat()  # before reading: a change while it is read shows next time
        count = self._index_lines(rel, iter_shard_lines(path), 0)
        self.db.execute(
            "INSERT OR REPLACE INTO sources VALUES (?, ?, ?, ?, ?, 0)",
            (rel, kind, st.st_size, count, st.st_mtime_ns),
        )
        return count

    def _index_journal(
        self, rel: str, path: Path, prev: sqlite3.Row | None, mtime_ns: int = 0
    ) -> int:
        """Index only the part of a live journal committed since the last refresh.

        ``sources.size`` holds the byte offset up to which the journal was read (with
        its mtime then), so a monitor refreshing every second reads just the new tail,
        and ``sources.tail``
        the checksum of the bytes before it. A writer whose batch failed to reach the
        disk cuts its journal back and writes on from there (``cut_back``): when those
        bytes changed, the rows read from the journal (the failed batch's among them,
        never acknowledged) are dropped and the journal is read again from its start.
        """
        offset, first_line = (prev["size"], prev["records"]) if prev else (0, 0)
        start = max(0, offset - JOURNAL_TAIL_BYTES)
        try:
            with open(path, "rb") as f:
                f.seek(start)
                data = f.read()
        except FileNotFoundError:
            return 0
        before, data = data[: offset - start], data[offset - start :]
        if prev is not None and (len(before) < offset - start or crc32(before) != prev["tail"]):
            self._forget(rel)
            return self._index_journal(rel, path, None, mtime_ns)
        scan = scan_journal(path, data)
        lines, trailer = parse_journal(scan) if offset == 0 else split_trailer(scan.lines)
        end = offset + scan.valid_bytes
        tail = crc32((before + data[: scan.valid_bytes])[-JOURNAL_TAIL_BYTES:])
        if trailer is not None and self._index_sealed(rel, trailer["sealed"]):
            # Remember how far it was read (no rows, and not a live journal in the
            # stats): the next refresh skips it.
            self.db.execute(
                "INSERT OR REPLACE INTO sources VALUES (?, ?, ?, ?, ?, ?)",
                (rel, "sealed journal", end, 0, mtime_ns, tail),
            )
            return 0
        count = self._index_lines(rel, lines, first_line)
        self.db.execute(
            "INSERT OR REPLACE INTO sources VALUES (?, ?, ?, ?, ?, ?)",
            (rel, "journal", end, first_line + count, mtime_ns, tail),
        )
        return count

    def _index_sealed(self, rel: str, digest: str) -> bool:
        """Point a sealed journal's rows at its shard, if the shard is installed.

        Between its trailer and its removal a journal and its shard hold the same
        records: rows left pointing at the journal would vanish with it while the
        shard, already indexed, is not read again.
        """
        shard = self.layout.shard_path(digest)
        if not shard.is_file() or verify_shard(shard) is not None:
            # Crashed before installing it, or it is damaged (its records are read from
            # the journal, which recovery seals again): the journal stays the source.
            return False
        self._forget(rel)
        self._index_source(self._rel(shard), "shard", shard)
        return True

    def _index_lines(self, rel: str, lines: Iterable[bytes], first_line: int) -> int:
        steps: list[tuple[Any, ...]] = []
        ends: list[tuple[Any, ...]] = []
        n = 0
        for n, raw in enumerate(lines, 1):
            line = first_line + n - 1
            try:
                rec = records.parse_stored(raw)  # what readers file, as reader.iter_records
                if rec["kind"] == "step":
                    steps.append(_step_row(rec, rel, line))
                else:
                    ends.append(_end_row(rec, rel, line))
            except (AttributeError, KeyError, TypeError, ValueError, RecordError) as exc:
                # Not JSON, or not a record the writer would take today (written by hand,
                # or before a field's type was checked): the rest of its file is indexed
                # all the same, as readers skip just that line (reader.iter_records).
                log.warning("index: %s line %d left out (fsck names it): %r", rel, line, exc)
            if len(steps) >= 5000:
                self._flush_rows(steps, ends)
        self._flush_rows(steps, ends)
        return n

    def _flush_rows(self, steps: list[tuple[Any, ...]], ends: list[tuple[Any, ...]]) -> None:
        for sql, rows, trajectory in ((_STEP_INSERT, steps, 1), (_END_INSERT, ends, 0)):
            if not rows:
                continue
            try:
                self.db.executemany(sql, rows)
            except (sqlite3.InterfaceError, sqlite3.ProgrammingError):
                rows[:] = [r for r in rows if self._insert_one(sql, r, trajectory)]  # a bad type
            self.db.executemany(
                "INSERT OR IGNORE INTO touched VALUES (?)", ((r[trajectory],) for r in rows)
            )
            rows.clear()

    def _insert_one(self, sql: str, row: tuple[Any, ...], trajectory: int) -> bool:
        try:
            self.db.execute(sql, row)
            return True
        except (sqlite3.InterfaceError, sqlite3.ProgrammingError) as exc:
            log.warning("index: a record of %r left out (fsck names it): %s", row[trajectory], exc)
            return False

    @_one_at_a_time
    def refresh_labels(self) -> None:
        """Re-read label files if any changed (cheap when none did)."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            self._refresh_labels()
            self.db.commit()
        except BaseException:
            self.db.rollback()
            raise

    def _refresh_labels(self, *, force: bool = False) -> bool:
        """Read the label files again if they changed (or ``force``); whether it did."""
        files = self.labels.files()
        # Size and mtime: a file replaced by one of the same size (a git checkout of
        # another branch's labels) changed too, and must be read again.
        sig = ";".join(
            f"{self._rel(p)}:{st.st_size}:{st.st_mtime_ns}" for p in files for st in [p.stat()]
        )
        row = self.db.execute("SELECT value FROM meta WHERE key='labels_sig'").fetchone()
        if row is not None and row[0] == sig and not (force and files):
            return False
        eff = self.labels.effective()
        self.db.execute("DELETE FROM labels")
        self.db.executemany(
            "INSERT INTO labels VALUES (?, ?, ?, ?, ?)",
            (
                (target, f, orjson.dumps(e.value).decode(), e.author, e.time)
                for target, fields in eff.items()
                for f, e in fields.items()
            ),
        )
        self.db.execute("DELETE FROM tlabels")
        rows: dict[str, list[Any]] = {}
        for target, fields in eff.items():
            kind, _, ident = target.partition(":")
            if kind == "step":
                traj = self.db.execute(
                    "SELECT trajectory FROM steps WHERE id=?", (ident,)
                ).fetchone()
                if traj is None:
                    continue
                rows.setdefault(traj[0], [None, None, None, None, None, 1])[5] = 1
                continue
            r = rows.setdefault(ident, [None, None, None, None, None, 1])
            for i, f in enumerate(("trainable", "quality", "tags", "note", "reward")):
                if f in fields:
                    v = fields[f].value
                    r[i] = orjson.dumps(v).decode() if f == "tags" else v
        self.db.executemany(
            "INSERT INTO tlabels VALUES (?, ?, ?, ?, ?, ?, ?)",
            ((t, *r) for t, r in rows.items()),
        )
        self.db.execute("INSERT OR REPLACE INTO meta VALUES ('labels_sig', ?)", (sig,))
        return True


def _read_superseded(layout: Layout) -> set[str]:
    """Shard file names that a compaction replaced and that readers skip (see layout)."""
    return hidden_shards(layout)
