"""The index follows live journals incrementally and re-points rows when journals are sealed."""

from __future__ import annotations

import os

from agentworld import records
from agentworld.pool import Pool, Selection
from tests.synth import conversation_step

from .conftest import close_keeping_sealed_journal


def test_index_tails_live_journal_then_follows_seal(pool: Pool) -> None:
    w = pool.writer()
    for i in range(3):
        w.append(conversation_step("tr_a", i))
    w.flush()
    idx = pool.index()
    assert idx.count_trajectories() == 1
    assert [s["idx"] for s in idx.steps("tr_a")] == [0, 1, 2]
    assert idx.trajectory("tr_a")["status"] == "open"
    src = {r["source"] for r in idx.steps("tr_a")}
    assert all(s.startswith("journals/") for s in src)

    w.append(conversation_step("tr_a", 3))
    w.append(records.make_end(trajectory="tr_a", agent="math", status="done", steps=4, reward=1.0))
    w.flush()
    report = idx.refresh()
    assert report.records == 2  # only the new tail was read
    assert idx.trajectory("tr_a")["status"] == "done"
    assert idx.trajectory("tr_a")["n_steps"] == 4

    w.close()  # seals the journal into a shard
    idx.refresh()
    rows = idx.steps("tr_a")
    assert [s["idx"] for s in rows] == [0, 1, 2, 3]
    assert all(r["source"].startswith("objects/") for r in rows)
    assert idx.stats()["steps"] == 4
    t = pool.get_trajectory("tr_a")
    assert [s["index"] for s in t.steps] == [0, 1, 2, 3] and t.end["reward"] == 1.0


def test_labels_filter_and_override_reward(pool: Pool) -> None:
    with pool.writer() as w:
        for t in ("tr_x", "tr_y"):
            w.append(conversation_step(t, 0))
            w.append(
                records.make_end(trajectory=t, agent="math", status="done", steps=1, reward=0.0)
            )
    pool.labels.set(["trajectory:tr_x"], {"reward": 2.5, "quality": "good"}, author="ann")
    idx = pool.index()
    assert [t["id"] for t in idx.trajectories(Selection(min_reward=1.0))] == ["tr_x"]
    assert idx.trajectory("tr_x")["effective_reward"] == 2.5
    streamed = {t.id: t for t in pool.iter_trajectories(Selection(quality=("good",)))}
    assert list(streamed) == ["tr_x"] and streamed["tr_x"].reward == 2.5
    pool.labels.set(["trajectory:tr_x"], {"reward": None}, author="ann")
    idx.refresh()
    assert idx.trajectory("tr_x")["effective_reward"] == 0.0


def test_get_trajectory_sees_new_labels_without_full_refresh(pool: Pool) -> None:
    with pool.writer() as w:
        w.append(conversation_step("tr_l", 0))
    assert pool.get_trajectory("tr_l").labels == {}
    pool.labels.set(["trajectory:tr_l"], {"quality": "bad"}, author="ann")
    assert pool.get_trajectory("tr_l").labels == {"quality": "bad"}


def test_trajectory_ended_before_any_step_is_listed(pool: Pool) -> None:
    with pool.writer() as w:
        w.append(
            records.make_end(
                trajectory="tr_crash",
                agent="cli",
                status="failed",
                steps=0,
                dataset="arith",
                group="g1",
                task="t0",
                error={"type": "exit", "message": "exit status 2"},
            )
        )
    idx = pool.index()
    row = idx.trajectory("tr_crash")
    assert row is not None
    assert (row["agent"], row["dataset"], row["group"], row["status"], row["n_steps"]) == (
        "cli",
        "arith",
        "g1",
        "failed",
        0,
    )
    assert idx.count_trajectories(Selection(status=("failed",))) == 1
    assert idx.stats()["trajectories_by_status"] == {"failed": 1}


