"""Trajectories: automatic threading, explicit ids, lifecycle endpoints, affinity, idle timeout,
restart, policy versions."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import openai
import pytest
from aiohttp.test_utils import TestServer

from agentworld.errors import ConfigError
from agentworld.proxy.config import ProxyConfig, UpstreamConfig
from agentworld.proxy.fake_upstream import FakeUpstream, make_fake_app
from agentworld.proxy.inprocess import ProxyServer
from agentworld.seeds import derive
from tests.proxy.conftest import ends_of, steps_of

TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]


def client(url: str, **kw: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url, api_key="k", max_retries=0, **kw)


async def post(url: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as s, s.post(url, json=body, **kw) as r:
        return r.status, await r.json(content_type=None)


async def get(url: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as s, s.get(url) as r:
        return r.status, await r.json(content_type=None)


def as_message(m: Any) -> dict[str, Any]:
    """What an agent sends back: the assistant message as it received it."""
    return m.model_dump(exclude_none=True)


async def converse(c: openai.AsyncOpenAI, opening: str, turns: int) -> list[dict[str, Any]]:
    """A multi-turn agent: a tool call turn in the middle, resending the whole history each time."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": opening},
    ]
    for turn in range(turns):
        tools = TOOLS if turn == 1 else None
        kw = {"tools": tools} if tools else {}
        r = await c.chat.completions.create(model="m", messages=messages, **kw)
        msg = r.choices[0].message
        messages.append(as_message(msg))
        if msg.tool_calls:
            messages.append(
                {"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": "found it"}
            )
        else:
            messages.append({"role": "user", "content": f"turn {turn + 2} of {opening}"})
    return messages


async def test_five_turn_conversations_thread_automatically(proxy, pool):
    c = client(proxy.base_url)
    await asyncio.gather(converse(c, "first task", 5), converse(c, "second task", 5))
    await c.close()
    await proxy.stop()
    steps = steps_of(pool)
    by_traj: dict[str, list[dict[str, Any]]] = {}
    for s in steps:
        by_traj.setdefault(s["trajectory"], []).append(s)
    assert len(by_traj) == 2
    for group in by_traj.values():
        assert sorted(s["index"] for s in group) == [0, 1, 2, 3, 4]
        openings = {s["request"]["messages"][1]["content"] for s in group}
        assert len(openings) == 1  # each trajectory is one conversation
        assert all(s["metadata"]["threading"] == "auto" for s in group)
        # The turn after the tool call continues it (the tool result is in its prompt).
        by_index = {s["index"]: s for s in group}
        assert by_index[2]["request"]["messages"][-1]["role"] == "tool"


async def test_unrelated_request_starts_a_new_trajectory(proxy, pool):
    c = client(proxy.base_url)
    msgs = [{"role": "user", "content": "a"}]
    r = await c.chat.completions.create(model="m", messages=msgs)
    # Same opening, but the agent changed its earlier answer: not a continuation.
    edited = [
        *msgs,
        {"role": "assistant", "content": "something else"},
        {"role": "user", "content": "b"},
    ]
    await c.chat.completions.create(model="m", messages=edited)
    cont = [*msgs, as_message(r.choices[0].message), {"role": "user", "content": "b"}]
    await c.chat.completions.create(model="m", messages=cont)
    await c.close()
    await proxy.stop()
    steps = sorted(steps_of(pool), key=lambda s: s["timings"]["started_at"])
    assert steps[0]["trajectory"] == steps[2]["trajectory"] != steps[1]["trajectory"]
    assert [s["index"] for s in steps] == [0, 0, 1]


