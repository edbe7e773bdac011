"""The index follows the pool incrementally and always equals a rebuild from scratch."""

from __future__ import annotations

from agentworld import records
from agentworld.pool import Pool, Selection

from .conftest import small_step, write_trajectories


def _snapshot(pool: Pool) -> dict:
    idx = pool.index(refresh=False)
    db = idx.db
    return {
        "steps": sorted(
            tuple(r) for r in db.execute("SELECT id, trajectory, idx, source, line FROM steps")
        ),
        "ends": sorted(tuple(r) for r in db.execute("SELECT * FROM ends")),
        "trajectories": sorted(tuple(r) for r in db.execute("SELECT * FROM trajectories")),
        "labels": sorted(tuple(r) for r in db.execute("SELECT * FROM labels")),
        "tlabels": sorted(tuple(r) for r in db.execute("SELECT * FROM tlabels")),
    }


def test_journal_tail_then_sealed_shard_no_duplicates(pool: Pool) -> None:
    tid = records.new_id("tr")
    w = pool.writer(durability="strict")
    w.append(small_step(tid, 0))
    idx = pool.index()
    assert idx.stats()["steps"] == 1
    assert idx.stats()["journals"] == 1
    w.append(small_step(tid, 1))
    w.append(small_step(tid, 2))
    report = idx.refresh()
    assert report.records == 2  # only the new tail was read
    assert [r["idx"] for r in idx.steps(tid)] == [0, 1, 2]
    w.append(records.make_end(trajectory=tid, agent="a", status="done", steps=3, reward=0.5))
    w.close()  # sealed: the journal is gone, a shard holds the same records
    idx.refresh()
    rows = idx.steps(tid)
    assert [r["idx"] for r in rows] == [0, 1, 2]
    assert all(r["source"].startswith("objects/") for r in rows)
    assert idx.stats()["steps"] == 3 and idx.stats()["journals"] == 0
    assert idx.trajectory(tid)["status"] == "done"
    assert idx.count_trajectories(Selection(status=("done",))) == 1
    before = _snapshot(pool)
    idx.rebuild()
    assert _snapshot(pool) == before


def test_rebuild_equals_refresh_with_labels_and_compaction(pool: Pool) -> None:
    from agentworld.pool.maintenance import compact, gc

    ids = write_trajectories(pool, 3, 4)
    pool.index()
    more = write_trajectories(pool, 2, 2)
    pool.labels.set([f"trajectory:{ids[0]}"], {"quality": "good", "tags": ["x"]}, author="me")
    idx = pool.index()
    step = idx.steps(more[0])[0]["id"]
    pool.labels.set([f"step:{step}"], {"trainable": False}, author="me")
    compact(pool)
    gc(pool)
    idx.refresh()
    assert idx.count_trajectories() == 5
    assert idx.count_trajectories(Selection(tag="x")) == 1
    assert idx.count_trajectories(Selection(labelled=True)) == 2
    before = _snapshot(pool)
    idx.rebuild()
    assert _snapshot(pool) == before
    fresh = Pool.open(pool.root)
    fresh_idx = fresh.index()
    assert fresh_idx.count_trajectories() == 5


def test_label_changes_reach_the_index(pool: Pool) -> None:
    (tid,) = write_trajectories(pool, 1, 2)
    idx = pool.index()
    assert idx.count_trajectories(Selection(quality=("bad",))) == 0
    pool.labels.set([f"trajectory:{tid}"], {"quality": "bad", "reward": -1.0}, author="me")
    idx.refresh()
    assert idx.count_trajectories(Selection(quality=("bad",))) == 1
    assert idx.trajectory(tid)["effective_reward"] == -1.0
    pool.labels.set([f"trajectory:{tid}"], {"quality": None}, author="me", at=2e9)
    idx.refresh()
    assert idx.count_trajectories(Selection(quality=("bad",))) == 0


