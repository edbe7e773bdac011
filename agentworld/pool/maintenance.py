"""Pool upkeep: seal dead writers' journals, compact small shards, and collect garbage.

``gc`` is the only operation in AgentWorld that deletes pool data, and it
deletes a shard only when another verified shard provably holds every record
of it. Everything here is safe to run while writers append.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentworld.errors import CorruptDataError, PoolError, PoolFormatError
from agentworld.pool.journal import Recovery, journal_records, recover_orphans, scan_journal
from agentworld.pool.layout import (
    Layout,
    final_replacement,
    fsync_dir,
    hidden_shards,
    read_superseded,
    shard_file,
)
from agentworld.pool.shards import shard_records, verify_shard, write_shard

log = logging.getLogger(__name__)

STALE_TMP_S = 3600.0


def _layout(pool: Any) -> Layout:
    return pool if isinstance(pool, Layout) else pool.layout


@contextmanager
def _maintenance_lock(layout: Layout) -> Iterator[None]:
    """One compaction or gc at a time per pool (they would race on superseded.txt)."""
    locks = layout.state / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    fd = os.open(locks / "maintenance.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise PoolError(f"{layout.root}: another compaction or gc is running") from None
        yield
    finally:
        os.close(fd)


def seal_idle(pool: Any, *, log_cuts: bool = True) -> list[Recovery]:
    """Seal the journals of writers that are gone (their lock is free) into shards
    (``log_cuts``: as ``seal_journal``'s)."""
    return recover_orphans(_layout(pool), log_cuts=log_cuts)


@dataclass
class CompactReport:
    """Which shards were merged into which new one."""

    inputs: list[str] = field(default_factory=list)
    output: str | None = None
    records: int = 0
    duplicates_dropped: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    skipped: list[str] = field(default_factory=list)  # corrupt inputs left alone

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _lines_and_ids(path: Path) -> tuple[list[bytes], list[str]]:
    """A shard's lines and their record ids; CorruptDataError names the first line that
    is not a valid record (compaction must not carry it on, gc must not trust it)."""
    lines, ids = [], []
    for line, record in shard_records(path):
        lines.append(line)
        ids.append(record["id"])
    return lines, ids


def compact(
    pool: Any, *, max_shards: int = 64, small_bytes: int = 16 * 1024 * 1024, min_shards: int = 2
) -> CompactReport:
    """Merge up to ``max_shards`` live shards smaller than ``small_bytes`` into one new shard.

    Inputs are taken in name order and their records kept in that order (so
    the result is deterministic); a record id seen twice is kept once. Each
    input is then listed in ``superseded.txt`` as ``<old> <new>``: readers skip
    it from then on, and only ``gc`` deletes it. Idempotent after a crash.
    """
    if max_shards < 2:
        raise PoolError("compact: max_shards must be at least 2")
    layout = _layout(pool)
    with _maintenance_lock(layout):
        return _compact(layout, max_shards, small_bytes, min_shards)


def _compact(layout: Layout, max_shards: int, small_bytes: int, min_shards: int) -> CompactReport:
    report = CompactReport()
    hidden = hidden_shards(layout)
    candidates = [
        p for p in layout.shard_paths() if p.name not in hidden and p.stat().st_size < small_bytes
    ][:max_shards]
    if len(candidates) < min_shards:
        return report
    lines: list[bytes] = []
    seen: set[str] = set()
    for path in candidates:
        try:
            shard_lines, ids = _lines_and_ids(path)
        except CorruptDataError as exc:
            log.error("compact: leaving %s alone: %s", path.name, exc.problem)
            report.skipped.append(path.name)
            continue
        report.inputs.append(path.name)
        report.bytes_before += path.stat().st_size
        for rid, line in zip(ids, shard_lines, strict=True):
            if rid in seen:
                report.duplicates_dropped += 1
                continue
            seen.add(rid)
            lines.append(line)
    if len(report.inputs) < min_shards:
        report.inputs = []
        return report
    out = write_shard(layout, lines)
    report.output, report.records, report.bytes_after = out.name, len(lines), out.stat().st_size
    entries = "".join(f"{old} {out.name}\n" for old in report.inputs if old != out.name)
    _append_superseded(layout, entries.encode())
    return report


def _append_superseded(layout: Layout, data: bytes) -> None:
    fd = os.open(layout.superseded, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data  # end a torn line so ours is read whole
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(layout.root)


@dataclass
class GcItem:
    """One file gc deleted (or would delete), why, and its size."""

    path: str
    bytes: int
    reason: str


@dataclass
class GcReport:
    """What gc deleted (``dry_run``: would delete), what it kept and why, bytes freed."""

    dry_run: bool
    deleted: list[GcItem] = field(default_factory=list)
    kept: list[GcItem] = field(default_factory=list)

    @property
    def bytes_freed(self) -> int:
        return sum(i.bytes for i in self.deleted)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "bytes_freed": self.bytes_freed}


class _Gc:
    def __init__(self, layout: Layout, dry_run: bool, report: GcReport) -> None:
        self.layout = layout
        self.dry_run = dry_run
        self.report = report
        self._verified: dict[str, set[str] | None] = {}

    def rel(self, path: Path) -> str:
        return str(path.relative_to(self.layout.root))

    def delete(self, path: Path, reason: str) -> None:
        try:
            size = path.stat().st_size
            if not self.dry_run:
                path.unlink()
                fsync_dir(path.parent)
        except FileNotFoundError:
            return  # someone else removed it meanwhile
        self.report.deleted.append(GcItem(self.rel(path), size, reason))

    def keep(self, path: Path, reason: str) -> None:
        size = path.stat().st_size if path.exists() else 0
        self.report.kept.append(GcItem(self.rel(path), size, reason))

    def ids_of_verified(self, name: str) -> set[str] | None:
        """Record ids of a shard that matches its hash and parses; None otherwise."""
        if name not in self._verified:
            path = shard_file(self.layout, name)
            try:
                if verify_shard(path) is not None:
                    raise CorruptDataError(str(path), "hash mismatch")
                self._verified[name] = set(_lines_and_ids(path)[1])
            except (OSError, CorruptDataError):
                self._verified[name] = None
        return self._verified[name]

    def superseded_shards(self) -> None:
        sup = read_superseded(self.layout)
        for old in sorted(sup):
            path = shard_file(self.layout, old)
            if not path.exists():
                continue
            final = final_replacement(sup, old)
            if final == old or final in sup:
                self.keep(path, "superseded in a cycle in superseded.txt")
                continue
            new_ids = self.ids_of_verified(final)
            if new_ids is None:
                self.keep(path, f"its replacement {final} is missing or fails verification")
                continue
            try:
                old_ids = _lines_and_ids(path)[1]
            except CorruptDataError as exc:
                self.keep(path, f"unreadable, so its records cannot be matched: {exc.problem}")
                continue
            lost = [rid for rid in old_ids if rid not in new_ids]
            if lost:
                self.keep(path, f"{len(lost)} of its records are not in {final} (first {lost[0]})")
                continue
            self.delete(path, f"superseded by {final}, which holds all {len(old_ids)} records")

    def tmp_files(self, now: float, max_age_s: float) -> None:
        if not self.layout.tmp.is_dir():
            return
        for path in sorted(self.layout.tmp.iterdir()):
            if path.is_file() and now - path.stat().st_mtime > max_age_s:
                self.delete(path, f"unfinished shard write older than {max_age_s:.0f}s")

    def journals(self, now: float, max_age_s: float) -> None:
        if not self.layout.journals.is_dir():
            return
        for path in sorted(self.layout.journals.iterdir()):
            if not path.is_file():
                continue
            if path.name.startswith("."):
                if now - path.stat().st_mtime > max_age_s:
                    self._if_unlocked(path, _anything, "journal never opened, older than 1h")
            else:
                self._if_unlocked(
                    path, _holds_nothing, "journal without records of a writer that is gone"
                )

    def _if_unlocked(self, path: Path, empty: Callable[[Path, bytes], bool], reason: str) -> None:
        """Delete ``path`` if no writer holds its lock and ``empty(path, bytes)`` says so."""
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # a live writer owns it: never touched
            try:
                same = os.fstat(fd).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                return
            if same and empty(path, os.pread(fd, os.fstat(fd).st_size, 0)):
                self.delete(path, reason)
        finally:
            os.close(fd)


def _holds_nothing(path: Path, data: bytes) -> bool:
    scan = scan_journal(path, data)
    try:
        return not journal_records(scan) and not scan.torn_bytes
    except PoolFormatError:  # a newer writer's framing: what it holds is unknown, keep it
        return False


def _anything(path: Path, data: bytes) -> bool:
    return True


def gc(pool: Any, *, dry_run: bool = False, max_age_s: float = STALE_TMP_S) -> GcReport:
    """Delete what no reader needs: superseded shards whose records are all in their
    verified replacement, stale temporary files, and empty journals of dead writers.

    ``dry_run`` reports without deleting. Never touches a journal a live writer holds.
    """
    layout = _layout(pool)
    report = GcReport(dry_run=dry_run)
    g = _Gc(layout, dry_run, report)
    now = time.time()
    with _maintenance_lock(layout):
        g.superseded_shards()
        g.tmp_files(now, max_age_s)
        g.journals(now, max_age_s)
    return report