async def test_a_conversation_that_branches_off_another_says_where(proxy, pool):
    """A conversation that goes on from another's step without continuing its trajectory
    (from a point another call already took, or from its prompt with a turn of its own in
    place of the answer: a retried branch, a sub-agent forked from the session) starts a
    trajectory of its own whose first step names the step it branched off and how many
    messages they share. A twin of a first call and a fresh conversation name none."""
    c = client(proxy.base_url)
    opening = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "task"}]
    r0 = await c.chat.completions.create(model="m", messages=opening)
    said = as_message(r0.choices[0].message)
    turn = [*opening, said, {"role": "user", "content": "go on"}]
    r1 = await c.chat.completions.create(model="m", messages=turn)
    other_way = [*opening, said, {"role": "user", "content": "try another way"}]
    await c.chat.completions.create(model="m", messages=other_way)
    await c.chat.completions.create(
        model="m", messages=[*opening, {"role": "user", "content": "x"}]
    )
    await c.chat.completions.create(model="m", messages=opening)
    await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "unrelated"}])
    more = [*turn, as_message(r1.choices[0].message), {"role": "user", "content": "more"}]
    await c.chat.completions.create(model="m", messages=more)
    await c.close()
    await proxy.stop()
    steps = sorted(steps_of(pool), key=lambda s: s["timings"]["started_at"])
    main = steps[0]["trajectory"]
    assert [(s["trajectory"] == main, s["index"]) for s in steps] == [
        (True, 0),
        (True, 1),
        (False, 0),
        (False, 0),
        (False, 0),
        (False, 0),
        (True, 2),
    ]
    assert len({s["trajectory"] for s in steps}) == 5
    assert [s["metadata"].get("forked_from") for s in steps] == [
        None,
        None,
        {"trajectory": main, "step": 0, "messages": 3},  # after step 0's answer
        {"trajectory": main, "step": 0, "messages": 2},  # after step 0's prompt
        None,
        None,
        None,
    ]


async def test_a_step_reward_right_after_complete_finds_a_step_not_yet_committed(make_proxy, pool):
    """An ended trajectory's steps are looked up in the pool's index; in batched mode the
    last of them may still be queued in the writer, and must be found all the same."""
    proxy = await make_proxy(commit_interval_s=30.0)  # nothing commits on its own meanwhile
    status, created = await post(proxy.url + "/aw/trajectories", {"agent": "solver"})
    assert status == 200
    tid = created["trajectory"]
    c = client(created["base_url"])
    await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    await c.close()
    status, _ = await post(f"{proxy.url}/aw/trajectories/{tid}/complete", {})
    assert status == 200
    status, body = await post(f"{proxy.url}/aw/trajectories/{tid}/reward", {"reward": 1, "step": 0})
    assert status == 200, body
    assert body["labelled"][0].startswith("step:st_")
    status, body = await post(f"{proxy.url}/aw/trajectories/{tid}/reward", {"reward": 1, "step": 1})
    assert status == 404 and "no step 1" in body["error"]["message"]
    await proxy.stop()
    (step,) = steps_of(pool)
    assert pool.labels.effective()[f"step:{step['id']}"]["reward"].value == 1


async def test_malformed_lifecycle_calls_are_400s_that_change_nothing(proxy, pool):
    """Each was once a 500 (found by fuzzing the proxy), or an end record refused by the
    pool after the trajectory had been closed: it then never ended in the pool."""
    deep: Any = 1
    for _ in range(80):
        deep = [deep]
    status, body = await post(proxy.url + "/aw/trajectories", {"metadata": {"x": deep}})
    assert status == 400 and body["error"]["param"].startswith("metadata.x")
    status, created = await post(proxy.url + "/aw/trajectories", {"agent": "solver"})
    tid = created["trajectory"]
    url = f"{proxy.url}/aw/trajectories/{tid}"
    for path, bad, param in [
        ("/complete", {"status": {}}, "status"),
        ("/complete", {"metadata": {"x": deep}}, "metadata.x"),
        ("/complete", {"error": "e" * 70_000}, "error.message"),
        ("/reward", {"reward": 1, "step": ""}, "step"),
        ("/reward", {"reward": 1, "step": 0, "choice": -1}, "choice"),
    ]:
        status, body = await post(url + path, bad)
        assert status == 400, (path, bad, body)
        assert body["error"]["param"].startswith(param), body
    status, state = await get(url)
    assert status == 200 and state["status"] == "open"  # still open: it can end properly
    status, done = await post(url + "/complete", {"status": "done", "reward": 1})
    assert status == 200 and done["status"] == "done"
    await proxy.stop()
    (end,) = ends_of(pool)
    assert end["trajectory"] == tid and end["reward"] == 1


