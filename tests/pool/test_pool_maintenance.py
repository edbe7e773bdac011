"""Compaction, gc and sealing: nothing live is ever deleted, every record stays readable once."""

from __future__ import annotations

import collections
import os
import time

import orjson

from agentworld.pool import Pool
from agentworld.pool.fsck import fsck
from agentworld.pool.maintenance import compact, gc, seal_idle
from agentworld.pool.reader import iter_raw

from .conftest import small_step, write_trajectories


def _ids(pool: Pool) -> collections.Counter:
    return collections.Counter(orjson.loads(raw)["id"] for _, _, raw in iter_raw(pool.layout))


def test_compaction_and_gc_keep_every_record_exactly_once(pool: Pool) -> None:
    for _ in range(5):
        write_trajectories(pool, 2, 3)
    before = _ids(pool)
    assert len(before) == 40 and set(before.values()) == {1}
    shards_before = pool.layout.shard_paths()
    report = compact(pool, max_shards=3)
    assert len(report.inputs) == 3 and report.records == 24
    assert report.inputs == sorted(report.inputs)  # deterministic: name order
    assert _ids(pool) == before  # superseded shards are hidden at once
    lines = pool.layout.superseded.read_text().splitlines()
    assert [ln.split() for ln in lines] == [[old, report.output] for old in report.inputs]
    again = compact(pool)  # the rest plus the new one
    assert len(again.inputs) == 3
    assert _ids(pool) == before
    dry = gc(pool, dry_run=True)
    assert len(dry.deleted) == 6  # five originals and the first compacted shard
    assert all(p.exists() for p in shards_before)
    real = gc(pool)
    assert [d.path for d in real.deleted] == [d.path for d in dry.deleted]
    assert real.bytes_freed == dry.bytes_freed > 0
    assert len(pool.layout.shard_paths()) == 1
    assert _ids(pool) == before
    assert fsck(pool).ok
    assert gc(pool).deleted == []


def test_compaction_recovers_from_a_crash_before_superseded_was_written(pool: Pool) -> None:
    for _ in range(3):
        write_trajectories(pool, 1, 2)
    before = _ids(pool)
    first = compact(pool)
    # A crash after writing the shard but before superseded.txt: both copies are live.
    pool.layout.superseded.unlink()
    assert len(pool.layout.shard_paths()) == 4
    assert collections.Counter(r["id"] for r in pool.iter_records()) == before  # read once
    copies = fsck(pool)  # ...and fsck names the copies, a warning: nothing is lost
    assert copies.ok and len(copies.warnings) == 3
    assert all("byte for byte" in w.problem for w in copies.warnings)
    second = compact(pool)
    assert first.output in second.inputs and second.duplicates_dropped == 9
    gc(pool)
    assert _ids(pool) == before  # every record stored exactly once again
    assert fsck(pool).ok


def test_gc_keeps_superseded_shard_whose_replacement_is_missing_or_incomplete(pool: Pool) -> None:
    for _ in range(3):
        write_trajectories(pool, 1, 2)
    a, b, c = pool.layout.shard_paths()
    # Replacement missing: the old shard is still read, and kept.
    pool.layout.superseded.write_text(f"{a.name} {'0' * 64}.jsonl.zst\n")
    assert len(_ids(pool)) == 9
    # Replacement present but lacking some of the old records.
    with open(pool.layout.superseded, "a") as f:
        f.write(f"{b.name} {c.name}\n")
    report = gc(pool)
    assert report.deleted == []
    reasons = sorted(k.reason for k in report.kept)
    assert "missing or fails verification" in reasons[0] or "missing" in " ".join(reasons)
    assert any("are not in" in r for r in reasons)
    assert a.exists() and b.exists()


def test_gc_keeps_superseded_shard_when_replacement_is_corrupt(pool: Pool) -> None:
    for _ in range(2):
        write_trajectories(pool, 1, 2)
    report = compact(pool)
    out = pool.layout.objects / report.output[:2] / report.output
    data = bytearray(out.read_bytes())
    data[10] ^= 0xFF
    out.write_bytes(bytes(data))
    assert gc(pool).deleted == []
    assert all((pool.layout.objects / n[:2] / n).exists() for n in report.inputs)


