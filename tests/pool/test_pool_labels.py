"""Labels: last writer wins per field, independent of file order; None clears; steps over trajectories."""

from __future__ import annotations

import pytest

from agentworld import records
from agentworld.errors import CorruptDataError, RecordError
from agentworld.pool import Pool

from .conftest import small_step


def _eff(pool: Pool, target: str) -> dict:
    return {f: e.value for f, e in pool.labels.effective().get(target, {}).items()}


def test_later_time_wins_per_field(pool: Pool) -> None:
    t = "trajectory:tr_1"
    pool.labels.set([t], {"quality": "good", "note": "n1"}, author="ann", at=100.0)
    pool.labels.set([t], {"quality": "bad"}, author="bob", at=200.0)
    pool.labels.set([t], {"note": "old"}, author="bob", at=50.0)  # written last, but older
    assert _eff(pool, t) == {"quality": "bad", "note": "n1"}
    entry = pool.labels.effective()[t]["quality"]
    assert (entry.author, entry.time) == ("bob", 200.0)


def test_equal_times_break_ties_by_author_then_id(pool: Pool) -> None:
    t = "trajectory:tr_1"
    pool.labels.set([t], {"quality": "good"}, author="zed", at=100.0)
    pool.labels.set([t], {"quality": "bad"}, author="amy", at=100.0)
    assert _eff(pool, t) == {"quality": "good"}  # "zed" > "amy": the same answer in every clone


def test_none_clears_a_field(pool: Pool) -> None:
    t = "trajectory:tr_1"
    pool.labels.set([t], {"trainable": False, "tags": ["b", "a", "a"]}, author="me", at=1.0)
    assert _eff(pool, t) == {"trainable": False, "tags": ["a", "b"]}
    pool.labels.set([t], {"trainable": None}, author="me", at=2.0)
    assert _eff(pool, t) == {"tags": ["a", "b"]}
    pool.labels.set([t], {"trainable": True}, author="other", at=1.5)  # older than the clear
    assert _eff(pool, t) == {"tags": ["a", "b"]}


def test_step_labels_win_over_trajectory_labels(pool: Pool) -> None:
    tid = records.new_id("tr")
    steps = [small_step(tid, i) for i in range(2)]
    with pool.writer() as w:
        for s in steps:
            w.append(s)
        w.append(records.make_end(trajectory=tid, agent="a", status="done", steps=2))
    pool.labels.set([f"trajectory:{tid}"], {"trainable": False, "quality": "bad"}, author="me")
    pool.labels.set([f"step:{steps[1]['id']}"], {"trainable": True}, author="me")
    traj = pool.get_trajectory(tid)
    assert traj.labels == {"trainable": False, "quality": "bad"}
    assert traj.steps[0]["_labels"] == {"trainable": False, "quality": "bad"}
    assert traj.steps[1]["_labels"] == {"trainable": True, "quality": "bad"}
    (streamed,) = pool.iter_trajectories()
    assert [s["_labels"] for s in streamed.steps] == [s["_labels"] for s in traj.steps]


def test_order_of_files_does_not_matter(pool: Pool, tmp_path) -> None:
    """A union merge of two clones (lines in any order) gives the same winners."""
    t = "trajectory:tr_1"
    pool.labels.set([t], {"quality": "good"}, author="a", at=10.0)
    pool.labels.set([t], {"quality": "bad"}, author="b", at=20.0)
    before = _eff(pool, t)
    for f in pool.labels.files():
        lines = f.read_bytes().splitlines(keepends=True)
        f.write_bytes(b"".join(reversed(lines)))
    assert _eff(pool, t) == before == {"quality": "bad"}


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"quality": "great"}, "labels.quality"),
        ({"trainable": "no"}, "labels.trainable"),
        ({"tags": [""]}, "labels.tags"),
        ({"reward": float("nan")}, "labels.reward"),
        ({"colour": None}, "labels.colour"),
        ({"colour": "red"}, "labels.colour"),
    ],
)
def test_bad_labels_refused(pool: Pool, fields: dict, field: str) -> None:
    with pytest.raises(RecordError) as info:
        pool.labels.set(["step:st_1"], fields, author="me")
    assert info.value.field == field
    assert pool.labels.files() == []


