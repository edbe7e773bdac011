"""`aw pool import -f records`: JSONL records (plain or .zst) into a pool, all or nothing by default.

The file is read twice: first every row is checked (a bad one is named by
file, line and field), then, only when none is bad or the caller accepts
skipping them, the good rows are written. Rows whose id the pool already
holds are skipped, and so is an end record for a trajectory that already has
one whatever its id, so importing the same data twice (even in another
format first) adds nothing the second time.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson
import zstandard

from agentworld import records
from agentworld.errors import PoolError, RecordError
from agentworld.plural import plural

_BATCH = 1000
MAX_REFUSED_KEPT = 1000  # refused rows listed in full; beyond this only counted
MAX_REFUSED_SHOWN = 20  # refused rows named in the error of an all-or-nothing import


def refusal_error(located: list[str], count: int) -> RecordError:
    """The one error of an import that refuses all: how many rows were bad, the first by file:line.

    Shared by every import format, so they all fail the same way.
    """
    shown = located[:MAX_REFUSED_SHOWN]
    more = count - len(shown)
    return RecordError(
        "",
        f"{count} bad row(s), nothing imported (--skip-bad imports the rest):\n  "
        + "\n  ".join(shown)
        + (f"\n  … and {more} more" if more else ""),
    )


@dataclass
class Refused:
    """One row not imported: its 1-based line, the field at fault ('' for the row), why."""

    line: int
    field: str
    problem: str

    def located(self, path: str) -> str:
        """``path:line: field: problem``, the way every import names a bad row."""
        where = f"{path}:{self.line}"
        return (
            f"{where}: {self.field}: {self.problem}" if self.field else f"{where}: {self.problem}"
        )


@dataclass
class ImportReport:
    """What an import read, wrote (records, and of which kinds and trajectories) and refused."""

    path: str
    rows: int = 0
    written: int = 0
    steps: int = 0
    ends: int = 0
    trajectories: int = 0
    skipped_existing: int = 0
    duplicates_in_file: int = 0
    refused_count: int = 0
    refused: list[Refused] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.refused_count == 0

    def refuse(self, line: int, fld: str, problem: str) -> None:
        self.refused_count += 1
        if len(self.refused) < MAX_REFUSED_KEPT:
            self.refused.append(Refused(line, fld, problem))

    def refusals(self) -> list[str]:
        """The refused rows kept, each as ``path:line: field: problem``."""
        return [r.located(self.path) for r in self.refused]

    def summary(self) -> str:
        """One line for people: what was written, what was already there, what was refused."""
        repeated = (
            f", {self.duplicates_in_file} repeated in the file" if self.duplicates_in_file else ""
        )
        return (
            f"imported {plural(self.written, 'record')} of "
            f"{plural(self.trajectories, 'trajectory')} ({plural(self.steps, 'step')}, "
            f"{plural(self.ends, 'end record')}), {self.skipped_existing} already present"
            f"{repeated}, {plural(self.refused_count, 'bad row')} refused"
        )

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def _lines(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as raw:
        compressed = raw.read(4) == ZSTD_MAGIC  # whatever its name says (a shard copied as .jsonl)
        raw.seek(0)
        if compressed:
            # Imports may come from `zstd --long=31`; allow its window.
            dctx = zstandard.ZstdDecompressor(max_window_size=2**31)
            reader = dctx.stream_reader(raw, read_across_frames=True)
            yield from io.BufferedReader(reader, buffer_size=1 << 20)  # type: ignore[arg-type]
        else:
            yield from raw


def _checked_rows(src: Path, report: ImportReport) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each good row of the file as (line, record); each bad one is refused in ``report``."""
    for n, line in enumerate(_lines(src), 1):
        if not line.strip():
            continue
        report.rows += 1
        try:
            rec = records.loads(line)
        except orjson.JSONDecodeError as exc:
            report.refuse(n, "", f"not JSON: {exc}")
            continue
        try:
            records.encode(rec)  # all the writer checks: fields, JSON limits, size
        except RecordError as exc:
            report.refuse(n, exc.field, exc.problem)
            continue
        yield n, rec


