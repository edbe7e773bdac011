"""A full disk mid-batch, then freed: the journal is cut back to where the batch began,
every acknowledged record is stored exactly once, and recovery finds nothing to cut."""

from __future__ import annotations

import collections
from typing import Any

import pytest

from agentworld.errors import PoolError
from agentworld.pool import Pool
from agentworld.pool.reader import iter_raw
from tests.disk_full import DiskFull
from tests.pool.conftest import full_step

pytestmark = pytest.mark.timeout(60)


def _stored(pool_root: Any) -> collections.Counter[str]:
    import orjson

    pool = Pool.open(pool_root)  # recovers the journal
    for r in pool.recovered:
        assert r.problem is None and r.torn_bytes == 0, r
    return collections.Counter(orjson.loads(raw)["id"] for _, _, raw in iter_raw(pool.layout))


def _recs(tag: str, n: int) -> list[dict[str, Any]]:
    return [full_step(f"tr_{tag}", i) for i in range(n)]


@pytest.mark.parametrize(
    "fault",
    [
        pytest.param({"take": 700}, id="torn-line"),
        # More records than one gathered write takes (341): the first write lands whole.
        pytest.param({"whole_calls": 1}, id="whole-lines-then-full"),
    ],
)
def test_strict_disk_full_then_freed_keeps_every_acknowledged_record_once(
    pool: Pool, monkeypatch: pytest.MonkeyPatch, fault: dict[str, int]
) -> None:
    disk = DiskFull(monkeypatch, pool.root, **fault)
    w = pool.writer(durability="strict", name="full")
    before, failed, after = _recs("a", 5), _recs("b", 400), _recs("c", 5)
    w.append_many(before)
    disk.full = True
    with pytest.raises(PoolError, match="No space left"), w._cond:
        # Held while enqueuing (waiting releases it): the committer takes the 400 as one
        # batch, the batch that fails part-way, rather than whichever part came first.
        w.append_many(failed)
    assert w.failing
    disk.full = False
    w.append_many(after)
    w.append_many(failed)  # the agent's retry of what it was refused
    assert not w.failing
    w.close()
    stored = _stored(pool.root)
    acknowledged = [r["id"] for r in before + after + failed]
    assert sorted(stored) == sorted(acknowledged)
    assert set(stored.values()) == {1}


def test_batched_loss_is_reported_and_later_batches_survive(
    pool: Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = DiskFull(monkeypatch, pool.root, take=300)
    w = pool.writer(durability="batched", name="full")
    lost: list[bytes] = []
    w.on_lost = lost.extend
    disk.full = True
    for rec in _recs("a", 3):
        w.append(rec)
    with pytest.raises(PoolError):
        w.flush()
    assert w.failing and w.stats["lost"] == 3
    assert len(lost) == 3  # nobody was told: the appends had returned
    disk.full = False
    assert w.probe() and not w.failing
    later = _recs("b", 4)
    for rec in later:
        w.append(rec)
    w.flush()
    w.close()
    assert sorted(_stored(pool.root)) == sorted(r["id"] for r in later)


def test_probe_fails_while_the_disk_is_full(pool: Pool, monkeypatch: pytest.MonkeyPatch) -> None:
    w = pool.writer(durability="strict", name="full")
    disk = DiskFull(monkeypatch, pool.root)
    disk.full = True
    with pytest.raises(PoolError):
        w.append(full_step("tr_x", 0))
    assert not w.probe() and w.failing
    assert isinstance(w.write_error, OSError)
    disk.full = False
    assert w.probe() and not w.failing
    w.close()


def test_a_journal_that_cannot_be_cut_back_is_left_for_a_new_one(
    pool: Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failed batch's torn line stays when even truncating fails (EIO): the writer
    goes on in a new journal, so nothing acknowledged lands behind the torn bytes."""
    import errno
    import os

    disk = DiskFull(monkeypatch, pool.root, take=700)
    w = pool.writer(durability="strict", name="torn")
    first = w._journal.fd
    real_ftruncate = os.ftruncate

    def ftruncate(fd: int, length: int) -> None:
        if fd == first:
            raise OSError(errno.EIO, "Input/output error")
        real_ftruncate(fd, length)

    monkeypatch.setattr(os, "ftruncate", ftruncate)
    before, failed, after = _recs("a", 3), _recs("b", 50), _recs("c", 3)
    w.append_many(before)
    disk.full = True
    with pytest.raises(PoolError), w._cond:  # one batch (see above)
        w.append_many(failed)
    disk.full = False
    w.append_many(after)
    assert w._journal.fd != first
    w.close()
    import orjson

    reopened = Pool.open(pool.root)
    torn = [r for r in reopened.recovered if r.torn_bytes]
    assert len(torn) == 1 and torn[0].records == 3  # only what came before the failure
    stored = collections.Counter(orjson.loads(raw)["id"] for _, _, raw in iter_raw(reopened.layout))
    assert sorted(stored) == sorted(r["id"] for r in before + after)