async def test_explicit_trajectories_path_headers_and_lifecycle(proxy, pool):
    status, created = await post(
        proxy.url + "/aw/trajectories",
        {"agent": "solver", "dataset": "gsm8k", "split": "train", "task": "q-17", "group": "g1"},
    )
    assert status == 200
    tid = created["trajectory"]
    assert created["base_url"] == f"{proxy.url}/t/{tid}/v1"
    c = client(created["base_url"])
    for i in range(2):
        await c.chat.completions.create(model="m", messages=[{"role": "user", "content": f"x{i}"}])
    h = client(proxy.base_url, default_headers={"X-AW-Trajectory": tid})
    await h.chat.completions.create(model="m", messages=[{"role": "user", "content": "by header"}])
    status, body = await post(
        f"{proxy.url}/aw/trajectories/{tid}/reward", {"reward": 0.5, "step": 1}
    )
    assert status == 200 and body["labelled"][0].startswith("step:")
    status, _ = await post(f"{proxy.url}/aw/trajectories/{tid}/reward", {"reward": 1.0})
    assert status == 200
    status, done = await post(f"{proxy.url}/aw/trajectories/{tid}/complete", {"status": "done"})
    assert status == 200 and done["steps"] == 3 and done["reward"] == 1.0
    status, again = await post(f"{proxy.url}/aw/trajectories/{tid}/complete", {})
    assert status == 409 and "ended" in again["error"]["message"]
    # A late call on an ended trajectory is refused, not silently re-opened.
    with pytest.raises(openai.ConflictError, match="ended"):
        await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "late"}])
    # A reward that arrives after the end goes into the label overlay (shards never change).
    status, late_reward = await post(f"{proxy.url}/aw/trajectories/{tid}/reward", {"reward": 0.25})
    assert status == 200 and late_reward["labelled"] == [f"trajectory:{tid}"]
    status, _ = await post(f"{proxy.url}/aw/trajectories/{tid}/reward", {"reward": 0.1, "step": 0})
    assert status == 200
    status, err = await post(f"{proxy.url}/aw/trajectories/{tid}/reward", {"reward": "high"})
    assert status == 400 and err["error"]["param"] == "reward"
    await c.close()
    await h.close()
    await proxy.stop()
    assert pool.labels.effective()[f"trajectory:{tid}"]["reward"].value == 0.25
    steps = steps_of(pool)
    assert sorted(s["index"] for s in steps) == [0, 1, 2]
    assert {(s["agent"], s["dataset"], s["split"], s["task"], s["group"]) for s in steps} == {
        ("solver", "gsm8k", "train", "q-17", "g1")
    }
    (end,) = ends_of(pool)
    assert end["status"] == "done" and end["steps"] == 3 and end["reward"] == 1.0
    labelled = next(s for s in steps if s["index"] == 1)
    assert pool.labels.effective()[f"step:{labelled['id']}"]["reward"].value == 0.5


async def test_a_seeded_trajectory_seeds_each_call_the_agent_left_unseeded(proxy, pool):
    """`aw run --seed`: each call gets ``derive(trajectory seed, step index)`` upstream (in
    the step's request params and metadata), on a translated protocol too; an agent's own
    seed wins; a trajectory opened without one sends none; a bad seed is a 400."""
    import anthropic

    for bad in (-1, "7", True, 2**63, 1.5):
        status, body = await post(proxy.url + "/aw/trajectories", {"seed": bad})
        assert status == 400 and body["error"]["param"] == "seed", (bad, body)
    _, seeded = await post(proxy.url + "/aw/trajectories", {"agent": "solver", "seed": 11})
    _, plain = await post(proxy.url + "/aw/trajectories", {"agent": "solver"})
    c = client(seeded["base_url"])
    await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}])
    await c.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "b"}], seed=5, stream=True
    )
    claude = anthropic.AsyncAnthropic(
        base_url=seeded["anthropic_base_url"], api_key="k", max_retries=0
    )
    await claude.messages.create(
        model="m", max_tokens=16, messages=[{"role": "user", "content": "c"}]
    )
    await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "d"}])
    u = client(plain["base_url"])
    await u.chat.completions.create(model="m", messages=[{"role": "user", "content": "e"}])
    for x in (c, claude, u):
        await x.close()
    await proxy.stop()
    steps = {s["index"]: s for s in steps_of(pool) if s["trajectory"] == seeded["trajectory"]}
    assert steps[0]["request"]["params"]["seed"] == derive(11, 0) == steps[0]["metadata"]["seed"]
    assert steps[1]["request"]["params"]["seed"] == 5 and "seed" not in steps[1]["metadata"]
    assert steps[2]["metadata"]["seed"] == derive(11, 2)  # the Anthropic call, translated
    assert steps[3]["request"]["params"]["seed"] == derive(11, 3) != derive(11, 0)
    assert {s["metadata"]["trajectory_seed"] for s in steps.values()} == {11}
    (unseeded,) = [s for s in steps_of(pool) if s["trajectory"] == plain["trajectory"]]
    assert "seed" not in unseeded["request"]["params"] and "seed" not in unseeded["metadata"]
    assert "trajectory_seed" not in unseeded["metadata"]


