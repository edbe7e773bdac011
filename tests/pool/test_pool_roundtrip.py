"""Every record field survives writer -> shard -> iter_records / get_step / get_trajectory / index."""

from __future__ import annotations

import os

import pytest

from agentworld import records
from agentworld.errors import NotFoundError, PoolError, PoolFormatError
from agentworld.pool import Pool, Selection

from .conftest import close_keeping_sealed_journal, end_record, full_step


def _same(a: object, b: object) -> bool:
    """Equality that treats -inf log-probs as equal (they compare equal anyway) and NaN as never."""
    return a == b


@pytest.mark.parametrize("durability", ["batched", "strict"])
def test_every_field_round_trips(pool: Pool, durability: str) -> None:
    t = records.new_id("tr")
    steps = [full_step(t, i) for i in range(3)]
    end = end_record(t, 3)
    with pool.writer(durability=durability) as w:
        for s in steps:
            w.append(s)
        w.append(end)
    got = list(pool.iter_records())
    assert got == [*steps, end]
    assert got[0]["tokens"]["completion_logprobs"][2] == -1e30
    assert pool.get_step(steps[1]["id"]) == steps[1]
    traj = pool.get_trajectory(t)
    assert [dict(s, _labels=None) for s in traj.steps] == [dict(s, _labels=None) for s in steps]
    assert traj.end == end
    row = pool.index().trajectory(t)
    assert row is not None
    assert (row["agent"], row["dataset"], row["split"], row["task"], row["group"]) == (
        "coder",
        "math",
        "train",
        "t-17",
        "g1",
    )
    assert (row["status"], row["reward"], row["n_steps"]) == ("done", 1.0, 3)
    assert (row["policy_min"], row["policy_max"]) == (3, 3)
    assert row["prompt_tokens"] == 15 and row["completion_tokens"] == 9
    assert row["token_source"] == "engine"


def test_journal_records_are_readable_before_sealing(pool: Pool) -> None:
    t = records.new_id("tr")
    w = pool.writer(durability="strict")
    s = full_step(t, 0)
    w.append(s)
    assert list(pool.iter_records()) == [s]
    assert pool.get_step(s["id"]) == s
    w.close()
    assert list(pool.iter_records()) == [s]
    assert pool.get_step(s["id"]) == s  # the index follows the record into its shard


async def test_append_async_round_trips(pool: Pool) -> None:
    t = records.new_id("tr")
    s = full_step(t, 0)
    w = pool.writer(durability="strict")
    await w.append_async(s)
    w.close()
    assert list(pool.iter_records()) == [s]


def test_iter_trajectories_streams_with_labels(pool: Pool) -> None:
    t = records.new_id("tr")
    steps = [full_step(t, i) for i in (2, 0, 1)]
    with pool.writer() as w:
        for s in steps:
            w.append(s)
        w.append(end_record(t, 3))
    pool.labels.set([f"trajectory:{t}"], {"quality": "good"}, author="me")
    (traj,) = pool.iter_trajectories(Selection(quality=("good",)))
    assert [s["index"] for s in traj.steps] == [0, 1, 2]
    assert traj.labels == {"quality": "good"}
    assert list(pool.iter_trajectories(Selection(quality=("bad",)))) == []


def test_a_step_whose_started_at_is_null_is_read(pool: Pool) -> None:
    """timings.started_at is a required key whose value may be null (spec 3.2); the
    trajectory summary took min() over it and raised TypeError, stopping export and train."""
    t = records.new_id("tr")
    with pool.writer() as w:
        w.append(full_step(t, 0, timings={"started_at": None}))
        w.append(full_step(t, 1, timings={"started_at": 7.0}))
        w.append(end_record(t, 2, ended_at=9.0))
    (traj,) = pool.iter_trajectories(Selection(agent="coder"))
    summary = traj.summary()
    assert summary["first_at"] == 7.0 and summary["last_at"] == 9.0


