"""Streaming reads of a pool: every record, or trajectory by trajectory, in a stable order."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from agentworld import records
from agentworld.errors import CorruptDataError, NotFoundError, PoolFormatError, RecordError
from agentworld.pool.index import _read_superseded
from agentworld.pool.journal import journal_records, scan_journal
from agentworld.pool.labels import LabelEntry, apply_labels
from agentworld.pool.layout import JOURNAL_SUFFIX, Layout
from agentworld.pool.search_text import step_search_text
from agentworld.pool.shards import invalid_line, iter_shard_lines, read_shard_bytes

log = logging.getLogger(__name__)


@dataclass
class Trajectory:
    """One trajectory's steps (ordered by index, then choice), its end record, and labels."""

    id: str
    steps: list[dict[str, Any]] = field(default_factory=list)
    end: dict[str, Any] | None = None
    labels: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> str:
        return self.end["status"] if self.end else "open"

    @property
    def reward(self) -> float | None:
        """The label override when there is one, else the end record's reward."""
        if "reward" in self.labels:
            return self.labels["reward"]
        return self.end.get("reward") if self.end else None

    def first(self, key: str) -> Any:
        src = self.steps[0] if self.steps else self.end or {}
        return src.get(key)

    def summary(self, *, texts: bool = True) -> dict[str, Any]:
        """Fields Selection.matches understands; ``texts``: with each step's search text
        (as much work as parsing a small step: left out where no words are sought)."""
        pv = [s["policy_version"] for s in self.steps] or (
            [self.end["policy_version"]] if self.end else []
        )
        # started_at is a required key, but its value may be null (unknown), as every timing's
        times = [t for s in self.steps if (t := s["timings"]["started_at"]) is not None]
        return {
            "id": self.id,
            "agent": self.first("agent"),
            "dataset": self.first("dataset"),
            "split": self.first("split"),
            "task": self.first("task"),
            "group": self.first("group"),
            "status": self.status,
            "reward": self.end.get("reward") if self.end else None,
            "policy_min": min(pv) if pv else None,
            "policy_max": max(pv) if pv else None,
            "first_at": min(times) if times else None,
            "last_at": (self.end or {}).get("ended_at") or (max(times) if times else None),
            "texts": [step_search_text(s) for s in self.steps] if texts else None,
            "step_tags": sorted({t for s in self.steps for t in _step_tags(s)}),
        }


def _step_tags(step: dict[str, Any]) -> list[str]:
    return (step.get("_labels") or {}).get("tags") or []


def source_paths(layout: Layout, *, journals: bool = True) -> list[tuple[str, Path]]:
    """(kind, path) of every readable source in the pool's stable order: shards, then journals."""
    skip = _read_superseded(layout)
    out = [("shard", p) for p in layout.shard_paths() if p.name not in skip]
    if journals:
        out += [("journal", p) for p in layout.journal_paths()]
    return out


def iter_raw(
    layout: Layout,
    *,
    journals: bool = True,
    strict: bool = False,
    sources: list[tuple[str, Path]] | None = None,
) -> Iterator[tuple[Path, int, bytes]]:
    """(source, line number, raw JSON) of every record. Live journals give their committed part.

    A shard that fails its hash or does not decompress is logged and skipped
    (``strict``: raised) so one bad file never hides the rest of the pool;
    `aw pool fsck` names it. Shards are hash-checked before any line is yielded.
    ``sources`` (from ``source_paths``) pins the set read, so a reader can replay
    exactly the shards it read before even after new ones arrived.
    """
    if sources is None:
        sources = source_paths(layout, journals=journals)
    for kind, path in sources:
        if kind == "shard":
            try:
                lines = iter_shard_lines(path)
                for n, line in enumerate(lines):
                    yield path, n, line
            except FileNotFoundError:
                continue  # garbage-collected after a compaction while we listed
            except CorruptDataError as exc:
                if strict:
                    raise
                log.error("skipping corrupt shard: %s (run `aw pool fsck`)", exc)
        else:
            try:
                lines = journal_records(scan_journal(path))
            except FileNotFoundError:
                continue  # sealed while we listed: its shard is read on the next pass
            except PoolFormatError as exc:
                if strict:
                    raise
                log.error("skipping journal: %s", exc)
                continue
            for n, line in enumerate(lines):
                yield path, n, line