async def test_a_seeded_trajectory_stays_seeded_across_a_restart(make_proxy, pool):
    """A proxy restart reopens a seeded trajectory with its seed: the next call is sent
    the seed a proxy that never stopped would have sent it."""
    first = await make_proxy()
    _, created = await post(first.url + "/aw/trajectories", {"agent": "solver", "seed": 11})
    tid = created["trajectory"]
    c = client(first.trajectory_url(tid))
    await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}], seed=3)
    await c.close()
    await first.stop()

    second = await make_proxy()
    c = client(second.trajectory_url(tid))
    await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "b"}])
    await c.close()
    await second.stop()
    steps = {s["index"]: s for s in steps_of(pool) if s["trajectory"] == tid}
    assert steps[0]["request"]["params"]["seed"] == 3  # the agent's own; the trajectory's kept
    assert steps[1]["request"]["params"]["seed"] == derive(11, 1) == steps[1]["metadata"]["seed"]


async def test_group_and_agent_path_segments(proxy, pool):
    _, created = await post(proxy.url + "/aw/trajectories", {})
    tid = created["trajectory"]
    c = client(f"{proxy.url}/t/{tid}/g/grp-9/a/someone/v1")
    await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    await c.close()
    await proxy.stop()
    (step,) = steps_of(pool)
    assert step["trajectory"] == tid  # the trajectory's own agent and group win once it exists


async def test_whitebox_steps(proxy, pool):
    _, created = await post(proxy.url + "/aw/trajectories", {"agent": "wb"})
    tid = created["trajectory"]
    step = {
        "trajectory": tid,
        "messages": [{"role": "user", "content": "2+2?"}],
        "response": {"message": {"content": "4"}, "finish_reason": "stop"},
        "tokens": {
            "prompt_ids": [1, 2, 3],
            "completion_ids": [52, 2],
            "completion_logprobs": [-0.1, -0.2],
        },
        "policy_version": 3,
    }
    status, body = await post(proxy.url + "/aw/steps", step)
    assert status == 200 and body["index"] == 0
    bad = {**step, "tokens": {"completion_ids": [1, 2], "completion_logprobs": [-0.1]}}
    status, err = await post(proxy.url + "/aw/steps", bad)
    assert status == 400 and "completion_logprobs" in err["error"]["message"]
    status, err = await post(proxy.url + "/aw/steps", {**step, "trajectory": "tr_nope"})
    assert status == 404
    await proxy.stop()
    (rec,) = steps_of(pool)
    assert rec["protocol"] == "whitebox" and rec["tokens"]["source"] == "engine"
    assert rec["policy_version"] == 3 and rec["agent"] == "wb"


async def two_upstreams() -> tuple[list[FakeUpstream], list[TestServer], tuple[str, ...]]:
    """Two running fake upstreams (s0, s1): their states, servers and URLs."""
    fakes = [FakeUpstream("s0"), FakeUpstream("s1")]
    servers = [TestServer(make_fake_app(f), host="127.0.0.1") for f in fakes]
    for s in servers:
        await s.start_server()
    return fakes, servers, tuple(str(s.make_url("")).rstrip("/") for s in servers)


async def create_trajectories(proxy: Any, n: int, **body: Any) -> list[dict[str, Any]]:
    """``n`` trajectories made through POST /aw/trajectories (each with its ``base_url``)."""
    made = []
    for _ in range(n):
        status, created = await post(proxy.url + "/aw/trajectories", body)
        assert status == 200, created
        made.append(created)
    return made