def test_bad_target_refused(pool: Pool) -> None:
    with pytest.raises(RecordError, match="target"):
        pool.labels.set(["st_1"], {"quality": "good"}, author="me")


def test_torn_label_line_is_ignored_then_cut(pool: Pool) -> None:
    pool.labels.set(["step:st_1"], {"quality": "good"}, author="me", at=1.0)
    (path,) = pool.labels.files()
    whole = path.read_bytes()
    with open(path, "ab") as f:
        f.write(b'{"author": "me", "id": "lb_x", "set": {"quality": "ba')
    assert _eff(pool, "step:st_1") == {"quality": "good"}
    pool.labels.set(["step:st_1"], {"quality": "unsure"}, author="me", at=2.0)
    assert _eff(pool, "step:st_1") == {"quality": "unsure"}
    assert path.read_bytes().startswith(whole) and b"lb_x" not in path.read_bytes()


def test_bad_complete_label_line_is_refused(pool: Pool) -> None:
    pool.labels.set(["step:st_1"], {"quality": "good"}, author="me", at=1.0)
    (path,) = pool.labels.files()
    with open(path, "ab") as f:
        f.write(b"garbage\n")
    with pytest.raises(CorruptDataError, match=":2"):
        pool.labels.effective()


def test_a_torn_line_longer_than_a_read_is_cut_before_the_next_append(pool: Pool) -> None:
    """The cut looked at the last MiB only: a longer torn line stayed, the next label fused
    with it into a line that does not parse, and every reader refused the file."""
    pool.labels.set(["step:st_1"], {"quality": "good"}, author="me", at=1.0)
    (path,) = pool.labels.files()
    whole = path.read_bytes()
    with open(path, "ab") as f:
        f.write(b'{"author":"me","id":"lb_x","set":{"note":"' + b"n" * (3 << 20))
    pool.labels.set(["step:st_1"], {"quality": "bad"}, author="me", at=2.0)
    assert _eff(pool, "step:st_1") == {"quality": "bad"}
    assert path.read_bytes().startswith(whole) and b"lb_x" not in path.read_bytes()


def test_merge_appends_a_line_that_is_torn_here(pool: Pool, tmp_path) -> None:
    """A label line whose append died here before its newline, and which the other pool holds
    whole, counted as present: the merge added nothing and its own append then cut the line."""
    from agentworld.pool.merge import merge_pools

    other = Pool.create(tmp_path / "other")
    other.labels.set(["trajectory:tr_1"], {"quality": "good"}, author="ann", at=1.0)
    (src,) = other.labels.files()
    dst = pool.layout.labels / "ann" / src.name
    dst.parent.mkdir(parents=True)
    dst.write_bytes(src.read_bytes()[:-1])  # the same line, without its newline
    assert _eff(pool, "trajectory:tr_1") == {}
    assert merge_pools(pool.layout, other.root).label_lines_added == 1
    assert _eff(pool, "trajectory:tr_1") == {"quality": "good"}
    assert dst.read_bytes() == src.read_bytes()


def test_a_snapshot_reads_the_lines_a_full_read_does(pool: Pool) -> None:
    """JSON may hold a carriage return between tokens; the snapshot read (effective(upto=))
    split lines at it too and refused a line the full read takes."""
    path = pool.layout.labels / "ann" / "2026-01-01.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(
        b'{"author":"ann","id":"lb_1",\r"set":{"quality":"good"},"target":"step:st_1","time":1.0}\n'
    )
    full = _eff(pool, "step:st_1")
    snap = pool.labels.effective(upto=pool.labels.snapshot())["step:st_1"]
    assert full == {f: e.value for f, e in snap.items()} == {"quality": "good"}
