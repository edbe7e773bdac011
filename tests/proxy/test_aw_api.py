"""The /aw/ lifecycle endpoints at their edges: an end while calls are in flight, rewards and
white-box steps naming steps, the state of ended trajectories, refusals an SDK must not retry."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import openai
import pytest

from agentworld.pool.fsck import fsck
from agentworld.proxy import aw_api
from agentworld.proxy.recorder import Recorder, RecordFailed
from agentworld.proxy.registry import Trajectory
from agentworld.proxy.stats import ProxyStats
from tests.proxy.conftest import ends_of, steps_of
from tests.proxy.test_proxy_trajectories import client, get, post

HELLO = [{"role": "user", "content": "hello"}]


async def created(proxy: Any, **body: Any) -> tuple[str, str]:
    """A new trajectory: (its id, its /aw/trajectories/<id> URL)."""
    status, made = await post(proxy.url + "/aw/trajectories", body)
    assert status == 200, made
    return made["trajectory"], f"{proxy.url}/aw/trajectories/{made['trajectory']}"


async def in_flight(proxy: Any, tid: str, n: int = 1) -> None:
    """Wait until ``n`` calls of ``tid`` are in flight."""
    for _ in range(500):
        t = proxy.state.registry.open.get(tid) or proxy.state.registry.ending.get(tid)
        if t is not None and t.inflight == n:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{tid} never had {n} calls in flight")


async def end_written(url: str) -> dict[str, Any]:
    for _ in range(500):
        _, state = await get(url)
        if state.get("end") == "written":
            return state
        await asyncio.sleep(0.01)
    raise AssertionError(f"{url}: the end record was never written")


def assert_end_last(pool: Any, tid: str, steps: int) -> dict[str, Any]:
    """The pool is sound (no step after its end record) and ``tid``'s end counts ``steps``."""
    report = fsck(pool)
    assert report.ok, report.problems
    (end,) = [e for e in ends_of(pool) if e["trajectory"] == tid]
    assert end["steps"] == steps == len([s for s in steps_of(pool) if s["trajectory"] == tid])
    return end


# -- complete while calls are in flight -------------------------------------------------------


async def test_complete_with_a_call_in_flight_past_the_wait_writes_the_end_after_its_step(
    make_proxy, pool, fake, monkeypatch
):
    """Once a 30 s wait ran out, the end record went out with steps 0 and the call's step
    came after it: fsck flagged it and readers dropped the agent's answer."""
    monkeypatch.setattr(aw_api, "COMPLETE_WAIT_S", 0.1)
    fake[0].hang_s = 1.0  # the call outlasts the wait
    proxy = await make_proxy()
    tid, url = await created(proxy)
    c = client(proxy.trajectory_url(tid))
    call = asyncio.create_task(c.chat.completions.create(model="hang", messages=HELLO))
    await in_flight(proxy, tid)
    status, done = await post(url + "/complete", {"reward": 1})
    assert status == 202, done
    assert done["end"] == "pending" and done["inflight"] == 1 and done["steps"] == 0
    status, state = await get(url)
    assert status == 200
    assert state["status"] == "done" and state["end"] == "pending" and state["inflight"] == 1
    # It takes no new call, and says so once (the SDK would retry a plain 409).
    with pytest.raises(openai.ConflictError, match="ended"):
        await c.chat.completions.create(model="m", messages=HELLO)
    answer = await call
    assert answer.choices[0].message.content
    state = await end_written(url)
    assert state["status"] == "done" and state["steps"] == 1 and state["reward"] == 1
    await c.close()
    await proxy.stop()
    end = assert_end_last(pool, tid, steps=1)
    assert end["reward"] == 1


async def test_an_end_pending_waits_for_the_step_of_a_call_the_agent_left(make_proxy, pool, fake):
    """A cancelled call's step is recorded in the background after the call is over: the end
    record waits for that too."""
    fake[0].hang_s = 30.0
    proxy = await make_proxy()
    tid, url = await created(proxy)
    c = client(proxy.trajectory_url(tid))
    call = asyncio.create_task(c.chat.completions.create(model="hang", messages=HELLO))
    await in_flight(proxy, tid)
    status, done = await post(url + "/complete", {"status": "failed", "wait_s": 0})
    assert status == 202 and done["end"] == "pending"
    call.cancel()  # the agent gives up: its connection closes
    with pytest.raises(asyncio.CancelledError):
        await call
    state = await end_written(url)
    assert state["status"] == "failed" and state["steps"] == 1
    await c.close()
    await proxy.stop()
    assert_end_last(pool, tid, steps=1)
    (step,) = steps_of(pool)
    assert step["status"] == "cancelled"


async def test_a_proxy_stopped_with_an_end_pending_writes_it_after_the_last_step(
    make_proxy, pool, fake
):
    fake[0].hang_s = 0.5
    proxy = await make_proxy()
    tid, url = await created(proxy)
    c = client(proxy.trajectory_url(tid))
    call = asyncio.create_task(c.chat.completions.create(model="hang", messages=HELLO))
    await in_flight(proxy, tid)
    status, done = await post(url + "/complete", {"wait_s": 0})
    assert status == 202 and done["end"] == "pending"
    await proxy.stop()  # lets the call finish, then its end goes out before the writer closes
    assert (await call).choices[0].message.content
    await c.close()
    assert_end_last(pool, tid, steps=1)