async def test_trajectory_affinity_across_upstreams(pool):
    fakes, servers, urls = await two_upstreams()
    cfg = ProxyConfig(agents={"a": UpstreamConfig(urls=urls)})
    async with ProxyServer(cfg, pool) as proxy:
        trajectories = await create_trajectories(proxy, 4, agent="a")
        for turn in range(3):
            for t in trajectories:
                c = client(t["base_url"])
                await c.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": f"t{turn}"}]
                )
                await c.close()
    for s in servers:
        await s.close()
    by_traj: dict[str, set[str]] = {}
    for s in steps_of(pool):
        by_traj.setdefault(s["trajectory"], set()).add(s["metadata"]["upstream"])
    assert all(len(u) == 1 for u in by_traj.values())  # one episode, one server
    assert [len(f.requests) for f in fakes] == [6, 6]  # and the load is spread


@pytest.mark.parametrize("stream", [False, True])
async def test_when_an_upstream_url_goes_down_its_trajectories_move_to_another(pool, stream):
    fakes, servers, urls = await two_upstreams()
    cfg = ProxyConfig(agents={"a": UpstreamConfig(urls=urls)})
    async with ProxyServer(cfg, pool) as proxy:
        clients = [client(t["base_url"]) for t in await create_trajectories(proxy, 4, agent="a")]

        async def turn(n: int) -> None:
            for c in clients:
                msgs = [{"role": "user", "content": f"t{n}"}]
                if stream:
                    got = await c.chat.completions.create(model="m", messages=msgs, stream=True)
                    assert "".join([x.choices[0].delta.content or "" async for x in got])
                else:
                    r = await c.chat.completions.create(model="m", messages=msgs)
                    assert r.choices[0].message.content

        await turn(0)
        await servers[1].close()  # s1 dies: connections to it are refused
        await turn(1)
        await turn(2)
        _, stats = await get(proxy.url + "/aw/stats")
        (down,) = stats["upstreams_down"]
        assert down["agent"] == "a" and down["url"] == urls[1] and 0 < down["seconds_left"] <= 10
        for c in clients:
            await c.close()
    await servers[0].close()
    steps = steps_of(pool)
    assert len(steps) == 12 and all(s["status"] == "ok" for s in steps)
    later = [s for s in steps if s["index"] > 0]
    assert {s["metadata"]["upstream"] for s in later} == {urls[0]}  # all on s0 now
    failed = [s for s in later if s["metadata"].get("upstream_failed")]
    # The first call that found s1 down tried it; the others moved before trying.
    assert [s["metadata"]["upstream_failed"] for s in failed] == [[urls[1]]]
    assert len(fakes[0].requests) == 2 + 8


async def test_a_passed_through_call_avoids_a_url_that_is_down(pool):
    _, servers, urls = await two_upstreams()
    cfg = ProxyConfig(agents={"a": UpstreamConfig(urls=urls)})
    await servers[0].close()
    async with ProxyServer(cfg, pool) as proxy:
        c = client(proxy.base_url)
        for n in range(2):  # one of them finds s0 down and moves to s1
            await c.chat.completions.create(
                model="a", messages=[{"role": "user", "content": f"{n}"}]
            )
        await c.close()
        status, models = await get(proxy.base_url + "/models")
        assert status == 200 and models["data"][0]["owned_by"] == "s1"
    await servers[1].close()


async def test_idle_trajectories_close_as_timeout(make_proxy, pool):
    proxy = await make_proxy(idle_timeout_s=0.2)
    c = client(proxy.base_url)
    await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    await c.close()
    for _ in range(200):
        if proxy.state.stats.trajectories_done:
            break
        await asyncio.sleep(0.02)
    await proxy.stop()
    (end,) = ends_of(pool)
    assert end["status"] == "timeout" and end["steps"] == 1
    assert end["error"]["type"] == "idle_timeout"