def test_gc_never_touches_a_live_writers_journal(pool: Pool) -> None:
    w = pool.writer(durability="strict")  # empty journal, but its writer is alive
    old = time.time() - 7200
    os.utime(w._journal.path, (old, old))
    assert gc(pool).deleted == []
    assert w._journal.path.exists()
    w.append(small_step("tr_live", 0))
    w.close()
    assert len(_ids(pool)) == 1


def test_gc_removes_stale_temporaries_and_empty_dead_journals(pool: Pool) -> None:
    old = time.time() - 7200
    tmp_old = pool.layout.tmp / "abc.1.tmp"
    tmp_new = pool.layout.tmp / "def.1.tmp"
    dot_old = pool.layout.journals / ".w-x-0000.journal"
    empty = pool.layout.journals / "w-dead-0000.journal"
    for p in (tmp_old, tmp_new, dot_old, empty):
        p.write_bytes(b"")
    os.utime(tmp_old, (old, old))
    os.utime(dot_old, (old, old))
    report = gc(pool)
    assert sorted(d.path for d in report.deleted) == sorted(
        str(p.relative_to(pool.root)) for p in (tmp_old, dot_old, empty)
    )
    assert tmp_new.exists()


def test_gc_keeps_a_journal_of_an_unknown_framing_version_and_goes_on(pool: Pool) -> None:
    """A newer writer's journal (spec 5.1: readers refuse its version) is left alone; gc
    raised PoolFormatError on it and collected nothing else."""
    from agentworld import records
    from agentworld.pool.journal import frame

    future = pool.layout.journals / "w-future-0000.journal"
    header = records.dumps({"journal": 3, "writer": "future", "created": 0.0})
    future.write_bytes(frame(header) + frame(records.encode(small_step("tr_f", 0))))
    empty = pool.layout.journals / "w-dead-0000.journal"
    empty.write_bytes(b"")
    report = gc(pool)
    assert [d.path for d in report.deleted] == [str(empty.relative_to(pool.root))]
    assert future.exists()


def test_seal_idle_seals_dead_journals(pool: Pool) -> None:
    w = pool.writer(durability="strict")
    w.append(small_step("tr_x", 0))
    assert seal_idle(pool) == []  # alive: untouched
    os.close(w._journal.fd)  # the writer "dies" (its lock goes with its file descriptor)
    (rec,) = seal_idle(pool)
    assert rec.records == 1 and rec.shard is not None
    assert pool.layout.journal_paths() == []
    assert len(_ids(pool)) == 1


def test_one_maintenance_at_a_time(pool: Pool) -> None:
    import fcntl

    import pytest

    from agentworld.errors import PoolError

    lock = pool.layout.state / "locks" / "maintenance.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(PoolError, match="another compaction or gc"):
            compact(pool)
        with pytest.raises(PoolError, match="another compaction or gc"):
            gc(pool)
    finally:
        os.close(fd)
    assert gc(pool).deleted == []


def test_readers_hide_a_superseded_shard_only_when_its_chain_ends_at_a_shard_that_exists(
    pool: Pool,
) -> None:
    """Spec 7, pinned: follow old -> new -> ...; hide old only if the end exists and is not
    itself superseded (a cycle); '#' comments, blank lines and lone names are ignored."""
    from agentworld import records
    from agentworld.pool.layout import hidden_shards
    from agentworld.pool.shards import write_shard

    a, b, c = (
        write_shard(pool.layout, [records.encode(small_step(f"tr_{n}", 0))]).name for n in "abc"
    )
    missing = f"{'0' * 64}.jsonl.zst"
    cases = [
        (f"{a} {missing}\n", set()),  # its replacement is not here: keep reading it
        (f"{a} {missing}\n{missing} {c}\n", {a}),  # a chain through a collected shard
        (f"{a} {b}\n{b} {a}\n", set()),  # a cycle (hand-edited): nothing hidden
        (f"# {a} {b}\n\n{c}\n{a} {b}  # compacted\n", {a}),
    ]
    for text, hidden in cases:
        pool.layout.superseded.write_text(text)
        assert hidden_shards(pool.layout) & {a, b, c} == hidden, text
        read = {orjson.loads(raw)["trajectory"] for _, _, raw in iter_raw(pool.layout)}
        names = dict(zip("abc", (a, b, c), strict=True))
        assert read == {f"tr_{n}" for n, name in names.items() if name not in hidden}
