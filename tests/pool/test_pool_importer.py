"""Importing JSONL: bad rows refused by line and field, all or nothing, re-imports add nothing."""

from __future__ import annotations

import json

import orjson
import pytest
import zstandard

from agentworld import records
from agentworld.errors import PoolError, RecordError
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
    report = import_records(pool, _file(tmp_path, rows), skip_bad=True)
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
    assert report.refusals()[1].startswith(f"{tmp_path / 'in.jsonl'}:3: index: integer ")


def test_a_bad_row_refuses_the_whole_file_unless_skip_bad(pool: Pool, tmp_path) -> None:
    tid = records.new_id("tr")
    rows = [full_step(tid, 0), full_step(tid, 1), b"not json", {"kind": "step"}]
    path = _file(tmp_path, rows)
    with pytest.raises(RecordError) as exc:
        import_records(pool, path)
    message = str(exc.value)
    assert message.startswith("2 bad row(s), nothing imported (--skip-bad imports the rest)")
    assert f"{path}:3: not JSON" in message and f"{path}:4: " in message
    assert list(pool.iter_records()) == []
    report = import_records(pool, path, skip_bad=True)
    assert (report.written, report.steps, report.ends, report.trajectories) == (2, 2, 0, 1)
    assert report.summary() == (
        "imported 2 records of 1 trajectory (2 steps, 0 end records), "
        "0 already present, 2 bad rows refused"
    )


def test_no_second_end_record_for_a_trajectory_whatever_its_id(pool: Pool, tmp_path) -> None:
    # The pool holds the trajectory already, its end under another id (as an ATIF import
    # of it leaves it); the file ends it again, twice.
    tid = records.new_id("tr")
    steps = [full_step(tid, i) for i in range(2)]
    with pool.writer() as w:
        for rec in [*steps, end_record(tid, 2)]:
            w.append(rec)
    other = records.new_id("tr")
    rows = [*steps, end_record(tid, 2), full_step(other, 0), end_record(other, 1),
            end_record(other, 1, reward=0.0)]  # fmt: skip
    report = import_records(pool, _file(tmp_path, rows))
    assert (report.written, report.steps, report.ends) == (2, 1, 1)
    assert report.skipped_existing == 4
    assert fsck(pool).ok
    assert sum(r["kind"] == "end" for r in pool.iter_records()) == 2


def test_unreadable_file_is_a_pool_error(pool: Pool, tmp_path) -> None:
    with pytest.raises(PoolError, match="cannot read"):
        import_records(pool, tmp_path / "missing.jsonl")