async def test_restart_keeps_open_trajectories(make_proxy, pool):
    first = await make_proxy()
    _, created = await post(first.url + "/aw/trajectories", {"agent": "default", "task": "t1"})
    tid = created["trajectory"]
    c = client(first.trajectory_url(tid))
    await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "one"}])
    a = client(first.base_url)
    msgs = [{"role": "user", "content": "threaded"}]
    r = await a.chat.completions.create(model="m", messages=msgs)
    await c.close()
    await a.close()
    await first.stop()

    second = await make_proxy()
    c = client(second.trajectory_url(tid))
    await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "two"}])
    a = client(second.base_url)
    await a.chat.completions.create(
        model="m",
        messages=[*msgs, as_message(r.choices[0].message), {"role": "user", "content": "more"}],
    )
    status, done = await post(f"{second.url}/aw/trajectories/{tid}/complete", {"reward": 1})
    assert status == 200 and done["steps"] == 2
    await c.close()
    await a.close()
    await second.stop()
    steps = steps_of(pool)
    mine = sorted(s["index"] for s in steps if s["trajectory"] == tid)
    assert mine == [0, 1]
    others = [s for s in steps if s["trajectory"] != tid]
    assert len({s["trajectory"] for s in others}) == 1  # the threaded conversation resumed
    assert sorted(s["index"] for s in others) == [0, 1]
    assert {s["task"] for s in steps if s["trajectory"] == tid} == {"t1"}


@pytest.mark.parametrize("choice", [0, 1])
async def test_after_a_restart_a_conversation_continues_from_either_choice_of_its_last_call(
    make_proxy, pool, choice
):
    """The continuation points of an n=2 call come back from the pool, one per choice."""
    first = await make_proxy()
    a = client(first.base_url)
    msgs = [{"role": "user", "content": "pick one"}]
    r = await a.chat.completions.create(model="m", messages=msgs, n=2)
    await a.close()
    await first.stop()
    second = await make_proxy()
    a = client(second.base_url)
    picked = as_message(r.choices[choice].message)
    await a.chat.completions.create(
        model="m", messages=[*msgs, picked, {"role": "user", "content": "go on"}]
    )
    await a.close()
    await second.stop()
    steps = steps_of(pool)
    assert len({s["trajectory"] for s in steps}) == 1
    assert sorted(s["index"] for s in steps) == [0, 0, 1]  # the two choices of step 0, then 1


async def test_proxies_sharing_a_pool_take_back_only_their_own_trajectories(make_proxy, pool):
    """Two named proxies on one pool: after a restart each reopens (and times out) only the
    trajectories it served; the other's stay open for it."""

    async def ask(proxy, text: str) -> None:
        c = client(proxy.base_url)
        await c.chat.completions.create(model="m", messages=[{"role": "user", "content": text}])
        await c.close()

    a, b = await make_proxy(instance="a"), await make_proxy(instance="b")
    await ask(a, "from a")
    await ask(b, "from b")
    await a.stop()
    await b.stop()
    steps = {s["request"]["messages"][0]["content"]: s for s in steps_of(pool)}
    assert steps["from a"]["metadata"]["proxy"] == "a"
    assert steps["from b"]["metadata"]["proxy"] == "b"
    ta, tb = steps["from a"]["trajectory"], steps["from b"]["trajectory"]

    unnamed = await make_proxy()  # its own steps would carry no name: it takes neither
    assert set(unnamed.state.registry.open) == set()
    await unnamed.stop()
    a2 = await make_proxy(instance="a", idle_timeout_s=0.2, sweep_interval_s=0.05)
    assert set(a2.state.registry.open) == {ta}
    for _ in range(100):
        if not a2.state.registry.open:
            break
        await asyncio.sleep(0.05)
    await a2.stop()
    (end,) = ends_of(pool)  # a's, timed out by a; b's is still open
    assert end["trajectory"] == ta and end["status"] == "timeout"
    b2 = await make_proxy(instance="b")
    assert set(b2.state.registry.open) == {tb}
    await ask(b2, "from b again")  # a new conversation: a new trajectory, not a's or b's
    await b2.stop()
    assert {s["metadata"]["proxy"] for s in steps_of(pool)} == {"a", "b"}


@pytest.mark.parametrize("name", ["", " a", "a\n", "x" * 129])
def test_instance_names_are_checked(name):
    with pytest.raises(ConfigError, match="--instance"):
        ProxyConfig(default_upstream=UpstreamConfig.single("http://x"), instance=name)


