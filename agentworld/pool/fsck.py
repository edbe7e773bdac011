"""`aw pool fsck`: check every pool file against its name, its format and the others, naming what is wrong where.

Read-only. Each file is checked on its own (a corrupt shard is one problem,
never a reason to stop), then the records are checked across files:
duplicate ids, steps after their trajectory's end, and the index against the
shards when an index exists.
"""

from __future__ import annotations

import hashlib
import math
import sqlite3
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from agentworld import records
from agentworld.errors import CorruptDataError, RecordError
from agentworld.plural import plural
from agentworld.pool.journal import (
    TORN_JOURNAL_LINE,
    _is_header,
    journal_is_live,
    journal_version_problem,
    scan_journal,
    split_trailer,
)
from agentworld.pool.labels import label_file_problems
from agentworld.pool.layout import Layout, hidden_shards, shard_digest
from agentworld.pool.shards import iter_shard_lines, read_verified

Progress = Callable[[int, int], None]


@dataclass
class Problem:
    """One thing wrong: the file (relative to the pool root), the 1-based line if known, what."""

    path: str
    line: int | None
    problem: str


@dataclass
class FsckReport:
    """What fsck looked at and what it found; ``ok`` when nothing."""

    root: str
    shards: int = 0
    superseded_shards: int = 0
    journals: int = 0
    records: int = 0
    label_files: int = 0
    index_checked: bool = False
    index_stale: bool = False  # the index lags the shards; its next refresh catches up
    problems: list[Problem] = field(default_factory=list)
    # What a crash leaves and readers ignore (a torn last line of a dead writer's journal
    # or of a label file): named, but the pool is ok; recovery or the next append cuts it.
    warnings: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def add(self, path: str, line: int | None, problem: str) -> None:
        self.problems.append(Problem(path, line, problem))

    def warn(self, path: str, line: int | None, problem: str) -> None:
        self.warnings.append(Problem(path, line, problem))

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (for ``--json``)."""
        return {**asdict(self), "ok": self.ok}


@dataclass
class _Where:
    path: str
    line: int  # 1-based line in the file as a person would count it
    digest: bytes = b""  # of the record's bytes: tells a copy from a different record


@dataclass
class _TrajectoryFacts:
    steps: set[str] = field(default_factory=set)
    end: _Where | None = None
    end_id: str | None = None
    end_steps: int = 0


class _Checker:
    def __init__(self, layout: Layout, report: FsckReport) -> None:
        self.layout = layout
        self.report = report
        self.ids: dict[str, _Where] = {}
        self.trajectories: dict[str, _TrajectoryFacts] = {}
        # (source rel path) -> record ids by 0-based record number, for the index check.
        self.source_ids: dict[str, list[str | None]] = {}
        self.second_ends: set[str] = set()
        # (shard holding the first copy, shard holding the second) -> records copied
        # byte for byte: what two compactions of overlapping shards leave (section 3.4)
        self.overlaps: dict[tuple[str, str], int] = {}
        self.damaged: set[str] = set()  # shards whose hash is wrong (reported once each)

    def rel(self, path: Path) -> str:
        return str(path.relative_to(self.layout.root))

    def record(
        self, rel: str, line: int, raw: bytes, *, live: bool, ordinal: list[str | None]
    ) -> None:
        """Check one record line; ``live`` records take part in the cross-file checks."""
        self.report.records += 1
        try:
            rec = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            self.report.add(rel, line, f"not JSON: {exc}")
            ordinal.append(None)
            return
        rid = rec.get("id") if isinstance(rec, dict) else None
        try:  # the index holds what readers file (a newer schema's record is not)
            records.parse_stored(raw)
            ordinal.append(rid)
        except RecordError:
            ordinal.append(None)
        try:
            records.validate(rec)
        except RecordError as exc:
            self.report.add(rel, line, f"invalid record: {exc}")
            return
        if not live:
            return
        first = self.ids.get(rid)
        # 128 bits: a different record under a copied id must never pass for the copy.
        digest = hashlib.blake2b(raw, digest_size=16).digest()
        if first is not None:
            if first.digest == digest and _is_shard(first.path) and _is_shard(rel):
                pair = (first.path, rel)
                self.overlaps[pair] = self.overlaps.get(pair, 0) + 1
                return
            self.report.add(
                rel, line, f"duplicate record id {rid} (first at {first.path}:{first.line})"
            )
            return
        here = _Where(rel, line, digest)
        self.ids[rid] = here
        facts = self.trajectories.setdefault(rec["trajectory"], _TrajectoryFacts())
        if rec["kind"] == "end":
            if facts.end is not None:
                self.second_ends.add(rid)
                self.report.add(
                    rel,
                    line,
                    f"second end record for trajectory {rec['trajectory']} "
                    f"(first at {facts.end.path}:{facts.end.line})",
                )
                return
            facts.end, facts.end_id, facts.end_steps = here, rid, rec["steps"]
        else:
            facts.steps.add(rid)
            if facts.end is not None and facts.end.path == rel:
                self.report.add(
                    rel,
                    line,
                    f"step {rid} written after its trajectory's end record (line {facts.end.line})",
                )

    def shard(self, path: Path, *, live: bool) -> None:
        rel = self.rel(path)
        ordinal: list[str | None] = []
        self.source_ids[rel] = ordinal
        try:
            data = path.read_bytes()
        except OSError as exc:
            self.report.add(rel, None, f"unreadable: {exc}")
            return
        damage = None
        try:
            read_verified(path)
        except CorruptDataError as exc:
            damage = exc.problem
        if len(shard_digest(path)) != 64:
            self.report.add(rel, None, "name is not <sha256 hex>.jsonl.zst")
        # Parse even a shard whose hash is wrong: naming the first bad line helps repair.
        before = len(self.report.problems)
        n = 0
        try:
            for n, raw in enumerate(iter_shard_lines(path, data), 1):
                self.record(rel, n, raw, live=live, ordinal=ordinal)
        except CorruptDataError as exc:
            self.report.add(rel, n + 1 if n else None, exc.problem)
        if damage is not None:
            # One problem per damaged shard: what its hash says, then the first thing
            # reading it found, not a line for each record or index row it takes along.
            found = self.report.problems[before:]
            del self.report.problems[before:]
            if found:
                first = found[0]
                at = f"line {first.line}: " if first.line else ""
                more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
                damage = f"{damage}; {at}{first.problem}{more}"
            self.report.add(rel, None, damage)
            self.damaged.add(rel)

    def journal(self, path: Path) -> None:
        rel = self.rel(path)
        ordinal: list[str | None] = []
        self.source_ids[rel] = ordinal
        live_writer = journal_is_live(path)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return  # sealed while we looked: its shard is checked instead
        except OSError as exc:
            self.report.add(rel, None, f"unreadable: {exc}")
            return
        scan = scan_journal(path, data)
        lines = scan.lines
        first_record_line = 1
        if lines and _is_header(lines[0]):
            version_problem = journal_version_problem(scan)
            if version_problem is not None:
                self.report.add(rel, 1, version_problem)
                return
            lines = lines[1:]
            first_record_line = 2
        elif data:
            self.report.add(rel, 1, "no journal header line")
        if scan.problem is not None:
            bad_line = data.count(b"\n", 0, scan.valid_bytes) + 1
            torn = scan.problem.startswith(TORN_JOURNAL_LINE)
            if torn and not live_writer:  # a dead writer's torn last write: normal, cut
                self.report.warn(
                    rel,
                    bad_line,
                    f"{scan.problem}: a torn last write, never acknowledged; "
                    f"{scan.torn_bytes} bytes from here are cut on recovery",
                )
            elif not torn:  # a live writer's unfinished last line is normal
                self.report.add(
                    rel,
                    bad_line,
                    f"{scan.problem}; {scan.torn_bytes} bytes from here are cut on recovery",
                )
        lines, trailer = split_trailer(lines)
        live = True
        if trailer is not None:
            trailer_line = first_record_line + len(lines)
            if trailer["records"] != len(lines):
                self.report.add(
                    rel,
                    trailer_line,
                    f"sealed trailer counts {trailer['records']} records, "
                    f"the journal holds {len(lines)}",
                )
            # Sealed into that shard, only the unlink was left: its records are
            # checked there, and counting them here too would read as duplicates.
            live = not self.layout.shard_path(str(trailer["sealed"])).exists()
        for i, raw in enumerate(lines):
            self.record(rel, first_record_line + i, raw, live=live, ordinal=ordinal)

    def _size(self, rel: str) -> int:
        try:
            return (self.layout.root / rel).stat().st_size
        except OSError:  # collected by a gc meanwhile
            return 0

    def cross_checks(self) -> None:
        for (first, second), n in sorted(self.overlaps.items()):
            # `compact` takes only shards under --small-mb: name a size that takes both.
            size_bytes = max(self._size(rel) for rel in (first, second))
            small_mb = max(16, math.ceil(size_bytes / 2**20) + 1)
            self.report.warn(
                second,
                None,
                f"{n} records are also in {first}, byte for byte (what two compactions of "
                "overlapping shards leave: two clones that each compacted, merged by git, or "
                "a compaction cut short): readers keep one copy; "
                f"`aw pool compact --small-mb {small_mb}` folds them into one shard and "
                "`aw pool gc` frees the space",
            )
        for tid, facts in self.trajectories.items():
            if facts.end is not None and len(facts.steps) > facts.end_steps:
                self.report.add(
                    facts.end.path,
                    facts.end.line,
                    f"trajectory {tid} has {len(facts.steps)} steps but its end record says "
                    f"{facts.end_steps}: readers drop the steps past the end",
                )


def _is_shard(rel: str) -> bool:
    return rel.startswith("objects/")


def _check_superseded(layout: Layout, report: FsckReport) -> None:
    if not layout.superseded.exists():
        return
    text = layout.superseded.read_text(encoding="utf-8", errors="replace")
    for n, line in enumerate(text.splitlines(), 1):
        tokens = line.split("#", 1)[0].split()
        if tokens and len(tokens) != 2:
            report.add("superseded.txt", n, "expected '<old shard> <new shard>'")


def _check_manifest(layout: Layout, report: FsckReport) -> None:
    """A clone on the manifest route before `aw pool fetch` holds none of the listed
    shards, and everything above passes on the little it has: say what it lacks."""
    from agentworld.pool.manifest import check_manifest, manifest_file

    if not manifest_file(layout).exists():
        return
    try:
        missing = check_manifest(layout, verify=False).missing
    except CorruptDataError as exc:  # path "<pool>/MANIFEST:<line>"
        line = exc.path.rsplit(":", 1)[-1]
        report.warn("MANIFEST", int(line) if line.isdigit() else None, exc.problem)
        return
    if missing:
        report.warn(
            "MANIFEST",
            None,
            f"{plural(len(missing), 'listed shard')} {'is' if len(missing) == 1 else 'are'} "
            f"not here (first {missing[0]}), so not checked "
            "and not read: `aw pool fetch --from POOL` brings them, "
            "`aw pool manifest --check` verifies",
        )


def _check_index(layout: Layout, checker: _Checker, report: FsckReport) -> None:
    """Compare the index (a cache) with the shards it claims to have read."""
    path = layout.cache / "index.sqlite"
    if not path.exists():
        return
    rel_index = str(path.relative_to(layout.root))
    hint = "; rebuild it with `aw pool reindex`"
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            sources = {
                r[0]: (r[1], r[2]) for r in db.execute("SELECT path, kind, records FROM sources")
            }
            rows: dict[str, list[tuple[str, int]]] = {}
            for rid, source, line in db.execute("SELECT id, source, line FROM steps"):
                rows.setdefault(source, []).append((rid, line))
            for rid, source, line in db.execute("SELECT id, source, line FROM ends"):
                rows.setdefault(source, []).append((rid, line))
        finally:
            db.close()
    except sqlite3.Error as exc:
        report.add(rel_index, None, f"unreadable index: {exc}{hint}")
        return
    report.index_checked = True
    all_indexed = {rid for source_rows in rows.values() for rid, _ in source_rows}
    live = {
        rel
        for rel in checker.source_ids
        if rel.startswith("journals/") or Path(rel).name not in hidden_shards(layout)
    }
    for source, (kind, count) in sorted(sources.items()):
        if kind != "shard":
            continue  # journals grow under live writers: the index lags by design
        if source not in live:
            # Compacted or collected since the last refresh: stale, not wrong.
            report.index_stale = True
            continue
        if source in checker.damaged:
            continue  # named once above; the next refresh notices it changed and skips it
        ordinal = checker.source_ids[source]
        if count != len(ordinal):
            report.add(
                rel_index,
                None,
                f"says {source} holds {count} records, it holds {len(ordinal)}{hint}",
            )
        for rid, line in rows.get(source, ()):
            actual = ordinal[line] if 0 <= line < len(ordinal) else None
            if actual != rid:
                report.add(
                    rel_index,
                    None,
                    f"row {rid} points at {source} line {line + 1}, which holds {actual}{hint}",
                )
        missing = [
            rid
            for rid in ordinal
            if rid is not None and rid not in all_indexed and rid not in checker.second_ends
        ]
        if missing:
            report.add(
                rel_index,
                None,
                f"{len(missing)} records of {source} are missing (first {missing[0]}){hint}",
            )
    for source in rows:
        if source not in sources:
            report.add(rel_index, None, f"rows point at {source}, which the index never read{hint}")


def fsck(pool: Any, progress: Progress | None = None) -> FsckReport:
    """Check every shard, journal, label file and the index of ``pool`` (a Pool or a Layout)."""
    layout: Layout = pool if isinstance(pool, Layout) else pool.layout
    report = FsckReport(root=str(layout.root))
    checker = _Checker(layout, report)
    hidden = hidden_shards(layout)
    shards = layout.shard_paths()
    journals = layout.journal_paths()
    label_files = sorted(layout.labels.glob("*/*.jsonl")) if layout.labels.is_dir() else []
    total = len(shards) + len(journals) + len(label_files)
    done = 0
    for path in shards:
        live = path.name not in hidden
        checker.shard(path, live=live)
        if live:
            report.shards += 1
        else:
            report.superseded_shards += 1
        done += 1
        if progress:
            progress(done, total)
    for path in journals:
        checker.journal(path)
        report.journals += 1
        done += 1
        if progress:
            progress(done, total)
    for path in label_files:
        report.label_files += 1
        try:
            problems, torn = label_file_problems(path)
            for line, problem in problems:
                report.add(str(path.relative_to(layout.root)), line, problem)
            if torn is not None:
                report.warn(str(path.relative_to(layout.root)), *torn)
        except OSError as exc:
            report.add(str(path.relative_to(layout.root)), None, f"unreadable: {exc}")
        done += 1
        if progress:
            progress(done, total)
    if layout.damaged.is_dir():  # kept by recovery until someone decides: fsck says so
        for path in sorted(p for p in layout.damaged.iterdir() if not p.name.startswith(".")):
            report.add(
                str(path.relative_to(layout.root)),
                None,
                "a journal recovery found damaged mid-way, kept whole: records after the "
                "damage are in it but not in the pool; recover them or delete the file",
            )
    _check_superseded(layout, report)
    _check_manifest(layout, report)
    checker.cross_checks()
    _check_index(layout, checker, report)
    return report
