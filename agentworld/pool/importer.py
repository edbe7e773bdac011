"""`aw pool import`: bring JSONL records (plain or .zst) into a pool, refusing bad rows by line number.

Each row is validated on its own: a bad one is listed with its line and
field and nothing of it is written; rows whose id the pool already holds are
skipped, so importing the same file twice adds nothing the second time.
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

_BATCH = 1000
MAX_REFUSED_KEPT = 1000  # refused rows listed in full; beyond this only counted


@dataclass
class Refused:
    """One row not imported: its 1-based line, the field at fault ('' for the row), why."""

    line: int
    field: str
    problem: str


@dataclass
class ImportReport:
    """What an import read, wrote and refused."""

    path: str
    rows: int = 0
    written: int = 0
    skipped_existing: int = 0
    duplicates_in_file: int = 0
    refused_count: int = 0
    refused: list[Refused] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.refused_count == 0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def _lines(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as raw:
        if path.name.endswith(".zst"):
            # Imports may come from `zstd --long=31`; allow its window.
            dctx = zstandard.ZstdDecompressor(max_window_size=2**31)
            reader = dctx.stream_reader(raw, read_across_frames=True)
            yield from io.BufferedReader(reader, buffer_size=1 << 20)  # type: ignore[arg-type]
        else:
            yield from raw


def _existing(pool: Any, ids: list[str]) -> set[str]:
    db = pool.index(refresh=False).db
    out: set[str] = set()
    for i in range(0, len(ids), 500):
        chunk = ids[i : i + 500]
        marks = ",".join("?" * len(chunk))
        out.update(r[0] for r in db.execute(f"SELECT id FROM steps WHERE id IN ({marks})", chunk))
        out.update(r[0] for r in db.execute(f"SELECT id FROM ends WHERE id IN ({marks})", chunk))
    return out


def import_records(
    pool: Any,
    path: str | os.PathLike[str],
    *,
    progress: Callable[[int], None] | None = None,
) -> ImportReport:
    """Import a JSONL file of AgentWorld records (``.zst`` compressed or plain) into ``pool``.

    Returns the report; raises PoolError only when the file itself cannot be read.
    """
    src = Path(path)
    report = ImportReport(path=str(src))

    def refuse(line: int, fld: str, problem: str) -> None:
        report.refused_count += 1
        if len(report.refused) < MAX_REFUSED_KEPT:
            report.refused.append(Refused(line, fld, problem))

    pool.index()  # bring the index up to date once: it answers "is this id stored?"
    seen: set[str] = set()
    writer = pool.writer(name="import")
    batch: list[tuple[int, dict[str, Any]]] = []

    def flush() -> None:
        existing = _existing(pool, [rec["id"] for _, rec in batch])
        for n, rec in batch:
            if rec["id"] in existing:
                report.skipped_existing += 1
                continue
            try:
                writer.append(rec)  # validates again and encodes: refused whole or written whole
            except RecordError as exc:
                refuse(n, exc.field, exc.problem)
                seen.discard(rec["id"])
                continue
            report.written += 1
        batch.clear()

    try:
        for n, line in enumerate(_lines(src), 1):
            if not line.strip():
                continue
            report.rows += 1
            try:
                rec = records.loads(line)
            except orjson.JSONDecodeError as exc:
                refuse(n, "", f"not JSON: {exc}")
                continue
            try:
                records.validate(rec)
            except RecordError as exc:
                refuse(n, exc.field, exc.problem)
                continue
            if rec["id"] in seen:
                report.duplicates_in_file += 1
                continue
            seen.add(rec["id"])
            batch.append((n, rec))
            if len(batch) >= _BATCH:
                flush()
                if progress:
                    progress(n)
        flush()
    except (OSError, zstandard.ZstdError) as exc:
        raise PoolError(f"{src}: cannot read: {exc}") from None
    finally:
        writer.close()
    return report
