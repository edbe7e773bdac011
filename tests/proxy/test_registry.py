"""The registry of open trajectories: activity order, idle and over-cap sweeps, affinity counts,
and restoring it from the pool after a restart."""

from __future__ import annotations

import asyncio
import random
import time
from types import SimpleNamespace
from typing import Any

import pytest

from agentworld import records
from agentworld.errors import CorruptDataError
from agentworld.pool import Pool
from agentworld.proxy import lifespan
from agentworld.proxy.registry import Registry, Trajectory, prefix_keys, restore


def _open(reg: Registry, n: int, agent: str = "a") -> list[Trajectory]:
    return [reg.create(agent) for _ in range(n)]


def test_touch_makes_a_trajectory_the_most_recently_active():
    reg = Registry()
    a, b, c = _open(reg, 3)
    reg.touch(a)
    assert list(reg.open) == [b.id, c.id, a.id]
    reg.close(c.id, "done")
    reg.touch(c)  # a call that ends after its trajectory was closed
    assert list(reg.open) == [b.id, a.id]


def test_twin_conversations_each_continue_their_own_trajectory_once():
    reg = Registry()
    a, b, c = _open(reg, 3)
    asked = [{"role": "user", "content": "task"}]
    reply = {"role": "assistant", "content": "same answer"}
    prompt = prefix_keys("a", asked)[-1]
    for t in (a, b):  # two rollouts of one task, the same answer
        reg.add_continuations(t, prompt, [reply, reply])  # n=2, both choices alike
    next_turn = prefix_keys("a", [*asked, reply, {"role": "user", "content": "go on"}])
    assert reg.find_thread(next_turn) is a  # first come, first continued
    reg.continue_thread(a)
    assert reg.find_thread(next_turn) is b  # a's twin is still waiting for its own turn
    reg.add_continuations(c, prompt, [reply])
    reg.close(b.id, "done")
    assert reg.find_thread(next_turn) is c
    reg.continue_thread(c)
    assert reg.find_thread(next_turn) is None
    assert reg.threads == {}  # nothing left behind by the ones taken or closed


def test_a_fork_point_is_the_longest_remembered_proper_prefix_and_the_oldest_are_forgotten():
    reg = Registry(max_fork_points=3)
    (a,) = _open(reg, 1)
    asked = [{"role": "user", "content": "task"}]
    reply = {"role": "assistant", "content": "answer"}
    prompt = prefix_keys("a", asked)[-1]
    reg.remember(prompt, a, 0)
    reg.add_continuations(a, prompt, [reply], 0)
    branch = prefix_keys("a", [*asked, reply, {"role": "user", "content": "another way"}])
    assert reg.fork_point(branch) == {"trajectory": a.id, "step": 0, "messages": 2}
    sub = prefix_keys("a", [*asked, {"role": "user", "content": "sub-task"}])
    assert reg.fork_point(sub) == {"trajectory": a.id, "step": 0, "messages": 1}
    assert reg.fork_point(prefix_keys("a", asked)) is None  # the same request: a twin, a retry
    assert reg.fork_point(prefix_keys("b", [*asked, reply, {"role": "user", "x": 1}])) is None
    reg.close(a.id, "done")  # a closed trajectory's points stay: a session resumed later
    assert reg.fork_point(branch) == {"trajectory": a.id, "step": 0, "messages": 2}
    for i in range(3):  # newer points push the oldest out
        reg.remember(prefix_keys("a", [{"role": "user", "content": f"other {i}"}])[-1], a, i)
    assert len(reg.points) == 3 and reg.fork_point(branch) is None


def test_a_twin_goes_back_to_the_trajectory_its_connection_last_called_on():
    reg = Registry()
    a, b = _open(reg, 2)
    a.peer, b.peer = ("127.0.0.1", 5001), ("127.0.0.1", 5002)
    asked = [{"role": "user", "content": "task"}]
    reply = {"role": "assistant", "content": "same answer"}
    for t in (a, b):
        reg.add_continuations(t, prefix_keys("a", asked)[-1], [reply])
    next_turn = prefix_keys("a", [*asked, reply, {"role": "user", "content": "go on"}])
    assert reg.find_thread(next_turn, ("127.0.0.1", 5002)) is b  # not first come: its own
    assert reg.find_thread(next_turn, ("127.0.0.1", 5009)) is a  # a new connection: first come
    assert reg.find_thread(next_turn) is a


def test_idle_takes_the_trajectories_quiet_past_the_timeout_and_skips_calls_in_flight():
    reg = Registry()
    old, busy, older_than_timeout, recent = _open(reg, 4)
    now = time.monotonic()
    for t, ago in ((old, 100), (busy, 90), (older_than_timeout, 80)):
        reg.touch(t)
        t.last_active = now - ago  # as if touched that long ago, in that order
    reg.touch(recent)
    busy.inflight = 1  # a long call: it keeps its place from when it started
    assert reg.idle(now, 50) == [old, older_than_timeout]
    assert reg.idle(now, 85) == [old]
    assert reg.idle(now, 1000) == []