def test_a_pool_of_only_its_pool_toml_reads_as_empty(tmp_path) -> None:
    """Spec 1: readers must not require objects/, journals/ or labels/ (an empty pool,
    a clone of one, may lack them)."""
    from agentworld.pool.fsck import fsck
    from agentworld.pool.maintenance import compact, gc

    root = tmp_path / "bare"
    root.mkdir()
    (root / "POOL.toml").write_text('format = "agentworld-pool"\nversion = 1\n')
    pool = Pool.open(root)
    assert list(pool.iter_records()) == [] and list(pool.iter_trajectories()) == []
    assert pool.labels.effective() == {}
    assert pool.index().stats()["steps"] == 0
    assert fsck(pool).ok
    assert gc(pool).deleted == [] and compact(pool).output is None
    pool.close()


def test_unknown_format_version_refused(tmp_path) -> None:
    p = Pool.create(tmp_path / "pool")
    meta = p.layout.meta
    meta.write_text(meta.read_text().replace("version = 1", "version = 99"))
    with pytest.raises(PoolFormatError, match="version 99"):
        Pool.open(tmp_path / "pool")
    meta.write_text(meta.read_text().replace('format = "agentworld-pool"', 'format = "other"'))
    with pytest.raises(PoolFormatError):
        Pool.open(tmp_path / "pool")


@pytest.mark.parametrize(
    ("version_line", "expected"),
    [
        ("version = true", "`version` must be an integer such as 1, got True"),
        ("version = 1.0", "`version` must be an integer such as 1, got 1.0"),
        ('version = "1"', "`version` must be an integer such as 1, got '1'"),
        ("", "no `version` key; expected version = 1"),
    ],
)
def test_pool_toml_version_must_be_an_integer(tmp_path, version_line: str, expected: str) -> None:
    """The spec says an integer: Python's True == 1 and 1.0 == 1 must not pass for one, and a
    POOL.toml without a version is broken, not newer than this build."""
    p = Pool.create(tmp_path / "pool")
    p.layout.meta.write_text(f'format = "agentworld-pool"\n{version_line}\n')
    with pytest.raises(PoolError) as err:
        Pool.open(tmp_path / "pool")
    assert not isinstance(err.value, PoolFormatError)
    assert str(err.value) == f"{p.layout.meta}: {expected}"


def test_pool_toml_without_format_or_with_an_old_version(tmp_path) -> None:
    p = Pool.create(tmp_path / "pool")
    p.layout.meta.write_text("version = 1\n")
    with pytest.raises(PoolError, match="no `format` key"):
        Pool.open(tmp_path / "pool")
    p.layout.meta.write_text('format = "agentworld-pool"\nversion = 0\n')
    with pytest.raises(PoolFormatError, match="version 0 is not supported") as err:
        Pool.open(tmp_path / "pool")
    assert "upgrade" not in str(err.value)  # a newer build would not read it either


def test_pool_toml_that_is_a_directory(tmp_path) -> None:
    p = Pool.create(tmp_path / "pool")
    p.layout.meta.unlink()
    p.layout.meta.mkdir()
    with pytest.raises(PoolError, match=r"POOL\.toml: is not a file"):
        Pool.open(tmp_path / "pool")


def test_not_a_pool(tmp_path) -> None:
    with pytest.raises(PoolError, match="not a pool"):
        Pool.open(tmp_path)
    (tmp_path / "junk").write_text("x")
    with pytest.raises(PoolError, match="not empty"):
        Pool.create(tmp_path)


def test_missing_step_is_not_found(pool: Pool) -> None:
    with pytest.raises(NotFoundError):
        pool.get_step("st_nope")
    with pytest.raises(NotFoundError):
        pool.get_trajectory("tr_nope")


def test_sealing_is_deterministic(pool: Pool, tmp_path) -> None:
    """The same records sealed twice give one shard (recovery after a crash cannot duplicate)."""
    from agentworld.pool.shards import write_shard

    lines = [records.encode(full_step("tr_x", i)) for i in range(5)]
    a = write_shard(pool.layout, lines)
    b = write_shard(pool.layout, lines)
    assert a == b
    assert len(pool.layout.shard_paths()) == 1


