"""Many kinds of call at once: good calls, upstream faults, agents that hang up, bad input.

Each fault has its own test (test_proxy_faults.py). This one interleaves them, seeded, on
keep-alive connections shared on both sides, the way a busy proxy meets them, and checks
what a one-case test cannot: no fault leaks into a neighbouring call's answer, every
answered call has its step, in-flight counts come back to zero, the proxy never answers
500 of its own accord, and the pool is whole afterwards.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import aiohttp
import orjson

from agentworld.pool.fsck import fsck
from agentworld.proxy.config import UpstreamConfig
from tests.proxy.conftest import steps_of

SEED, CALLS, CONCURRENCY = 7, 300, 24
USER = [{"role": "user", "content": "hi"}]
# kind -> the status the agent must get (None: it hangs up before the answer ends).
EXPECTED: dict[str, int | None] = {
    "ok": 200,
    "stream": 200,
    "n2": 200,
    "lifecycle": 200,
    "completions": 200,
    "anthropic": 200,
    "responses": 200,
    "cut": None,
    "fail-500": 500,  # the upstream's own error, passed through
    "fail-400": 400,
    "reset": 502,
    "break": 502,
    "bad-json": 502,
    "hang": 504,
    "not-json": 400,
    "no-messages": 400,
    "unknown": 404,
    "huge": 413,
}
FAULTS = ("fail-500", "fail-400", "reset", "break", "bad-json", "hang")  # the fake's model names
KINDS = ["ok"] * 8 + ["stream"] * 6 + [k for k in EXPECTED if k not in ("ok", "stream")]
# The other protocols: their route, body, and what their answer must hold (unary, streamed).
OTHERS: dict[str, tuple[str, dict[str, Any], bytes, bytes]] = {
    "completions": (
        "/v1/completions",
        {"model": "m", "prompt": "hi"},
        b'"text":"ok 0: hi"',
        b"data: [DONE]\n\n",
    ),
    "anthropic": (
        "/v1/messages",
        {"model": "m", "max_tokens": 16, "messages": USER},
        b'"text":"ok 1: hi"',
        b'data: {"type":"message_stop"}\n\n',
    ),
    "responses": (
        "/v1/responses",
        {"model": "m", "input": "hi"},
        b'"text":"ok 1: hi"',
        b'"type":"response.completed"',
    ),
}


def stream_texts(raw: bytes) -> dict[int, str]:
    """Each choice's content, joined from a chat stream; asserts nothing injected is left."""
    texts: dict[int, str] = {}
    for event in raw.split(b"\n\n"):
        if event.startswith(b"data: {"):
            chunk = orjson.loads(event[6:])
            assert "prompt_token_ids" not in chunk
            for c in chunk.get("choices") or ():
                assert "token_ids" not in c and c.get("logprobs") is None
                texts[c["index"]] = texts.get(c["index"], "") + (c["delta"].get("content") or "")
    return texts