def test_over_capacity_closes_the_least_recently_active_not_the_oldest_created():
    reg = Registry(max_open=2)
    a, b, c, d = _open(reg, 4)
    reg.touch(a)  # a was created first but used last
    b.inflight = 1
    assert reg.over_capacity() == [c, d]
    b.inflight = 0
    assert reg.over_capacity() == [b, c]
    reg.max_open = 4
    assert reg.over_capacity() == []


def test_affinity_counts_match_a_recount_through_opens_closes_and_url_changes():
    rng = random.Random(7)
    reg = Registry()
    for _ in range(3000):
        op = rng.random()
        agent = rng.choice("ab")
        if op < 0.45:
            t = reg.create(agent)
            reg.pick_slot(t, rng.choice((1, 2, 3, 3, 3)))
        elif op < 0.8 and reg.open:
            reg.close(rng.choice(list(reg.open)), "done")
        elif op < 0.9 and reg.open:
            t = reg.open[rng.choice(list(reg.open))]
            reg.pick_slot(t, rng.choice((2, 3)))  # fewer URLs than its slot: moved
        else:  # a URL goes down (or comes back): pinned trajectories move off it
            reg.mark_down(agent, rng.randrange(3), for_s=rng.choice((0.0, 60.0)))
        for name in "ab":
            want = [0] * 3
            for t in reg.open.values():
                if t.agent == name and t.slot is not None:
                    want[t.slot] += 1
            got = reg._slot_load.get(name, [])
            assert (got + [0] * 3)[:3] == want


def test_new_trajectories_go_to_the_least_loaded_url():
    reg = Registry()
    ts = _open(reg, 4)
    assert sorted(reg.pick_slot(t, 2) for t in ts) == [0, 0, 1, 1]
    for t in ts:
        if t.slot == 0:
            reg.close(t.id, "done")
    assert [reg.pick_slot(t, 2) for t in _open(reg, 2)] == [0, 0]


def test_a_url_marked_down_is_left_for_the_others_until_its_time_is_up(monkeypatch):
    reg = Registry()
    ts = _open(reg, 6)
    assert sorted(reg.pick_slot(t, 3) for t in ts) == [0, 0, 1, 1, 2, 2]
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    reg.mark_down("a", 1, for_s=10.0)
    assert sorted(reg.pick_slot(t, 3) for t in ts) == [0, 0, 0, 2, 2, 2]  # moved, spread
    assert sorted(reg.pick_slot(t, 3) for t in _open(reg, 2)) == [0, 2]
    assert all(reg.pick_slot(t, 3) != 1 for t in _open(reg, 4))  # new ones avoid it too
    reg.mark_down("a", 0, for_s=10.0)
    reg.mark_down("a", 2, for_s=10.0)
    pinned = [t.slot for t in reg.open.values()]
    assert [reg.pick_slot(t, 3) for t in reg.open.values()] == pinned  # all down: stay
    assert reg.pick_slot(_open(reg, 1, agent="b")[0], 3) == 0  # another agent's URLs
    clock[0] += 10.0
    assert reg.pick_slot(_open(reg, 1)[0], 3) == 1  # back, and the least loaded


async def test_the_sweep_gives_way_in_batches_and_spares_what_became_active(monkeypatch):
    reg = Registry(max_open=0)
    ts = _open(reg, 10)
    monkeypatch.setattr(lifespan, "SWEEP_BATCH", 3)
    closed: list[str] = []
    yields = 0
    real_sleep = asyncio.sleep

    async def end_trajectory(st: Any, t: Trajectory, status: str, **kw: Any) -> None:
        st.registry.close(t.id, status)
        closed.append(t.id)
        if len(closed) == 2:  # a call on ts[7] arrives while the sweep runs
            st.registry.touch(ts[7])
        if len(closed) == 3:
            ts[8].inflight = 1

    async def sleep(s: float) -> None:
        nonlocal yields
        if s == 0:
            yields += 1
            return await real_sleep(0)
        if closed:  # the second sweep: stop here
            raise asyncio.CancelledError
        await real_sleep(0)

    monkeypatch.setattr(lifespan, "end_trajectory", end_trajectory)
    monkeypatch.setattr(lifespan.asyncio, "sleep", sleep)
    st = SimpleNamespace(
        config=SimpleNamespace(idle_timeout_s=900.0, sweep_interval_s=0.01), registry=reg
    )
    with pytest.raises(asyncio.CancelledError):
        await lifespan._sweep(st)
    assert closed == [t.id for t in ts if t not in (ts[7], ts[8])]
    assert list(reg.open) == [ts[8].id, ts[7].id]
    assert yields == 3  # before the 4th, 7th and 10th (skipped ones count too)


