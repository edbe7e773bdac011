"""Shards whose hash matches but whose lines are not valid records: readers skip and name
the lines, merge refuses to spread them, compaction says what is wrong."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from agentworld import records
from agentworld.errors import CorruptDataError
from agentworld.pool import Pool
from agentworld.pool.diff import diff_pools
from agentworld.pool.journal import frame
from agentworld.pool.maintenance import compact
from agentworld.pool.merge import merge_pools
from agentworld.pool.reader import iter_records
from agentworld.pool.shards import write_shard

from .conftest import small_step

NOT_JSON = b"not json"
NO_FIELDS = records.dumps({"kind": "step", "schema": 1})


def _good_trajectory(tid: str) -> list[bytes]:
    end = records.make_end(trajectory=tid, agent="a", status="done", steps=1)
    return [records.encode(small_step(tid, 0)), records.encode(end)]


def _bad_shard(pool: Pool) -> Path:
    """A shard named by its true hash holding two bad lines around a good trajectory."""
    return write_shard(pool.layout, [NOT_JSON, *_good_trajectory("tr_b"), NO_FIELDS])


def _reader_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "agentworld.pool.reader"]


def test_readers_skip_bad_lines_and_name_them_once_per_shard(
    pool: Pool, caplog: pytest.LogCaptureFixture
) -> None:
    write_shard(pool.layout, _good_trajectory("tr_a"))
    bad = _bad_shard(pool)
    with caplog.at_level(logging.ERROR):
        trajectories = sorted(t.id for t in pool.iter_trajectories())
        assert trajectories == ["tr_a", "tr_b"]
    (message,) = _reader_errors(caplog)
    assert bad.name in message and "2 line(s)" in message
    assert "line 1: not JSON" in message
    assert len(list(pool.iter_records())) == 4  # the good lines of both shards
    with pytest.raises(CorruptDataError, match=r"line 1 is not a valid record: not JSON"):
        list(iter_records(pool.layout, strict=True))


def test_a_record_missing_fields_is_named_by_field(pool: Pool) -> None:
    bad = write_shard(pool.layout, [*_good_trajectory("tr_a"), NO_FIELDS])
    with pytest.raises(CorruptDataError) as err:
        list(iter_records(pool.layout, strict=True))
    assert err.value.path == str(bad)
    assert err.value.problem.startswith("line 3 is not a valid record: ")
    assert "required" in err.value.problem


def test_journal_lines_are_numbered_as_in_the_file(pool: Pool) -> None:
    journal = pool.layout.journals / "w-other-0000.journal"
    header = records.dumps({"journal": 2, "writer": "other", "created": 0.0})
    good = records.encode(small_step("tr_j", 0))
    journal.write_bytes(frame(header) + frame(good) + frame(NO_FIELDS))
    assert [r["trajectory"] for r in iter_records(pool.layout)] == ["tr_j"]
    with pytest.raises(CorruptDataError, match="line 3 is not a valid record"):
        list(iter_records(pool.layout, strict=True))


def test_a_record_of_another_schema_is_not_read_as_ours(pool: Pool) -> None:
    """Spec 3.1: readers refuse a record ``schema`` they do not know (a newer writer's
    fields may mean something else). Readers and the index filed it as a schema 1 record."""
    from agentworld.pool.fsck import fsck

    newer = records.dumps({**small_step("tr_new", 0), "schema": 2})
    shard = write_shard(pool.layout, [*_good_trajectory("tr_a"), newer])
    assert [r["trajectory"] for r in iter_records(pool.layout)] == ["tr_a", "tr_a"]
    with pytest.raises(CorruptDataError, match="line 3 is not a valid record: schema: unknown"):
        list(iter_records(pool.layout, strict=True))
    assert pool.index().trajectory("tr_new") is None
    assert pool.index().trajectory("tr_a") is not None
    (problem,) = fsck(pool).problems
    assert (problem.path, problem.line) == (str(shard.relative_to(pool.root)), 3)
    # A remote pool's rows object, made from the shard, files what the index files.
    from agentworld.pool.remote_rows import parse_rows, shard_rows

    rel = str(shard.relative_to(pool.root))
    count, steps, ends = parse_rows(shard_rows(shard, rel), rel)
    assert (count, len(steps), len(ends)) == (3, 1, 1)


def test_the_index_keeps_the_good_lines_of_a_shard_with_a_line_that_is_not_json(
    pool: Pool,
) -> None:
    _bad_shard(pool)
    stats = pool.index().stats()
    assert (stats["steps"], stats["trajectories"]) == (1, 1)  # as the reader sees it


def test_diff_reads_past_a_bad_shard(tmp_path: Path) -> None:
    a, b = Pool.create(tmp_path / "a"), Pool.create(tmp_path / "b")
    _bad_shard(b)
    d = diff_pools(a.root, b.root)
    assert d.added_trajectories == ["tr_b"] and d.added_steps == 1


def test_merge_refuses_a_shard_whose_lines_are_not_records(tmp_path: Path) -> None:
    a, b = Pool.create(tmp_path / "a"), Pool.create(tmp_path / "b")
    bad = _bad_shard(b)
    (refused,) = merge_pools(a.layout, b.root).shards_refused
    assert refused.startswith(f"{bad}: ")
    assert "line 1 is not a valid record: not JSON" in refused
    assert "not copied" in refused
    assert a.layout.shard_paths() == []
    assert not list(a.layout.tmp.iterdir())


def test_compact_says_which_line_is_wrong(pool: Pool, caplog: pytest.LogCaptureFixture) -> None:
    write_shard(pool.layout, _good_trajectory("tr_a"))
    write_shard(pool.layout, _good_trajectory("tr_c"))
    bad = write_shard(pool.layout, [NO_FIELDS])
    with caplog.at_level(logging.ERROR):
        report = compact(pool)
    assert report.skipped == [bad.name] and len(report.inputs) == 2
    (message,) = [r.getMessage() for r in caplog.records if "leaving" in r.getMessage()]
    assert f"leaving {bad.name} alone: line 1 is not a valid record: " in message
    assert "required" in message