async def test_complete_waits_for_calls_that_land_within_wait_s(make_proxy, pool, fake):
    fake[0].hang_s = 0.3
    proxy = await make_proxy()
    tid, url = await created(proxy)
    c = client(proxy.trajectory_url(tid))
    call = asyncio.create_task(c.chat.completions.create(model="hang", messages=HELLO))
    await in_flight(proxy, tid)
    status, done = await post(url + "/complete", {"wait_s": 10})
    assert status == 200 and done["end"] == "written" and done["steps"] == 1
    await call
    _, other = await created(proxy)
    status, bad = await post(other + "/complete", {"wait_s": -1})
    assert status == 400 and bad["error"]["param"] == "wait_s"
    status, state = await get(other)
    assert status == 200 and state["status"] == "open"  # refused: still open
    await c.close()
    await proxy.stop()
    assert_end_last(pool, tid, steps=1)


class _Writer:
    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    async def append_async(self, rec: dict[str, Any]) -> None:
        self.lines.append(rec)


@pytest.mark.parametrize("strict", [False, True])
async def test_the_recorder_writes_no_step_after_its_trajectorys_end(strict):
    writer = _Writer()
    stats = ProxyStats()
    recorder = Recorder(writer, stats, strict=strict)
    t = Trajectory(id="tr_1", agent="a")
    await recorder.end(t, {"kind": "end", "id": "en_1", "trajectory": "tr_1", "steps": 0})
    late = {"kind": "step", "id": "st_1", "trajectory": "tr_1", "index": 0, "status": "ok"}
    if strict:
        with pytest.raises(RecordFailed, match="end record is already written"):
            await recorder.steps(t, [late])
    else:
        await recorder.steps(t, [late])
    assert [r["id"] for r in writer.lines] == ["en_1"]
    assert t.steps == 0 and stats.errors["record"] == 1


# -- rewards and white-box steps name steps of their trajectory ------------------------------


async def test_a_reward_for_a_step_id_that_is_not_the_trajectorys_is_a_404(proxy, pool):
    """Each was a 200, and a label for a step that does not exist, or for another trajectory's."""
    tid, url = await created(proxy)
    other, _ = await created(proxy)
    for t in (tid, other):
        c = client(proxy.trajectory_url(t))
        await c.chat.completions.create(model="m", messages=HELLO)
        await c.close()
    own = proxy.state.registry.open[tid].step_ids[0][0]
    foreign = proxy.state.registry.open[other].step_ids[0][0]
    for target, step in [
        (url, foreign),
        (url, "st_typo"),
        (f"{proxy.url}/aw/trajectories/tr_doesnotexist", "st_typo"),
    ]:
        status, body = await post(target + "/reward", {"reward": 0.9, "step": step})
        assert status == 404, (target, step, body)
        assert repr(step) in body["error"]["message"] and body["error"]["param"] == "step"
    status, body = await post(url + "/reward", {"reward": 0.9, "step": own})
    assert status == 200 and body["labelled"] == [f"step:{own}"]
    status, _ = await post(url + "/complete", {})
    assert status == 200
    # Ended: the index knows its steps.
    status, body = await post(url + "/reward", {"reward": 0.5, "step": own})
    assert status == 200 and body["labelled"] == [f"step:{own}"]
    status, body = await post(url + "/reward", {"reward": 0.5, "step": foreign})
    assert status == 404 and repr(foreign) in body["error"]["message"]
    await proxy.stop()
    labelled = {k for k in pool.labels.effective() if k.startswith("step:")}
    assert labelled == {f"step:{own}"}


async def test_a_white_box_step_index_already_taken_is_a_409(proxy, pool):
    tid, _ = await created(proxy, agent="wb")
    step = {"trajectory": tid, "index": 0, "messages": HELLO, "completion": "4"}
    status, body = await post(proxy.url + "/aw/steps", step)
    assert status == 200 and body["index"] == 0, body
    for again in (step, {**step, "choice": 0}):
        status, body = await post(proxy.url + "/aw/steps", again)
        assert status == 409, (again, body)
        assert repr(tid) in body["error"]["message"] and "step 0" in body["error"]["message"]
        assert body["error"]["param"] == "index"
    status, body = await post(proxy.url + "/aw/steps", {**step, "choice": 1})
    assert status == 200  # another choice of it, in order
    status, body = await post(proxy.url + "/aw/steps", {**step, "choice": 1})
    assert status == 409 and "choice 1" in body["error"]["message"]
    # A proxied call takes the next index; a white-box step cannot take it again.
    c = client(proxy.trajectory_url(tid))
    r = await c.with_raw_response.chat.completions.create(model="m", messages=HELLO)
    await c.close()
    assert r.headers["X-AW-Step"] == "1"
    status, body = await post(proxy.url + "/aw/steps", {**step, "index": 1})
    assert status == 409 and "step 1" in body["error"]["message"]
    status, body = await post(proxy.url + "/aw/steps", {**step, "index": None})
    assert status == 200 and body["index"] == 2
    # Two sent at once for one new index: the first claims it before it is written.
    sent = await asyncio.gather(
        *(post(proxy.url + "/aw/steps", {**step, "index": 5}) for _ in range(2))
    )
    assert sorted(status for status, _ in sent) == [200, 409]
    await proxy.stop()
    taken = sorted((s["index"], s.get("choice", -1)) for s in steps_of(pool))
    assert taken == [(0, -1), (0, 1), (1, -1), (2, -1), (5, -1)]


