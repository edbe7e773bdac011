"""fsck finds and names damaged files; one damaged shard never hides the others."""

from __future__ import annotations

import json
import sqlite3

import orjson
import pytest
from typer.testing import CliRunner

from agentworld import records
from agentworld.cli import app
from agentworld.errors import CorruptDataError
from agentworld.pool import Pool
from agentworld.pool.fsck import fsck
from agentworld.pool.reader import iter_records
from agentworld.pool.shards import iter_shard_lines, write_shard

from .conftest import small_step, write_trajectories


def _shards(pool: Pool, n: int) -> list:
    for _ in range(n):
        write_trajectories(pool, 2, 3)
    paths = pool.layout.shard_paths()
    assert len(paths) == n
    return paths


def _rel(pool: Pool, path) -> str:
    return str(path.relative_to(pool.root))


def test_clean_pool_is_ok(pool: Pool) -> None:
    _shards(pool, 2)
    pool.labels.set(["trajectory:tr_x"], {"quality": "good"}, author="me")
    pool.index()
    report = fsck(pool)
    assert report.ok and report.index_checked
    assert (report.shards, report.records, report.label_files) == (2, 16, 1)
    json.dumps(report.to_dict())  # JSON-serialisable for --json


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_damaged_shard_is_named_and_others_still_read(pool: Pool, damage: str) -> None:
    bad, good = _shards(pool, 2)
    good_ids = {orjson.loads(x)["id"] for x in iter_shard_lines(good)}
    data = bytearray(bad.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0x01
    else:
        data = data[: len(data) - 7]
    bad.write_bytes(bytes(data))

    report = fsck(pool)
    assert not report.ok
    named = {p.path for p in report.problems}
    assert named == {_rel(pool, bad)}
    assert any("does not match its name" in p.problem for p in report.problems)
    if damage == "truncate":
        assert any("truncated" in p.problem for p in report.problems)

    # Everything else stays readable: streaming, the index, single fetches.
    assert {r["id"] for r in pool.iter_records()} == good_ids
    idx = pool.index()
    assert idx.stats()["steps"] == 6
    some = next(iter(good_ids - {r["id"] for r in pool.iter_records() if r["kind"] == "end"}))
    assert pool.get_step(some)["id"] == some
    with pytest.raises(CorruptDataError):
        list(iter_records(pool.layout, strict=True))


def test_invalid_records_named_with_line_numbers(pool: Pool) -> None:
    good = records.encode(small_step("tr_a", 0))
    bad_json = b'{"kind": "step", '
    bad_field = records.dumps({**small_step("tr_a", 1), "index": -5})
    path = write_shard(pool.layout, [good, bad_json, bad_field])
    report = fsck(pool)
    problems = {(p.line, p.problem.split(":")[0]) for p in report.problems}
    assert (2, "not JSON") in problems
    assert any(p.line == 3 and "index" in p.problem for p in report.problems)
    assert all(p.path == _rel(pool, path) for p in report.problems)


def test_duplicates_and_steps_after_end(pool: Pool) -> None:
    s0, s1 = small_step("tr_a", 0), small_step("tr_a", 1)
    end = records.make_end(trajectory="tr_a", agent="a", status="done", steps=1)
    first = write_shard(pool.layout, [records.encode(s0), records.encode(end), records.encode(s1)])
    # Not a copy: the same id on a record that differs is a problem (a copy is a warning).
    other = {**s0, "policy_version": s0["policy_version"] + 1}
    second = write_shard(
        pool.layout, [records.encode(other), records.encode(small_step("tr_b", 0))]
    )
    report = fsck(pool)
    texts = [(p.path, p.line, p.problem) for p in report.problems]
    assert any(
        p == _rel(pool, first) and ln == 3 and "after its trajectory's end" in t
        for p, ln, t in texts
    )
    assert any("2 steps but its end record says 1" in t for _, _, t in texts)
    dup = [t for p, _, t in texts if "duplicate record id" in t]
    assert len(dup) == 1 and s0["id"] in dup[0]
    # The reader keeps one copy of the duplicate and drops the late step.
    assert [r["id"] for r in pool.iter_records()].count(s0["id"]) == 1
    (traj,) = [t for t in pool.iter_trajectories() if t.id == "tr_a"]
    assert len(traj.steps) == 1
    assert second.exists()


def test_records_copied_into_two_live_shards_are_one_warning_not_damage(pool: Pool) -> None:
    """Two clones that each compacted overlapping shards leave, once merged, two live
    shards holding the same records byte for byte: fsck failed with a line per record
    and no word on why or what to do, though readers keep one copy and lose nothing."""
    recs = [records.encode(small_step("tr_a", i)) for i in range(3)]
    first = write_shard(pool.layout, recs)
    second = write_shard(pool.layout, [*recs, records.encode(small_step("tr_b", 0))])
    report = fsck(pool)
    assert report.ok, report.problems
    (warning,) = report.warnings
    a, b = sorted([_rel(pool, first), _rel(pool, second)])
    assert warning.path == b and warning.line is None
    assert warning.problem.startswith(f"3 records are also in {a}, byte for byte")
    assert "`aw pool compact --small-mb 16`" in warning.problem


def test_bad_label_lines_named(pool: Pool) -> None:
    pool.labels.set(["step:st_1"], {"trainable": False}, author="me")
    (path,) = pool.labels.files()
    with open(path, "ab") as f:
        f.write(
            b'{"target": "step:st_2", "author": "me", "id": "x", "time": 1, "set": {"colour": 1}}\n'
        )
        f.write(b"not json\n")
        f.write(b'{"target": "nope", "author": "me", "id": "y", "time": 1, "set": {}}\n')
        f.write(b'{"target": "step:st_3", "author": "me"')  # torn append
    report = fsck(pool)
    lines = sorted(p.line for p in report.problems)
    assert lines == [2, 3, 4]
    assert all(p.path.startswith("labels/me/") for p in report.problems)
    (torn,) = report.warnings  # a crashed append, which readers ignore: not a problem
    assert torn.line == 5 and "torn append" in torn.problem


def test_a_torn_label_append_alone_is_a_warning_and_fsck_passes(pool: Pool) -> None:
    """After a crash mid-append, `fsck && train` stopped (exit 6) on what readers ignore."""
    pool.labels.set(["step:st_1"], {"trainable": False}, author="me")
    (path,) = pool.labels.files()
    with open(path, "ab") as f:
        f.write(b'{"author":"me","id":"lb_x')
    report = fsck(pool)
    assert report.ok and report.to_dict()["ok"] is True
    assert [(w.path, w.line) for w in report.warnings] == [(f"labels/me/{path.name}", 2)]
    res = CliRunner().invoke(app, ["pool", "fsck", "--pool", str(pool.root)])
    assert res.exit_code == 0, res.output
    assert f"labels/me/{path.name}:2: warning: last line has no newline" in res.stdout
    assert res.stderr.strip().endswith(": ok, 1 warning(s)")


def test_superseded_line_without_replacement_reported(pool: Pool) -> None:
    pool.layout.superseded.write_text("onlyone.jsonl.zst\n")
    report = fsck(pool)
    assert [(p.path, p.line) for p in report.problems] == [("superseded.txt", 1)]


def test_index_against_shards(pool: Pool) -> None:
    _shards(pool, 1)
    pool.index()
    pool.close()
    db = sqlite3.connect(pool.layout.cache / "index.sqlite")
    row = db.execute("SELECT id, source FROM steps ORDER BY id LIMIT 1").fetchone()
    db.execute("UPDATE steps SET line = line + 1 WHERE id = ?", (row[0],))
    db.execute("DELETE FROM steps WHERE id = (SELECT id FROM steps ORDER BY id DESC LIMIT 1)")
    db.execute("UPDATE sources SET records = 99")
    db.commit()
    db.close()
    report = fsck(pool)
    texts = " | ".join(p.problem for p in report.problems)
    assert "holds 99 records, it holds 8" in texts
    assert f"row {row[0]} points at" in texts
    assert "1 records of" in texts and "missing" in texts
    assert all(p.path == ".cache/index.sqlite" for p in report.problems)
    # A rebuild makes it right again.
    pool.index().rebuild()
    assert fsck(pool).ok


def test_stale_index_is_not_a_problem(pool: Pool) -> None:
    from agentworld.pool.maintenance import compact

    _shards(pool, 3)
    pool.index()
    compact(pool)
    report = fsck(pool)
    assert report.ok and report.index_stale
    pool.index()
    assert not fsck(pool).index_stale
