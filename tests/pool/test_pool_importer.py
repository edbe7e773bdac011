"""Importing JSONL: bad rows refused by line and field, nothing half-written, re-imports add nothing."""

from __future__ import annotations

import json

import orjson
import pytest
import zstandard

from agentworld import records
from agentworld.errors import PoolError
from agentworld.pool import Pool
from agentworld.pool.fsck import fsck
from agentworld.pool.importer import import_records

from .conftest import end_record, full_step


def _file(tmp_path, rows: list, *, zst: bool = False):
    data = b"".join((r if isinstance(r, bytes) else orjson.dumps(r)) + b"\n" for r in rows)
    path = tmp_path / ("in.jsonl.zst" if zst else "in.jsonl")
    path.write_bytes(zstandard.ZstdCompressor().compress(data) if zst else data)
    return path


@pytest.mark.parametrize("zst", [False, True])
def test_import_round_trips_and_is_idempotent(pool: Pool, tmp_path, zst: bool) -> None:
    tid = records.new_id("tr")
    recs = [full_step(tid, i) for i in range(3)] + [end_record(tid, 3)]
    path = _file(tmp_path, recs, zst=zst)
    report = import_records(pool, path)
    assert report.ok and (report.rows, report.written) == (4, 4)
    assert list(pool.iter_records()) == recs
    again = import_records(pool, path)
    assert (again.written, again.skipped_existing) == (0, 4)
    assert list(pool.iter_records()) == recs
    assert fsck(pool).ok
    json.dumps(again.to_dict())


def test_bad_rows_refused_with_line_and_field(pool: Pool, tmp_path) -> None:
    tid = records.new_id("tr")
    good = [full_step(tid, i) for i in range(3)]
    nan_reward = orjson.dumps({**full_step(tid, 9), "reward": 1.0}).replace(
        b'"reward":1.0', b'"reward":NaN'
    )
    rows = [
        good[0],
        b"{not json",
        {**full_step(tid, 5), "index": 2**63},
        good[1],
        {**full_step(tid, 6), "surprise": True},
        b'{"kind": "step", "agent": "\xff"}',
        nan_reward,
        good[1],  # duplicate within the file
        good[2],
    ]
    report = import_records(pool, _file(tmp_path, rows))
    assert not report.ok
    assert [(r.line, r.field) for r in report.refused] == [
        (2, ""),
        (3, "index"),
        (5, "surprise"),
        (6, ""),
        (7, ""),
    ]
    assert (report.written, report.duplicates_in_file) == (3, 1)
    assert [r["id"] for r in pool.iter_records()] == [g["id"] for g in good]


def test_unreadable_file_is_a_pool_error(pool: Pool, tmp_path) -> None:
    with pytest.raises(PoolError, match="cannot read"):
        import_records(pool, tmp_path / "missing.jsonl")
