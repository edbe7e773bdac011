"""`aw pool merge` of a pool that holds other records under this pool's ids: refused whole.

(A trajectory one pool holds as an `aw pool import` of the other's is already
here instead: tests/export/test_round_trips.py.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentworld.pool import Pool
from agentworld.pool.fsck import fsck

from .conftest import end_record, full_step, run_pool_command


def _write(pool: Pool, *recs: dict[str, Any]) -> None:
    with pool.writer() as w:
        for rec in recs:
            w.append(rec)


def _files(root: Path) -> dict[str, bytes]:
    """Every file of a pool but its index (a cache)."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and ".cache" not in p.relative_to(root).parts
    }


def test_two_records_under_one_id_stop_the_merge_before_anything_is_written(
    tmp_path: Path,
) -> None:
    """Two pools that recorded a different step and end under one trajectory's ids,
    neither an import of the other's: the merge copied the other's shard (and the rest of
    it, and its labels), after which `aw pool fsck` failed on each."""
    a, b = Pool.create(tmp_path / "a"), Pool.create(tmp_path / "b")
    _write(a, full_step("tr_1", 0, id="st_1"), end_record("tr_1", 1, id="en_1"))
    _write(
        b,
        full_step("tr_1", 0, id="st_1", reward=0.25),
        end_record("tr_1", 1, id="en_b"),
        full_step("tr_2", 0, id="st_2"),
        end_record("tr_2", 1, id="en_2"),
    )
    b.labels.set(["trajectory:tr_2"], {"quality": "good"}, author="bob")
    before = _files(a.root)
    res = run_pool_command(a, "merge", str(b.root))
    assert res.code == 4, res.output
    assert "2 records there clash with this pool's" in res.error
    assert "nothing was merged" in res.error
    (shard,) = (str(p.relative_to(a.root)) for p in a.layout.shard_paths())
    assert f"st_1: other content than at {shard}:1 here" in res.error
    (theirs,) = (str(p.relative_to(b.root)) for p in b.layout.shard_paths())
    assert (
        f"tr_1: a second end record en_b ({theirs}:2 there; end record en_1 at {shard}:2 here)"
        in res.error
    )
    assert _files(a.root) == before
    assert fsck(a).ok


def test_more_steps_than_an_end_record_counts_is_a_clash_a_continuation_is_not(
    tmp_path: Path,
) -> None:
    """A step there, new here, of a trajectory this pool ended with fewer: merged, fsck
    failed (readers drop the steps past the end). A trajectory left open here and
    finished there still merges."""
    a, b, c = (Pool.create(tmp_path / n) for n in "abc")
    first = full_step("tr_open", 0, id="st_o0")
    _write(a, first, full_step("tr_done", 0, id="st_d0"), end_record("tr_done", 1, id="en_d"))
    _write(b, first, full_step("tr_open", 1, id="st_o1"), end_record("tr_open", 2, id="en_o"))
    res = run_pool_command(a, "merge", str(b.root))
    assert res.code == 0, res.output
    assert [len(t.steps) for t in a.iter_trajectories()] == [1, 2]
    _write(c, full_step("tr_done", 1, id="st_d1"))
    before = _files(a.root)
    res = run_pool_command(a, "merge", str(c.root))
    assert res.code == 4, res.output
    assert "tr_done: 2 steps with theirs (1 new), but its end record counts 1" in res.error
    assert _files(a.root) == before
    assert fsck(a).ok