def test_recovery_after_own_seal_does_not_seal_again(pool: Pool) -> None:
    """Crash after the shard got its name, before the journal was unlinked: recovery
    finds the sealed trailer naming the shard and only removes the journal."""
    from agentworld.pool.journal import recover_orphans

    w = pool.writer(commit_records=3)
    for i in range(10):
        w.append(full_step("tr_same", i))
    w.flush()
    (journal,) = pool.layout.journal_paths()
    sealed = close_keeping_sealed_journal(w, journal)
    (shard,) = pool.layout.shard_paths()
    journal.write_bytes(sealed)  # as if we crashed after installing the shard
    (rec,) = recover_orphans(pool.layout)
    assert rec.shard == shard.name and rec.records == 10
    assert pool.layout.shard_paths() == [shard]
    assert pool.layout.journal_paths() == []


def test_recovery_does_not_drop_a_journal_for_a_damaged_shard_of_its_name(pool: Pool) -> None:
    """The sealed trailer names a shard that exists but fails its hash (damaged since):
    recovery unlinked the journal, the only good copy of its records. It now seals the
    records again, into a one-shot shard of another name."""
    from agentworld.pool.journal import recover_orphans

    w = pool.writer(commit_records=3)
    for i in range(10):
        w.append(full_step("tr_same", i))
    w.flush()
    (journal,) = pool.layout.journal_paths()
    sealed = close_keeping_sealed_journal(w, journal)
    (shard,) = pool.layout.shard_paths()
    journal.write_bytes(sealed)
    shard.write_bytes(shard.read_bytes()[:-5])  # the named shard, truncated
    # Before recovery the index reads the journal (the refresh failed on the shard).
    unrecovered = Pool.open(pool.root, recover=False)
    assert unrecovered.index().stats()["steps"] == 10
    unrecovered.close()
    (rec,) = recover_orphans(pool.layout)
    assert rec.records == 10 and rec.shard != shard.name
    assert [r["index"] for r in pool.iter_records()] == list(range(10))


def test_resealing_replaces_a_damaged_file_of_the_same_name(pool: Pool) -> None:
    """One-shot sealing is deterministic, so a crash mid-recovery finds its own shard
    there; write_shard trusted any file of that name, and recovery then unlinked the
    journal behind a damaged one."""
    from agentworld.pool.journal import frame, recover_orphans
    from agentworld.pool.shards import verify_shard, write_shard

    lines = [records.encode(full_step("tr_x", i)) for i in range(5)]
    shard = write_shard(pool.layout, lines)
    shard.write_bytes(b"\x00" * shard.stat().st_size)  # same name and size, bytes gone
    header = records.dumps({"journal": 2, "writer": "dead", "created": 0.0})
    journal = pool.layout.journals / "dead-h-1-abcdef-0000.journal"
    journal.write_bytes(frame(header) + b"".join(frame(line) for line in lines))
    (rec,) = recover_orphans(pool.layout)
    assert rec.shard == shard.name and verify_shard(shard) is None
    assert [r["index"] for r in pool.iter_records()] == list(range(5))