def test_a_label_file_replaced_by_one_of_the_same_size_reaches_the_index(pool: Pool) -> None:
    """Spec 9: the index follows changed label files. It compared sizes only, so a file
    replaced by another of the same size (git checkout of another branch's labels) kept
    the old labels in every listing."""
    import os

    (tid,) = write_trajectories(pool, 1, 1)
    target = f"trajectory:{tid}"
    pool.labels.set([target], {"note": "one"}, author="me", at=1.0)
    idx = pool.index()
    assert idx.labels_of([target])[target] == {"note": "one"}
    (path,) = pool.labels.files()
    st = path.stat()
    path.write_bytes(path.read_bytes().replace(b'"one"', b'"two"'))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert path.stat().st_size == st.st_size
    idx.refresh()
    assert idx.labels_of([target])[target] == {"note": "two"}


def test_deleted_index_is_rebuilt(pool: Pool) -> None:
    write_trajectories(pool, 2, 3)
    assert pool.index().count_trajectories() == 2
    pool.close()
    for f in pool.layout.cache.iterdir():
        f.unlink()
    assert Pool.open(pool.root).index().count_trajectories() == 2


def test_steps_of_many_trajectories_equals_steps_of_each(pool: Pool, monkeypatch) -> None:
    from agentworld.pool import index_queries

    monkeypatch.setattr(index_queries, "_IN_CHUNK", 3)  # several IN (...) chunks
    ids = write_trajectories(pool, 7, 2)
    idx = pool.index()
    got = idx.steps_of([*ids, "tr_none"])
    assert got == {t: idx.steps(t) for t in ids}  # no entry for a trajectory without steps
    assert idx.steps_of([]) == {}


def test_read_step_follows_a_row_whose_journal_was_sealed_since(pool: Pool) -> None:
    tid = records.new_id("tr")
    w = pool.writer(durability="strict")
    w.append(small_step(tid, 0))
    (row,) = pool.index().steps(tid)
    assert row["source"].startswith("journals/")
    assert pool.read_step(row)["request"]["messages"][0]["content"] == "q0"
    w.close()  # the journal is sealed into a shard and removed: the row is stale
    assert pool.read_step(row) == pool.get_step(row["id"])
    assert pool.read_step(row)["response"]["message"]["content"] == "a0"


def test_a_step_from_before_usage_counts_were_integers_is_indexed(pool: Pool) -> None:
    """Older pools may hold a usage count that is an object (the schema once let it be):
    the index takes the shard all the same, the count unknown, instead of failing it."""
    from agentworld.pool.shards import write_shard

    old = small_step("tr_old", 0)
    old["response"] = {**old["response"], "usage": {"prompt_tokens": 4, "completion_tokens": {}}}
    fine = small_step("tr_new", 0)
    write_shard(pool.layout, [records.dumps(old), records.encode(fine)])
    idx = pool.index()
    (row,) = idx.steps("tr_old")
    from_ids = len((old.get("tokens") or {}).get("completion_ids") or ()) or None
    assert row["prompt_tokens"] == 4 and row["completion_tokens"] == from_ids
    assert idx.count_trajectories() == 2


def test_records_the_index_cannot_take_leave_the_rest_of_their_shard_indexed(pool: Pool) -> None:
    """Written by hand or by an older build: a record that is not an object, one missing
    its id, one whose agent is an object. Each is left out; its shard's others are not."""
    from agentworld.pool.shards import write_shard

    no_id = small_step("tr_x", 1)
    del no_id["id"]
    odd_agent = {**small_step("tr_y", 0), "agent": {"name": "a"}}
    good = [records.encode(small_step("tr_ok", i)) for i in range(3)]
    lines = [good[0], b"[1, 2]", records.dumps(no_id), good[1], records.dumps(odd_agent), good[2]]
    write_shard(pool.layout, lines)
    idx = pool.index()
    assert [r["idx"] for r in idx.steps("tr_ok")] == [0, 1, 2]
    assert idx.steps("tr_x") == [] and idx.steps("tr_y") == []


def test_a_reversed_sort_reverses_ties_too(pool: Pool) -> None:
    """All trajectories with the same step count: `S` in `aw tui` flipped the arrow and
    left the list as it was."""
    write_trajectories(pool, 4, 2)
    idx = pool.index()
    up = [r["id"] for r in idx.trajectories(Selection(), sort="steps", descending=False)]
    down = [r["id"] for r in idx.trajectories(Selection(), sort="steps", descending=True)]
    assert len(up) == 4 and down == up[::-1]