async def test_policy_version_from_endpoint_and_upstream_header(make_proxy, pool, fake):
    proxy = await make_proxy()
    c = client(proxy.base_url)
    await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "v0"}])
    status, body = await post(proxy.url + "/aw/policy", {"version": 4})
    assert status == 200 and body == {"policy_version": 4, "saved": True}
    await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "v4"}])
    fake[0].policy_version = 9
    await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "v9"}])
    status, _ = await post(proxy.url + "/aw/policy", {"version": -1})
    assert status == 400
    assert proxy.state.policy_version == 9
    # An answer sampled by an older policy (in flight across a reload, or a replica not
    # reloaded yet) is stamped with its own version but does not take the proxy back:
    # a trainer's catch-up read 0 here once, after it had published 2.
    fake[0].policy_version = 8
    await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "late"}])
    _, body = await get(proxy.url + "/aw/policy")
    assert body["policy_version"] == 9 and body["source"] == "X-AW-Policy-Version"
    status, body = await post(proxy.url + "/aw/policy", {"version": 3})  # explicit: it wins
    assert status == 200 and proxy.state.policy_version == 3
    await c.close()
    await proxy.stop()
    got = {s["request"]["messages"][0]["content"]: s["policy_version"] for s in steps_of(pool)}
    assert got == {"v0": 0, "v4": 4, "v9": 9, "late": 8}


async def test_headers_and_query_label_new_trajectories(proxy, pool):
    headers = {
        "X-AW-Agent": "rag-bot",
        "X-AW-Group": "g7",
        "X-AW-Task": "task 12",
        "X-AW-Dataset": "hotpot",
    }
    c = client(proxy.base_url, default_headers=headers)
    await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    q = client(
        proxy.base_url, default_query={"agent": "query-bot", "group": "g8"}, default_headers=headers
    )
    await q.chat.completions.create(model="m", messages=[{"role": "user", "content": "q2"}])
    await c.close()
    await q.close()
    await proxy.stop()
    got = sorted((s["agent"], s["group"], s["task"], s["dataset"]) for s in steps_of(pool))
    # The query string wins over headers; headers fill what it does not say.
    assert got == [("query-bot", "g8", "task 12", "hotpot"), ("rag-bot", "g7", "task 12", "hotpot")]


async def test_agent_and_group_path_prefixes_thread_without_a_trajectory(proxy, pool):
    """A CLI that takes only a base URL names its agent (and group) in it; its turns thread
    into one trajectory per conversation, each agent's apart from the others'."""
    import anthropic

    ask = [{"role": "user", "content": "fix it"}]
    codex = client(f"{proxy.url}/g/batch-1/a/codex/v1")
    first = await codex.chat.completions.create(model="m", messages=ask)
    follow = [*ask, first.choices[0].message.model_dump(exclude_none=True)]
    follow.append({"role": "user", "content": "and the tests?"})
    await codex.chat.completions.create(model="m", messages=follow)
    await codex.close()
    claude = anthropic.AsyncAnthropic(base_url=f"{proxy.url}/a/claude", api_key="k")
    await claude.messages.create(model="m", max_tokens=8, messages=ask)  # the same question
    await claude.close()
    await proxy.stop()
    steps = steps_of(pool)
    by_agent = {}
    for s in steps:
        by_agent.setdefault(s["agent"], []).append(s)
    assert sorted(by_agent) == ["claude", "codex"]
    c0, c1 = sorted(by_agent["codex"], key=lambda s: s["index"])
    assert c0["trajectory"] == c1["trajectory"] and (c0["index"], c1["index"]) == (0, 1)
    assert c0["group"] == c1["group"] == "batch-1"
    (cl,) = by_agent["claude"]
    assert cl["trajectory"] != c0["trajectory"] and "group" not in cl


async def test_identical_conversations_in_parallel_each_keep_their_own_trajectory(proxy, pool):
    """A GRPO group without ids: several rollouts of one task send the same opening and get
    the same answers (a deterministic first tool call, say). Their conversations cannot be
    told apart, but each must still be one trajectory of its own, not be cut up and merged
    with its twins'."""
    c = client(proxy.base_url)
    await asyncio.gather(*(converse(c, "the same task", 4) for _ in range(3)))
    await c.close()
    await proxy.stop()
    by_traj: dict[str, list[int]] = {}
    for s in steps_of(pool):
        by_traj.setdefault(s["trajectory"], []).append(s["index"])
    assert sorted(sorted(v) for v in by_traj.values()) == [[0, 1, 2, 3]] * 3