def test_writer_seals_from_its_file_when_compressing_fails(
    pool: Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    import zstandard

    from agentworld.pool.fsck import fsck
    from agentworld.pool.shards import ShardBuilder

    def fail(self: ShardBuilder, lines: list[bytes]) -> None:
        raise zstandard.ZstdError("out of memory")

    monkeypatch.setattr(ShardBuilder, "add", fail)
    w = pool.writer(commit_records=3)
    for i in range(10):
        w.append(full_step("tr_fallback", i))
    w.close()
    assert pool.layout.journal_paths() == [] and len(pool.layout.shard_paths()) == 1
    assert [r["index"] for r in pool.iter_records()] == list(range(10))
    assert fsck(pool).ok


def test_version_1_journal_is_recovered(pool: Pool) -> None:
    """Journals written before the sealed trailer existed read and recover as before."""
    from agentworld.pool.journal import frame

    journal = pool.layout.journals / "w-old-0000.journal"
    header = records.dumps({"journal": 1, "writer": "old", "created": 0.0})
    lines = [records.encode(full_step("tr_v1", i)) for i in range(3)]
    journal.write_bytes(frame(header) + b"".join(frame(x) for x in lines))
    (rec,) = Pool.open(pool.root).recovered
    assert rec.records == 3 and rec.shard is not None
    assert [r["index"] for r in pool.iter_records()] == [0, 1, 2]


def test_unknown_journal_version_is_left_alone(pool: Pool) -> None:
    from agentworld.pool.fsck import fsck
    from agentworld.pool.journal import frame

    journal = pool.layout.journals / "w-future-0000.journal"
    header = records.dumps({"journal": 3, "writer": "future", "created": 0.0})
    journal.write_bytes(frame(header) + frame(records.encode(full_step("tr_f", 0))))
    reopened = Pool.open(pool.root)  # recovery skips what it cannot read
    assert reopened.recovered == [] and journal.exists()
    assert list(reopened.iter_records()) == []
    assert reopened.index().stats()["steps"] == 0
    (problem,) = fsck(reopened).problems
    assert problem.line == 1 and "journal version 3" in problem.problem


@pytest.mark.parametrize("lead", [b" 0", b"+0", b"0_"])
def test_a_checksum_field_that_is_not_eight_hex_digits_ends_the_valid_prefix(
    pool: Pool, lead: bytes
) -> None:
    """Spec 5.2: a line whose first eight bytes are not hex digits is malformed. Python's
    int() took " 021a12f", "+021a12f" and "0_21a12f" as numbers, so a line another reader
    (and the spec) calls torn was read as data here."""
    from agentworld.pool.journal import crc32, frame, scan_journal

    header = records.dumps({"journal": 2, "writer": "x", "created": 0.0})
    for i in range(10_000):  # a record whose checksum starts with two zero digits
        data = records.encode(full_step("tr_x", 0, metadata={"n": i}))
        field = b"%08x" % crc32(data)
        if field.startswith(b"00"):
            break
    field = lead + field[2:]  # the same number to int(), but not eight hex digits
    journal = pool.layout.journals / "x-0000.journal"
    journal.write_bytes(frame(header) + field + b" " + data + b"\n")
    scan = scan_journal(journal)
    assert scan.lines == [header] and "malformed checksum" in str(scan.problem)


@pytest.mark.parametrize("size", [0, 1, 5 * 1024, 5 * 1024 + 1, 12_345, 1 << 20])
def test_journal_checksum_in_pieces_equals_zlib_crc32(size: int) -> None:
    import zlib

    from agentworld.pool.journal import crc32

    data = os.urandom(size)
    assert crc32(data) == zlib.crc32(data)


def test_closed_writer_leaves_no_journal_and_deletes_the_sealed_one(pool: Pool) -> None:
    import threading

    w = pool.writer()
    for i in range(5):
        w.append(full_step("tr_gone", i))
    w.close()
    assert pool.layout.journal_paths() == []  # gone for readers and recovery at once
    for t in threading.enumerate():
        if t.name == "aw-pool-unlink":
            t.join()
    assert list(pool.layout.tmp.iterdir()) == []
    assert [r["index"] for r in pool.iter_records()] == list(range(5))


def test_a_pool_that_cannot_be_written_still_opens_and_reads_a_dead_journal(
    pool: Pool, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Recovery writes (a shard, then the journal's removal); a full disk or a read-only
    mount made every read command fail on a pool holding a dead writer's journal."""
    import errno

    from agentworld.pool import journal as journal_mod
    from agentworld.pool.journal import JOURNAL_VERSION, frame

    journal = pool.layout.journals / "w-dead-0000.journal"
    header = records.dumps({"journal": JOURNAL_VERSION, "writer": "dead", "created": 0.0})
    lines = [records.encode(full_step("tr_dead", i)) for i in range(3)]
    journal.write_bytes(frame(header) + b"".join(frame(x) for x in lines))

    def no_space(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(journal_mod, "seal_journal", no_space)
    with caplog.at_level("WARNING"):
        opened = Pool.open(pool.root)
    assert opened.recovered == [] and journal.exists()
    assert "No space left on device" in caplog.text and str(journal) in caplog.text
    assert [s["index"] for s in opened.get_trajectory("tr_dead").steps] == [0, 1, 2]
    opened.close()
    monkeypatch.undo()  # space is back: the next open seals it
    (rec,) = Pool.open(pool.root).recovered
    assert rec.records == 3 and not journal.exists()