async def one_call(
    s: aiohttp.ClientSession,
    base: str,
    kind: str,
    answered: set[tuple[str, int]],
    streamed: bool = False,
) -> None:
    """One call of ``kind``; ``streamed`` chooses the mode of the other protocols' calls."""
    url = base + "/v1/chat/completions"
    body: dict[str, Any] = {"model": "m", "messages": USER}
    data: bytes | None = None
    if kind == "lifecycle":
        async with s.post(base + "/aw/trajectories", json={"task": "t"}) as r:
            tid = (await r.json())["trajectory"]
        url = f"{base}/t/{tid}/v1/chat/completions"
    elif kind == "n2":
        body["n"] = 2
    elif kind in ("stream", "cut"):
        body.update(stream=True, model="slow" if kind == "cut" else "m")
    elif kind == "not-json":
        data = b'{"model": "m", "messages": [ '
    elif kind == "no-messages":
        data = b'{"model": "m"}'
    elif kind == "unknown":
        url = base + "/t/tr_gone/v1/chat/completions"
    elif kind == "huge":
        body["messages"] = [{"role": "user", "content": "x" * 200_000}]
    elif kind in FAULTS:
        body["model"] = kind
    elif kind in OTHERS:
        route, body, _, _ = OTHERS[kind]
        url = base + route
        body = {**body, "stream": streamed}
    payload = data if data is not None else orjson.dumps(body)
    async with s.post(url, data=payload, headers={"Content-Type": "application/json"}) as r:
        if kind == "cut":
            await r.content.readany()
            r.close()  # the agent hangs up mid-stream
            return
        raw = await r.read()
        assert r.status == EXPECTED[kind], (kind, r.status, raw[:300])
        if r.status != 200:
            assert orjson.loads(raw)["error"]["message"], (kind, raw[:300])
            return
        if kind in OTHERS:
            whole, ending = OTHERS[kind][2:]
            assert (ending if streamed else whole) in raw, (kind, raw[-300:])
            assert b"token_ids" not in raw and b"-0.01" not in raw  # nothing injected
        elif kind == "stream":
            assert raw.endswith(b"data: [DONE]\n\n")
            assert stream_texts(raw) == {0: "ok 1: hi"}
        else:
            answer = orjson.loads(raw)
            assert "prompt_token_ids" not in answer
            want = ["ok 1: hi"] + (["ok 1: hi #1"] if kind == "n2" else [])
            assert [c["message"]["content"] for c in answer["choices"]] == want
            assert all("token_ids" not in c and c["logprobs"] is None for c in answer["choices"])
        answered.add((r.headers["X-AW-Trajectory"], int(r.headers["X-AW-Step"])))
        if kind == "lifecycle":
            tid = r.headers["X-AW-Trajectory"]
            async with s.post(f"{base}/aw/trajectories/{tid}/complete", json={"reward": 1}) as c:
                assert c.status == 200


async def test_a_seeded_mix_of_calls_faults_and_bad_input(make_proxy, pool, fake):
    # The upstream read timeout turns the fake's hangs into 504s; it is generous, so that no
    # good call, sharing one event loop with 23 others on a slow CI machine, ever reaches it.
    fake[0].hang_s = 4.0
    proxy = await make_proxy(UpstreamConfig(urls=(fake[1],), timeout_s=2.0), max_body_bytes=100_000)
    rng = random.Random(SEED)
    plan = [(rng.choice(KINDS), rng.random() < 0.5) for _ in range(CALLS)]
    kinds = [k for k, _ in plan]
    assert set(kinds) == set(EXPECTED)  # the seed draws every kind
    answered: set[tuple[str, int]] = set()
    gate = asyncio.Semaphore(CONCURRENCY)

    async def gated(kind: str, streamed: bool) -> None:
        async with gate:
            await one_call(s, proxy.url, kind, answered, streamed)

    async with aiohttp.ClientSession() as s:
        await asyncio.gather(*(gated(k, streamed) for k, streamed in plan))
        await one_call(s, proxy.url, "ok", answered)  # and after the storm, as before it
    for _ in range(200):  # the cut streams' steps are written once their handlers end
        if all(t.inflight == 0 for t in proxy.state.registry.open.values()):
            break
        await asyncio.sleep(0.02)
    assert all(t.inflight == 0 for t in proxy.state.registry.open.values())
    stats = proxy.state.stats
    assert stats.errors["internal"] == 0 and stats.errors["record"] == 0
    await proxy.stop()

    steps = {(r["trajectory"], r["index"]): r for r in steps_of(pool)}
    assert answered <= steps.keys()
    assert all(steps[a]["status"] == "ok" for a in answered)
    assert all(steps[a]["tokens"]["source"] == "engine" for a in answered)
    by_status: dict[str, int] = {}
    for r in steps.values():
        by_status[r["status"]] = by_status.get(r["status"], 0) + 1
    assert by_status["cancelled"] == kinds.count("cut")
    # Bad input never reaches the upstream or the pool; every upstream fault is a failed step.
    assert by_status["error"] == sum(kinds.count(k) for k in FAULTS)
    assert fsck(pool).ok