def _threaded_step(tid: str, index: int, choice: int | None, reply: str) -> dict[str, Any]:
    extra = {} if choice is None else {"choice": choice}
    return records.make_step(
        trajectory=tid,
        index=index,
        agent="a",
        request={"messages": [{"role": "user", "content": f"q {tid}"}]},
        response={"message": {"role": "assistant", "content": reply}},
        metadata={"threading": "auto"},
        **extra,
    )


def test_restore_reopens_threaded_trajectories_and_skips_steps_it_cannot_read(
    tmp_path, monkeypatch, caplog
):
    pool = Pool.create(tmp_path / "pool")
    with pool.writer() as w:
        for tid in ("tr_a", "tr_b"):
            w.append(_threaded_step(tid, 0, 0, f"{tid} zero"))
            w.append(_threaded_step(tid, 0, 1, f"{tid} one"))
        w.append(_threaded_step("tr_c", 0, None, "c"))
    rows = pool.index().steps_of(["tr_a", "tr_b"])
    broken = {rows["tr_b"][0]["id"]}  # tr_b's choice 0: not its last row (choice 1 is)
    real = pool.read_steps

    def read_steps(rows: list[dict[str, Any]]) -> dict[str, Any]:
        got = real(rows)
        return {
            k: CorruptDataError("objects/x", "truncated") if k in broken else v
            for k, v in got.items()
        }

    monkeypatch.setattr(pool, "read_steps", read_steps)
    reg = Registry()
    with caplog.at_level("WARNING"):
        assert restore(reg, pool) == 3
    assert "cannot read step" in caplog.text
    for tid in ("tr_a", "tr_b", "tr_c"):
        assert reg.open[tid].next_index == 1 and reg.open[tid].threaded

    def continues(tid: str, reply: str) -> bool:
        msgs = [{"role": "user", "content": f"q {tid}"}, {"role": "assistant", "content": reply}]
        keys = prefix_keys("a", [*msgs, {"role": "user", "content": "more"}])
        return reg.find_thread(keys) is reg.open[tid]

    assert continues("tr_a", "tr_a zero") and continues("tr_a", "tr_a one")
    assert continues("tr_b", "tr_b one") and not continues("tr_b", "tr_b zero")
    assert continues("tr_c", "c")


def test_restore_lets_the_retry_of_a_call_that_failed_before_the_restart_go_on(tmp_path):
    error = {"type": "upstream_status", "message": "overloaded"}
    pool = Pool.create(tmp_path / "pool")
    asked = [{"role": "user", "content": "q"}]
    answered = [*asked, {"role": "assistant", "content": "a"}, {"role": "user", "content": "more"}]
    with pool.writer() as w:
        w.append(_threaded_step("tr_first", 0, None, "x") | {"status": "error", "error": error})
        w.append(_threaded_step("tr_later", 0, None, "a") | {"request": {"messages": asked}})
        failed = _threaded_step("tr_later", 1, None, "x") | {"request": {"messages": answered}}
        w.append(failed | {"status": "cancelled", "error": error})
    reg = Registry()
    assert restore(reg, pool) == 2
    first_again = prefix_keys("a", [{"role": "user", "content": "q tr_first"}])
    assert reg.find_thread(first_again) is reg.open["tr_first"]
    assert reg.find_thread(prefix_keys("a", answered)) is reg.open["tr_later"]


def test_restore_reads_each_journal_once_and_skips_live_writers_journals(tmp_path, monkeypatch):
    """Restart cost must not grow with the records in journals: a dead writer's open
    trajectories are read in one pass over their source, and a live writer's (another
    proxy on the pool) are its own, left without reading its journal."""
    from agentworld.pool import journal, reader

    pool = Pool.create(tmp_path / "pool")
    dead = pool.writer(name="dead")
    for i in range(30):
        dead.append(_threaded_step(f"tr_dead{i}", 0, None, "x"))
    dead.close(seal=False)  # a crashed writer: its journal stays, unlocked
    live = pool.writer(name="live")
    for i in range(30):
        live.append(_threaded_step(f"tr_live{i}", 0, None, "y"))
    live.flush()
    scans: list[str] = []
    real_scan = journal.scan_journal

    def counting(path, data=None):
        scans.append(path.name)
        return real_scan(path, data)

    monkeypatch.setattr(reader, "scan_journal", counting)
    pool.index()  # the index is built first (it reads each journal's new tail itself)
    reg = Registry()
    assert restore(reg, pool) == 30
    assert set(reg.open) == {f"tr_dead{i}" for i in range(30)}
    assert scans == [dead._journal.path.name]  # once, and never the live one
    live.close()