def test_refresh_beside_a_sealed_journal_keeps_rows_on_its_shard(pool: Pool) -> None:
    """Between its sealed trailer and its removal, a journal and its shard hold the same
    records. A refresh in that window must leave the rows on the shard, or they vanish
    from the index with the journal."""
    w = pool.writer()
    for i in range(3):
        w.append(conversation_step("tr_w", i))
    w.flush()
    idx = pool.index()  # rows on the live journal
    (journal,) = pool.layout.journal_paths()
    w.append(conversation_step("tr_w", 3))
    sealed = close_keeping_sealed_journal(w, journal)
    idx.refresh()
    journal.write_bytes(sealed)  # the window: the sealed journal beside its shard
    idx.refresh()
    assert idx.stats()["journals"] == 0
    journal.unlink()
    idx.refresh()
    rows = idx.steps("tr_w")
    assert [s["idx"] for s in rows] == [0, 1, 2, 3]
    assert all(r["source"].startswith("objects/") for r in rows)


def test_threads_sharing_the_index_refresh_it_while_a_writer_appends(pool: Pool) -> None:
    """A proxy's request threads and a TUI's workers share one index and its connection:
    their refreshes take turns instead of one failing inside the other's transaction."""
    import threading

    w = pool.writer()
    stop = threading.Event()
    failures: list[BaseException] = []

    def write() -> None:
        i = 0
        while not stop.is_set():
            w.append(conversation_step(f"tr_{i % 50:03d}", i // 50))
            if i % 5 == 0:
                w.flush()
            i += 1

    def read() -> None:
        try:
            for _ in range(40):
                idx = pool.index()  # refreshes
                idx.steps("tr_001")
                idx.refresh_labels()
        except BaseException as exc:
            failures.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    readers = [threading.Thread(target=read) for _ in range(6)]
    for t in readers:
        t.start()
    for t in readers:
        t.join()
    stop.set()
    writer.join()
    w.close()
    assert not failures, failures[0]
    assert pool.index().count_trajectories() == 50


def test_a_journal_cut_back_and_written_again_is_read_again(pool: Pool) -> None:
    """A writer whose batch failed to reach the disk cuts the journal back to where the
    batch began (``cut_back``) and goes on writing there. An index that had read the
    failed batch must drop its records (never acknowledged) and read what took their
    place: before, it went on from its old offset, mid-line, and saw nothing new."""
    from agentworld.pool.journal import frame

    w = pool.writer()
    w.append(conversation_step("tr_a", 0))
    w.flush()
    (path,) = pool.layout.journal_paths()
    kept = path.stat().st_size
    w.append(conversation_step("tr_gone", 0))
    w.append(conversation_step("tr_gone", 1))
    w.flush()
    idx = pool.index()
    assert idx.count_trajectories() == 2  # the refresh read the batch before its cut
    with open(path, "r+b") as f:  # the cut back, then a later batch in its place
        f.truncate(kept)
        f.seek(kept)
        later = [records.dumps(conversation_step("tr_new", i)) for i in range(3)]
        f.writelines(frame(line) for line in later)
    idx.refresh()
    assert sorted(t["id"] for t in idx.trajectories()) == ["tr_a", "tr_new"]
    assert [s["idx"] for s in idx.steps("tr_new")] == [0, 1, 2]
    size, mtime_ns = path.stat().st_size, path.stat().st_mtime_ns
    with open(path, "r+b") as f:  # again, the later batch as long as the one it replaced
        f.truncate(kept)
        f.seek(kept)
        f.writelines(frame(line.replace(b"tr_new", b"tr_nex")) for line in later)
    assert path.stat().st_size == size
    os.utime(path, ns=(mtime_ns + 10**7, mtime_ns + 10**7))  # written 10 ms later
    idx.refresh()
    assert sorted(t["id"] for t in idx.trajectories()) == ["tr_a", "tr_nex"]
    with open(path, "r+b") as f:  # cut back with nothing after it yet
        f.truncate(kept)
    idx.refresh()
    assert [t["id"] for t in idx.trajectories()] == ["tr_a"]
    w.close()