async def test_twins_on_their_own_connections_keep_the_trajectory_they_were_told(proxy, pool):
    """Each twin reads its trajectory id from the first answer's X-AW-Trajectory (to report
    its reward, say); whichever twin calls first next, each stays on that trajectory."""
    opening = [{"role": "user", "content": "the same task"}]
    sessions = [aiohttp.ClientSession() for _ in range(2)]  # one connection each, kept alive

    async def call(s: aiohttp.ClientSession, messages: list[dict[str, Any]]) -> tuple[str, Any]:
        body = {"model": "m", "messages": messages}
        async with s.post(proxy.base_url + "/chat/completions", json=body) as r:
            assert r.status == 200
            return r.headers["X-AW-Trajectory"], (await r.json())["choices"][0]["message"]

    told, replies = zip(*[await call(s, opening) for s in sessions], strict=True)
    assert told[0] != told[1] and replies[0] == replies[1]
    history = [*opening, replies[0], {"role": "user", "content": "go on"}]
    for i in (1, 0):  # the second twin goes on first
        assert (await call(sessions[i], history))[0] == told[i]
    for s in sessions:
        await s.close()


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("failed_turn", [0, 2])
async def test_an_sdk_retry_after_a_failed_call_stays_in_its_trajectory(
    proxy, pool, fake, stream, failed_turn
):
    """The OpenAI SDK retries a 503 by itself (max_retries=2): the retry is the same request,
    and must go on in the trajectory the failed call was in, not start a new one."""
    c = openai.AsyncOpenAI(base_url=proxy.base_url, api_key="k", max_retries=2)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "a task"}]
    for turn in range(4):
        if turn == failed_turn:
            fake[0].overloaded = 1
        if stream:
            chunks = await c.chat.completions.create(model="m", messages=messages, stream=True)
            text = "".join([ch.choices[0].delta.content or "" async for ch in chunks if ch.choices])
        else:
            r = await c.chat.completions.create(model="m", messages=messages)
            text = r.choices[0].message.content
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "more"}]
    await c.close()
    await proxy.stop()
    steps = sorted(steps_of(pool), key=lambda s: s["index"])
    assert len({s["trajectory"] for s in steps}) == 1
    assert [s["status"] for s in steps] == ["ok"] * failed_turn + ["error"] + ["ok"] * (
        4 - failed_turn
    )


async def test_an_anthropic_sdk_retry_stays_in_its_trajectory(proxy, pool, fake):
    """The same for a Messages agent translated to the chat upstream (its SDK retries too)."""
    import anthropic

    claude = anthropic.AsyncAnthropic(base_url=proxy.url, api_key="k", max_retries=2)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "a task"}]
    for turn in range(3):
        fake[0].overloaded = 1 if turn == 1 else 0
        r = await claude.messages.create(model="m", max_tokens=64, messages=messages)
        messages += [
            {"role": "assistant", "content": r.content[0].text},
            {"role": "user", "content": "more"},
        ]
    await claude.close()
    await proxy.stop()
    steps = sorted(steps_of(pool), key=lambda s: s["index"])
    assert len({s["trajectory"] for s in steps}) == 1
    assert [s["status"] for s in steps] == ["ok", "error", "ok", "ok"]


async def test_the_same_conversation_in_two_groups_never_threads_across_them(proxy, pool):
    """One task in two GRPO groups (two epochs, say), its rollouts' answers alike: a step
    stays in its own group, whose advantages it counts in."""
    opening = [{"role": "user", "content": "the same task"}]

    async def call(group: str, messages: list[dict[str, Any]]) -> tuple[str, Any]:
        body = {"model": "m", "messages": messages}
        url = f"{proxy.url}/g/{group}/v1/chat/completions"
        async with aiohttp.ClientSession() as s, s.post(url, json=body) as r:  # new connections
            assert r.status == 200
            return r.headers["X-AW-Trajectory"], (await r.json())["choices"][0]["message"]

    first, reply = await call("g1", opening)
    second, _ = await call("g2", opening)
    history = [*opening, reply, {"role": "user", "content": "go on"}]
    assert (await call("g2", history))[0] == second
    assert (await call("g1", history))[0] == first
    await proxy.stop()
    groups: dict[str, set[str]] = {}
    for s in steps_of(pool):
        groups.setdefault(s["trajectory"], set()).add(s["group"])
    assert groups == {first: {"g1"}, second: {"g2"}}