# -- the state of ended trajectories ----------------------------------------------------------


async def test_the_state_of_an_ended_trajectory_is_how_it_ended(make_proxy, pool):
    """It was a 409, as for a call into it."""
    proxy = await make_proxy()
    tid, url = await created(proxy, task="q1")
    c = client(proxy.trajectory_url(tid))
    await c.chat.completions.create(model="m", messages=HELLO)
    await c.close()
    status, _ = await post(url + "/complete", {"status": "failed", "reward": 0.5})
    assert status == 200
    want = {"status": "failed", "end": "written", "steps": 1, "reward": 0.5, "task": "q1"}
    status, state = await get(url)
    assert status == 200 and want.items() <= state.items(), state
    status, state = await get(f"{proxy.url}/aw/trajectories/tr_doesnotexist")
    assert status == 404
    await proxy.stop()
    # A restarted proxy knows it from the pool.
    again = await make_proxy()
    status, state = await get(f"{again.url}/aw/trajectories/{tid}")
    assert status == 200 and want.items() <= state.items(), state


# -- refusals an SDK must not retry -------------------------------------------------------------


async def test_the_proxys_own_404s_and_409s_tell_sdks_not_to_retry(proxy):
    """openai-python retried each 409 twice (about 1.5 s) before raising ConflictError."""
    tid, url = await created(proxy)
    status, _ = await post(url + "/complete", {})
    assert status == 200
    c = openai.AsyncOpenAI(base_url=proxy.trajectory_url(tid), api_key="k", max_retries=2)
    with pytest.raises(openai.ConflictError):
        await c.chat.completions.create(model="m", messages=HELLO)
    await c.close()
    assert proxy.state.stats.by_route[("openai.chat", 409)] == 1  # asked once, not three times
    async with aiohttp.ClientSession() as h:
        for method, path, body in [
            ("POST", f"/t/{tid}/v1/chat/completions", {"model": "m", "messages": HELLO}),
            ("POST", f"/t/{tid}/v1/messages", {"model": "m", "max_tokens": 9, "messages": HELLO}),
            ("POST", f"/t/{tid}/v1/messages/count_tokens", {"model": "m", "messages": HELLO}),
            ("POST", "/t/tr_nope/v1/chat/completions", {"model": "m", "messages": HELLO}),
            ("POST", f"/aw/trajectories/{tid}/complete", {}),
            ("POST", "/aw/trajectories", {"trajectory": tid}),
            ("GET", "/aw/trajectories/tr_nope", None),
            ("POST", "/aw/steps", {"trajectory": "tr_nope"}),
        ]:
            async with h.request(method, proxy.url + path, json=body) as r:
                assert r.status in (404, 409), (path, await r.text())
                assert r.headers.get("x-should-retry") == "false", (path, r.headers)
        async with h.post(proxy.url + "/aw/trajectories", json={"agent": 7}) as r:
            assert r.status == 400 and "x-should-retry" not in r.headers


async def test_seal_makes_a_running_proxys_records_a_shard(make_proxy, pool) -> None:
    """A running proxy's records sat in its git-ignored journal until it stopped (or wrote
    64 MB): `git add pool` committed none of them. POST /aw/seal, and `aw pool seal
    --proxy URL`, seal them into a shard while it goes on serving."""
    from typer.testing import CliRunner

    from agentworld.cli import app

    proxy = await make_proxy(auth_token="tok")
    auth = {"Authorization": "Bearer tok"}
    c = client(proxy.base_url, default_headers=auth)
    await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert pool.layout.shard_paths() == []
    assert (await post(proxy.url + "/aw/seal", {}))[0] == 401  # its token, as every route
    status, answer = await post(proxy.url + "/aw/seal", {}, headers=auth)
    assert (status, answer["sealed"]) == (200, True)
    assert len(pool.layout.shard_paths()) == 1 and len(steps_of(pool)) == 1
    assert (await post(proxy.url + "/aw/seal", {}, headers=auth))[1]["sealed"] is False

    await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "again"}])
    args = ["pool", "seal", "--pool", str(pool.root), "--proxy", proxy.base_url]
    res = await asyncio.to_thread(CliRunner().invoke, app, [*args, "--proxy-token", "tok"])
    assert res.exit_code == 0, res.output
    assert f"aw proxy at {proxy.url}: sealed its journal into a shard" in res.output
    assert len(pool.layout.shard_paths()) == 2
    res = await asyncio.to_thread(CliRunner().invoke, app, args)  # no token
    assert res.exit_code != 0 and "POST /aw/seal answered 401" in str(res.exception)
    await c.close()
