"""Crash safety: killed writers, concurrent writers, torn journal tails."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agentworld.errors import PoolError
from agentworld.pool import Pool
from agentworld.pool.fsck import fsck
from agentworld.pool.journal import journal_records, scan_journal
from agentworld.pool.reader import iter_raw

HELPER = Path(__file__).with_name("writer_proc.py")
ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(60)


def _start(
    pool: Pool, mode: str, count: int, commit: int, name: str = "crash", kill_at: str = ""
) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    extra = [kill_at] if kill_at else []
    return subprocess.Popen(
        [sys.executable, str(HELPER), str(pool.root), mode, str(count), str(commit), name, *extra],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def _read_ids(proc: subprocess.Popen, n: int) -> list[str]:
    ids = []
    assert proc.stdout is not None
    while len(ids) < n:
        line = proc.stdout.readline()
        assert line, "writer exited early"
        ids.append(line.strip())
    return ids


def _kill(proc: subprocess.Popen) -> list[str]:
    """SIGKILL the writer; return every id it printed (including after our last read)."""
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    # Read through the same buffered file object as _read_ids: communicate() would
    # read the raw pipe and miss lines already buffered here.
    assert proc.stdout is not None
    rest = proc.stdout.read()
    proc.stdout.close()
    return [x for x in rest.splitlines() if x and x != "closed"]


def _stored_ids(pool: Pool) -> list[str]:
    import orjson

    return [orjson.loads(raw)["id"] for _, _, raw in iter_raw(pool.layout)]


def test_strict_writer_killed_loses_nothing_acknowledged(pool: Pool) -> None:
    proc = _start(pool, "strict", 0, 512)
    acked = _read_ids(proc, 60)
    acked += _kill(proc)
    reopened = Pool.open(pool.root)  # recovers the dead writer's journal
    assert len(reopened.recovered) == 1
    assert reopened.recovered[0].shard is not None
    stored = _stored_ids(reopened)
    assert set(acked) <= set(stored)
    assert len(stored) == len(set(stored))  # none duplicated
    assert len(stored) - len(acked) <= 1  # at most the one in flight at the kill
    assert reopened.layout.journal_paths() == []
    report = fsck(reopened)
    assert report.ok, report.problems
    # Recovering again changes nothing (sealing is deterministic).
    assert Pool.open(pool.root).recovered == []
    assert sorted(_stored_ids(Pool.open(pool.root))) == sorted(stored)


def test_batched_writer_killed_loses_a_bounded_suffix(pool: Pool) -> None:
    commit = 8
    proc = _start(pool, "batched", 0, commit)
    queued = _read_ids(proc, 300)
    queued += _kill(proc)
    reopened = Pool.open(pool.root)
    stored = _stored_ids(reopened)
    assert len(stored) == len(set(stored))
    assert stored == queued[: len(stored)]  # what survives is a prefix: nothing lost mid-way
    # Appends wait when 2 x commit_records are queued, so at most the batch being
    # written plus the queue behind it (4 x commit_records) can be lost.
    assert len(queued) - len(stored) <= 4 * commit
    assert fsck(reopened).ok


@pytest.mark.parametrize("kill_at", ["trailer-written", "shard-installed"])
def test_writer_killed_while_sealing_seals_once(pool: Pool, kill_at: str) -> None:
    """Killed after the journal's sealed trailer, before or after the shard got its
    name: recovery seals the records again or only removes the journal, never both."""
    proc = _start(pool, "strict", 40, 8, kill_at=kill_at)
    acked = _read_ids(proc, 40)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    assert proc.stdout is not None and proc.stdout.read() == ""  # died before "closed"
    proc.stdout.close()
    (journal,) = pool.layout.journal_paths()
    shards_before = pool.layout.shard_paths()
    assert len(shards_before) == (1 if kill_at == "shard-installed" else 0)
    reopened = Pool.open(pool.root)
    (rec,) = reopened.recovered
    assert rec.records == 40 and rec.shard is not None
    if shards_before:
        assert rec.shard == shards_before[0].name  # the writer's own shard, kept
    assert not journal.exists()
    assert len(reopened.layout.shard_paths()) == 1
    stored = _stored_ids(reopened)
    assert sorted(stored) == sorted(acked)  # every acknowledged record, none twice
    assert fsck(reopened).ok
    assert Pool.open(pool.root).recovered == []


def test_fsck_reads_a_sealed_journal_as_its_shard(pool: Pool) -> None:
    """Between the shard's rename and the journal's unlink both exist: fsck counts the
    records once (in the shard) rather than reporting duplicates."""
    proc = _start(pool, "strict", 10, 4, kill_at="shard-installed")
    _read_ids(proc, 10)
    proc.wait(timeout=30)
    assert proc.stdout is not None
    proc.stdout.close()
    assert len(pool.layout.journal_paths()) == 1 and len(pool.layout.shard_paths()) == 1
    report = fsck(pool)
    assert report.ok, report.problems
    assert report.records == 20  # read in both files, cross-checked once


def test_two_writer_processes_at_once(pool: Pool) -> None:
    procs = [_start(pool, "batched", 400, 16, name=f"w{i}") for i in range(2)]
    outs = [p.communicate(timeout=60)[0].splitlines() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    written = [x for out in outs for x in out if x != "closed"]
    assert len(written) == 800
    stored = _stored_ids(pool)
    assert collections.Counter(stored) == collections.Counter(written)
    assert len(pool.layout.shard_paths()) == 2
    assert pool.index().stats()["steps"] == 800
    assert fsck(pool).ok


@pytest.mark.parametrize(
    "garbage",
    [
        b'0000abcd {"kind": "st',  # a partial line, as a crash mid-write leaves it
        b"deadbeef {}\n",  # a complete line whose checksum is wrong
        b"\x00\x00\x00\x00\x00\x00",  # zeros, as some file systems leave after a crash
    ],
)
def test_torn_journal_tail_is_cut_and_reported(pool: Pool, garbage: bytes) -> None:
    proc = _start(pool, "strict", 0, 512)
    acked = _read_ids(proc, 20)
    acked += _kill(proc)
    (journal,) = pool.layout.journal_paths()
    stored = len(journal_records(scan_journal(journal)))
    assert stored - len(acked) in (0, 1)  # plus the one fsynced as we killed it
    with open(journal, "ab") as f:
        f.write(garbage)
    report = fsck(pool)
    # A write cut short is what a crash leaves (a warning, fsck passes); a complete line
    # with a wrong checksum is damage.
    torn = not garbage.endswith(b"\n")
    assert report.ok is torn
    (problem,) = report.warnings if torn else report.problems
    assert not (report.problems if torn else report.warnings)
    assert problem.path == f"journals/{journal.name}"
    assert problem.line == stored + 2  # after the header line and the good records
    assert "cut on recovery" in problem.problem
    reopened = Pool.open(pool.root)
    (rec,) = reopened.recovered
    assert rec.torn_bytes >= len(garbage)
    assert rec.problem is not None
    assert set(acked) <= set(_stored_ids(reopened))
    assert fsck(reopened).ok


def test_writer_rotation_seals_shards_while_running(pool: Pool) -> None:
    from .conftest import small_step

    w = pool.writer(rotate_bytes=4096, commit_records=4)
    for i in range(200):
        w.append(small_step("tr_rot", i))
    w.close()
    assert w.stats["sealed_shards"] >= 3
    assert pool.layout.journal_paths() == []
    stored = _stored_ids(pool)
    assert len(stored) == 200 == len(set(stored))
    assert fsck(pool).ok


def test_seal_now_makes_a_running_writers_records_a_shard(pool: Pool) -> None:
    """A long-running writer (a proxy) kept its records in its git-ignored journal until it
    stopped or reached 64 MB: `git add pool` took none of them. ``seal_now`` seals them into
    a shard while it goes on writing, in a new journal."""
    from .conftest import small_step

    w = pool.writer()  # batched: the first records may not be committed yet
    assert w.seal_now() is False  # nothing to seal
    for i in range(5):
        w.append(small_step("tr_live", i))
    assert w.seal_now() is True
    assert len(pool.layout.shard_paths()) == 1
    assert len(list(iter_raw(pool.layout, journals=False))) == 5  # all five in the shard
    (live,) = pool.layout.journal_paths()  # the new journal, still this writer's
    assert live.stat().st_size < 200  # its header alone
    w.append(small_step("tr_live", 5))
    w.flush()
    assert w.seal_now() is True and w.seal_now() is False
    w.close()
    assert len(pool.layout.shard_paths()) == 2
    assert pool.layout.journal_paths() == []
    assert len(_stored_ids(pool)) == 6 == len(set(_stored_ids(pool)))
    assert fsck(Pool.open(pool.root)).ok
    with pytest.raises(PoolError, match="writer is closed"):
        w.seal_now()


def test_seal_now_counts_records_a_rotation_sealed_as_sealed(pool: Pool) -> None:
    """A batch that filled the journal to ``rotate_bytes`` sealed it itself, and ``seal_now``
    then found the new journal empty: "nothing to seal" for records just sealed."""
    from .conftest import small_step

    w = pool.writer(rotate_bytes=1024)  # ten records fill it: their commit rotates
    for i in range(10):
        w.append(small_step("tr_live", i))
    assert w.seal_now() is True
    assert len(list(iter_raw(pool.layout, journals=False))) == 10  # in a shard
    assert w.seal_now() is False  # and nothing since
    w.close()


def test_a_journal_damaged_mid_way_is_kept_whole_not_cut(pool: Pool) -> None:
    """One bad byte in the middle of a dead writer's journal: recovery (which any command
    runs) sealed the lines before it and deleted the journal, and with it every
    acknowledged record after the damage, each with a valid checksum."""
    proc = _start(pool, "strict", 0, 512)
    acked = _read_ids(proc, 20)
    acked += _kill(proc)
    (journal,) = pool.layout.journal_paths()
    data = bytearray(journal.read_bytes())
    lines = data.split(b"\n")
    at = sum(len(x) + 1 for x in lines[:6]) + 20  # inside the sixth record's JSON
    data[at] ^= 0x01
    journal.write_bytes(bytes(data))
    reopened = Pool.open(pool.root)
    (rec,) = reopened.recovered
    assert rec.records == 5 and rec.kept is not None and "checksum mismatch" in rec.problem
    kept = Path(rec.kept)
    assert kept.parent == pool.layout.damaged and kept.read_bytes() == bytes(data)
    assert not pool.layout.journal_paths()  # sealed what it could read ...
    assert len(set(acked) & set(_stored_ids(reopened))) == 5
    report = fsck(reopened)  # ... and fsck says where the rest is until someone decides
    (problem,) = report.problems
    assert problem.path == f"damaged/{journal.name}" and "recover them" in problem.problem
    kept.unlink()
    assert fsck(reopened).ok


def test_a_torn_last_write_is_cut_not_kept(pool: Pool) -> None:
    """A crash's torn tail has no valid line after it: cut as before, nothing kept."""
    proc = _start(pool, "strict", 0, 512)
    _read_ids(proc, 5)
    _kill(proc)
    (journal,) = pool.layout.journal_paths()
    with open(journal, "ab") as f:
        f.write(b'0000abcd {"kind": "st')
    (rec,) = Pool.open(pool.root).recovered
    assert rec.torn_bytes and rec.kept is None and not pool.layout.damaged.exists()