def _existing(pool: Any, ids: list[str]) -> set[str]:
    """Which of these record ids the pool already holds (steps or ends)."""
    db = pool.index(refresh=False).db
    return _found(db, "SELECT id FROM steps WHERE id IN ({})", ids) | _found(
        db, "SELECT id FROM ends WHERE id IN ({})", ids
    )


def _ended(pool: Any, trajectories: list[str]) -> set[str]:
    """Which of these trajectories already have an end record in the pool, whatever its id."""
    db = pool.index(refresh=False).db
    return _found(db, "SELECT trajectory FROM ends WHERE trajectory IN ({})", trajectories)


def _found(db: Any, sql: str, values: list[str]) -> set[str]:
    """The first column of ``sql`` (an ``IN ({})`` query) over ``values``, 500 at a time
    (SQLite's limit on bound parameters)."""
    out: set[str] = set()
    for i in range(0, len(values), 500):
        chunk = values[i : i + 500]
        out.update(r[0] for r in db.execute(sql.format(",".join("?" * len(chunk))), chunk))
    return out


def _write_new(
    pool: Any,
    rows: Iterator[tuple[int, dict[str, Any]]],
    report: ImportReport,
    progress: Callable[[int], None] | None,
) -> None:
    """Append the rows the pool lacks: a new id, and never a second end for a trajectory.

    A second end record would make the pool corrupt (fsck refuses it), and one
    arrives whenever the same trajectory came in before under other ids (an
    ATIF import of it, say): it counts as already present.
    """
    pool.index()  # bring the index up to date once: it answers "is this stored?"
    seen: set[str] = set()
    ended: set[str] = set()  # trajectories this import gave an end record
    touched: set[str] = set()
    batch: list[dict[str, Any]] = []

    def flush(writer: Any) -> None:
        stored = _existing(pool, [rec["id"] for rec in batch])
        stored_ends = _ended(pool, [rec["trajectory"] for rec in batch if rec["kind"] == "end"])
        for rec in batch:
            tid = rec["trajectory"]
            is_end = rec["kind"] == "end"
            if rec["id"] in stored or (is_end and (tid in stored_ends or tid in ended)):
                report.skipped_existing += 1
                continue
            writer.append(rec)  # checked in the first pass: written whole
            report.written += 1
            touched.add(tid)
            if is_end:
                report.ends += 1
                ended.add(tid)
            else:
                report.steps += 1
        batch.clear()

    with pool.writer(name="import") as writer:
        for n, rec in rows:
            if rec["id"] in seen:
                report.duplicates_in_file += 1
                continue
            seen.add(rec["id"])
            batch.append(rec)
            if len(batch) >= _BATCH:
                flush(writer)
                if progress:
                    progress(n)
        flush(writer)
    report.trajectories = len(touched)


def import_records(
    pool: Any,
    path: str | os.PathLike[str],
    *,
    skip_bad: bool = False,
    progress: Callable[[int], None] | None = None,
) -> ImportReport:
    """Import a JSONL file of AgentWorld records (``.zst`` compressed or plain) into ``pool``.

    Any bad row raises RecordError naming the bad rows and nothing is written,
    unless ``skip_bad``: then the good rows are written and the report lists
    the bad. PoolError when the file itself cannot be read.
    """
    src = Path(path)
    report = ImportReport(path=str(src))
    try:
        for _ in _checked_rows(src, report):
            pass
        if report.refused_count and not skip_bad:
            raise refusal_error(report.refusals(), report.refused_count)
        # The first pass has refused the bad rows; this one only skips them.
        _write_new(pool, _checked_rows(src, ImportReport(path=str(src))), report, progress)
    except (OSError, zstandard.ZstdError) as exc:
        raise PoolError(f"{src}: cannot read: {exc}") from None
    return report