class _SkippedLines:
    """Lines a reader left out, reported once per file (a shard of garbage is one
    logged error, not one per line), as soon as the reader moves on to another file."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self.count = 0
        self.first = ""

    def add(self, path: Path, line: int, exc: RecordError) -> None:
        if path is not self.path:
            self.report()
            self.path, self.first = path, f"line {line}: {exc}"
        self.count += 1

    def report(self) -> None:
        if self.count:
            log.error(
                "skipping %d line(s) of %s that are not valid records (%s); "
                "`aw pool fsck` lists them",
                self.count,
                self.path,
                self.first,
            )
        self.count = 0


def _file_line(path: Path, n: int) -> int:
    """The 1-based line in its file of a source's ``n``-th record (a journal's line 1 is its header)."""
    return n + (2 if path.name.endswith(JOURNAL_SUFFIX) else 1)


def iter_records(
    layout: Layout,
    *,
    journals: bool = True,
    strict: bool = False,
    sources: list[tuple[str, Path]] | None = None,
) -> Iterator[dict[str, Any]]:
    """Every valid record (steps and ends), parsed, each once even if stored twice.

    Only records with what readers file them by are yielded (``records.parse_stored``:
    kind, id, trajectory, a step's index). A line that is not one (in a shard whose
    hash matches, written by another tool or by hand) is skipped with one logged
    error per file naming the first such line (``strict``: CorruptDataError), and
    the rest of the pool stays readable; `aw pool fsck` checks every line whole.
    """
    seen: set[str] = set()
    skipped = _SkippedLines()
    try:
        for path, n, raw in iter_raw(layout, journals=journals, strict=strict, sources=sources):
            if skipped.count and path is not skipped.path:  # iter_raw: one Path per file
                skipped.report()
            try:
                rec = records.parse_stored(raw)
            except RecordError as exc:
                if strict:
                    raise invalid_line(path, _file_line(path, n), exc) from None
                skipped.add(path, _file_line(path, n), exc)
                continue
            rid = rec["id"]
            if rid in seen:
                continue
            seen.add(rid)
            yield rec
    finally:
        skipped.report()


def iter_trajectories(
    layout: Layout,
    labels: dict[str, dict[str, LabelEntry]] | None = None,
    *,
    journals: bool = True,
    include_open: bool = True,
    sources: list[tuple[str, Path]] | None = None,
) -> Iterator[Trajectory]:
    """Trajectories as they complete in pool order (open ones last), without loading the pool.

    Memory holds only trajectories whose end record has not been read yet.
    """
    labels = labels or {}
    pending: OrderedDict[str, Trajectory] = OrderedDict()
    seen: set[str] = set()

    def finish(t: Trajectory) -> Trajectory:
        t.steps.sort(key=lambda s: (s["index"], s.get("choice", 0)))
        t.labels = apply_labels(None, labels.get(f"trajectory:{t.id}"))
        for s in t.steps:
            own = labels.get(f"step:{s['id']}")
            s["_labels"] = apply_labels(own, labels.get(f"trajectory:{t.id}"))
        return t

    for rec in iter_records(layout, journals=journals, sources=sources):
        tid = rec["trajectory"]
        if tid in seen:
            continue  # a late step after the end record: reported by fsck, not trained on twice
        t = pending.get(tid)
        if t is None:
            t = pending[tid] = Trajectory(tid)
        if rec["kind"] == "end":
            t.end = rec
        else:
            t.steps.append(rec)
        if t.end is not None and len(t.steps) >= t.end["steps"]:
            del pending[tid]
            seen.add(tid)
            yield finish(t)
    for t in pending.values():
        if t.end is not None or include_open:
            yield finish(t)


class RecordFetcher:
    """Fetch single records by (source, line), keeping a few decompressed shards cached."""

    def __init__(self, layout: Layout, cache_shards: int = 2) -> None:
        self.layout = layout
        self.cache_shards = cache_shards
        self._cache: OrderedDict[str, list[bytes]] = OrderedDict()

    def _lines(self, source: str) -> list[bytes]:
        lines = self._cache.get(source)
        if lines is not None:
            self._cache.move_to_end(source)
            return lines
        path = self.layout.root / source
        if source.startswith("journals/"):
            try:
                return journal_records(scan_journal(path))
            except FileNotFoundError:
                raise NotFoundError(f"{source}: sealed meanwhile; refresh the index") from None
        try:
            lines = read_shard_bytes(path).split(b"\n")
        except FileNotFoundError:
            raise NotFoundError(f"{source}: no such shard; refresh the index") from None
        self._cache[source] = lines
        while len(self._cache) > self.cache_shards:
            self._cache.popitem(last=False)
        return lines

    def get_many(self, source: str, lines: list[int]) -> list[dict[str, Any] | Exception]:
        """The records at ``lines`` of one source, reading it once; a record that cannot
        be read is its exception (a missing source raises NotFoundError for them all)."""
        text = self._lines(source)
        out: list[dict[str, Any] | Exception] = []
        for line in lines:
            try:
                if line >= len(text) or not text[line]:
                    raise CorruptDataError(source, f"no record at line {line}")
                out.append(orjson.loads(text[line]))
            except (CorruptDataError, ValueError) as exc:
                out.append(exc)
        return out

    def get(self, source: str, line: int) -> dict[str, Any]:
        return orjson.loads(self.raw(source, line))

    def raw(self, source: str, line: int) -> bytes:
        """The stored bytes of the record at ``line`` (an index row's) of ``source``."""
        lines = self._lines(source)
        if line >= len(lines) or not lines[line]:
            raise CorruptDataError(source, f"no record at line {line}")
        return lines[line]
