"""Malformed requests, generated: valid bodies of every route with fields swapped for values
of the wrong type, shape or size. Whatever the body, the proxy answers it (a 4xx naming the
field, or the upstream's own verdict) and never fails on its own: no 500 of its making, no
call served and then not recorded, and it goes on serving. Seeded, so a failure reproduces."""

from __future__ import annotations

import copy
import json
import logging
import os
import random
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from tests.proxy.test_proxy_faults import still_serves

_TOOL_CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
BODIES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {
        "model": "m",
        "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": None, "tool_calls": [_TOOL_CALL]},
            {"role": "tool", "tool_call_id": "c1", "content": "r"},
        ],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
        "tool_choice": "auto",
        "n": 2,
        "stop": ["x"],
        "logprobs": True,
        "top_logprobs": 2,
        "stream_options": {"include_usage": True},
        "response_format": {"type": "json_object"},
    },
    "/v1/completions": {"model": "m", "prompt": "hello", "max_tokens": 5, "logprobs": 1},
    "/v1/messages": {
        "model": "m",
        "max_tokens": 50,
        "system": [{"type": "text", "text": "sys"}],
        "messages": [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "t", "signature": "s"},
                    {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text"}]},
                    {"type": "image", "source": {"type": "base64", "data": "AAAA"}},
                    {
                        "type": "tool_result",
                        "tool_use_id": "t2",
                        "content": [{"type": "tool_reference", "tool_name": "g"}],
                    },
                ],
            },
            {"role": "system", "content": [{"type": "text", "text": "from here on"}]},
        ],
        "tools": [
            {"name": "f", "input_schema": {"type": "object"}},
            {"name": "g", "input_schema": {"type": "object"}, "defer_loading": True},
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 2},
        ],
        "tool_choice": {"type": "auto"},
        "thinking": {"type": "adaptive", "display": "omitted"},
        "output_config": {
            "effort": "low",
            "format": {"type": "json_schema", "schema": {"type": "object"}},
        },
        "stop_sequences": ["x"],
    },
    "/v1/messages/count_tokens": {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"name": "f", "input_schema": {"type": "object"}}],
    },
    "/v1/responses": {
        "model": "m",
        "instructions": "be brief",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "r"},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "s"}]},
            {
                "type": "function_call",
                "call_id": "c2",
                "namespace": "ns",
                "name": "g",
                "arguments": "{}",
            },
            {"type": "function_call_output", "call_id": "c2", "output": "r"},
            {"type": "tool_search_call", "call_id": "s1", "arguments": {"query": "q"}},
            {
                "type": "tool_search_output",
                "call_id": "s1",
                "execution": "client",
                "tools": [{"type": "function", "name": "h", "parameters": {"type": "object"}}],
            },
        ],
        "tools": [
            {"type": "function", "name": "f", "parameters": {"type": "object"}},
            {
                "type": "namespace",
                "name": "ns",
                "description": "d",
                "tools": [{"type": "function", "name": "g", "parameters": {"type": "object"}}],
            },
            {"type": "web_search"},
            {"type": "tool_search", "execution": "client", "parameters": {"type": "object"}},
        ],
        "max_output_tokens": 50,
        "store": True,
    },
    "/aw/trajectories": {"agent": "default", "task": "t", "group": "g", "metadata": {"a": 1}},
    "/aw/steps": {
        "trajectory": "TID",
        "messages": [{"role": "user", "content": "hi"}],
        "response": {"message": {"role": "assistant", "content": "x"}, "finish_reason": "stop"},
        "tokens": {"prompt_ids": [1, 2], "completion_ids": [3], "completion_logprobs": [-0.5]},
        "reward": 1.0,
        "metadata": {"k": "v"},
        "timings": {"started_at": 1.0},
        "policy_version": 1,
        "choice": 0,
    },
    "/aw/trajectories/TID/reward": {"reward": 1.0, "step": 0, "choice": 0},
    "/aw/trajectories/TID/complete": {"status": "done", "reward": 1.0, "error": "x"},
    "/aw/policy": {"version": 3},
}
# The generated inputs' seeds: AW_FUZZ_SEEDS="1,2,3" for more than CI runs.
SEEDS = [int(x) for x in os.environ.get("AW_FUZZ_SEEDS", "1,2").split(",")]
_FN_G = {"type": "function", "name": "g", "parameters": {"type": "object"}}
WRONG: list[Any] = [None, 0, -1, 1.5, 1e308, 2**70, "", "x", "x" * 5000, "\x00", True]
WRONG += [[], [None], ["x"], [[]], [{}], {}, {"a": 1}]


def _paths(obj: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if at:
        yield at
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, (*at, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, (*at, i))


def mutated(body: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """``body`` with one to three fields replaced by a wrong value, or dropped."""
    out = copy.deepcopy(body)
    paths = list(_paths(out))
    for _ in range(rng.randint(1, 3)):
        *parent_path, key = rng.choice(paths)
        parent = out
        try:
            for k in parent_path:
                parent = parent[k]
            if isinstance(parent, dict) and rng.random() < 0.15:
                parent.pop(key, None)
            else:
                parent[key] = copy.deepcopy(rng.choice(WRONG))
        except (KeyError, IndexError, TypeError):
            pass  # a parent replaced by an earlier mutation
    if rng.random() < 0.3:
        out["stream"] = True
    return out


@pytest.mark.parametrize("seed", SEEDS)
async def test_generated_malformed_requests_never_break_the_proxy(proxy, caplog, seed):
    caplog.set_level(logging.ERROR)
    rng = random.Random(seed)
    statuses: dict[int, int] = {}
    async with aiohttp.ClientSession() as s:
        for _ in range(300):
            path = rng.choice(list(BODIES))
            body = mutated(BODIES[path], rng)
            if "TID" in path or body.get("trajectory") == "TID":
                async with s.post(proxy.url + "/aw/trajectories", json={}) as r:
                    tid = (await r.json())["trajectory"]
                path = path.replace("TID", tid)
                if body.get("trajectory") == "TID":
                    body["trajectory"] = tid
            headers = {"Content-Type": "application/json", "anthropic-version": "2023-06-01"}
            data = json.dumps(body).encode()  # orjson refuses integers beyond 64 bits
            async with s.post(proxy.url + path, data=data, headers=headers) as r:
                text = await r.text()
            statuses[r.status] = statuses.get(r.status, 0) + 1
            assert "internal proxy error" not in text, (path, body, text)
            assert r.status < 500 or "Server got itself in trouble" in text, (path, body, text)
    # the proxy's own failures are logged as errors: none (the fake's are not the proxy's)
    ours = [r for r in caplog.records if r.name.startswith("agentworld")]
    assert not ours, [r.getMessage() for r in ours]
    assert statuses.get(400, 0) > 100 and statuses.get(200, 0) > 20  # both kinds were made
    await still_serves(proxy)


# -- what the upstream answers ------------------------------------------------------------------

_UNARY: dict[str, Any] = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "m",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Hi",
                "reasoning_content": "r",
                "tool_calls": [_TOOL_CALL],
            },
            "finish_reason": "tool_calls",
            "logprobs": {"content": [{"token": "H", "logprob": -0.1, "top_logprobs": []}]},
            "token_ids": [72],
        }
    ],
    "prompt_token_ids": [1, 2, 3],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}


def _chunk(**fields: Any) -> dict[str, Any]:
    return {"id": "c", "object": "chat.completion.chunk", "model": "m", **fields}


def _delta(delta: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return _chunk(choices=[{"index": 0, "delta": delta, "finish_reason": None, **fields}])


_CHUNKS: list[dict[str, Any]] = [
    _delta({"role": "assistant", "content": ""}, logprobs=None),
    _delta({"reasoning_content": "th"}, token_ids=[5]),
    _delta({"content": "Hi"}, token_ids=[72], logprobs={"content": [{"logprob": -0.1}]}),
    _delta({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "f", "arguments": ""}}]}),
    _delta({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}, token_ids=[9]),
    _chunk(choices=[{"index": 0, "delta": {}, "finish_reason": "tool_calls", "token_ids": []}]),
    _chunk(choices=[], usage={"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}),
]


@pytest.mark.parametrize("seed", SEEDS)
async def test_generated_malformed_answers_never_break_the_proxy(make_proxy, pool, caplog, seed):
    """The upstream's answers, unary and streamed, with fields of the wrong type or shape:
    each call gets an answer (the upstream's, or a 502 / an error event), none is a 500 of
    the proxy's, and each leaves a step; malformed token ids or usage cost only those."""
    from aiohttp import web
    from aiohttp.test_utils import TestServer

    caplog.set_level(logging.ERROR)
    rng = random.Random(seed)

    def named(obj: Any, name: str) -> Any:
        """The answer with its tool call named ``name`` (a search, a namespaced tool, ...)."""
        return json.loads(json.dumps(obj).replace('"name": "f"', f'"name": "{name}"'))

    async def chat(request: web.Request) -> web.StreamResponse:
        name = rng.choice(["f", "tool_search", "ns__g", "apply_patch"])
        if not (await request.json()).get("stream"):
            return web.json_response(mutated(named(_UNARY, name), rng))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for chunk in named(_CHUNKS, name):
            event = mutated(chunk, rng) if rng.random() < 0.3 else chunk
            event.pop("stream", None)
            await resp.write(b"data: " + json.dumps(event).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    calls = {
        "/v1/chat/completions": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        "/v1/messages": {
            "model": "m",
            "max_tokens": 9,
            "messages": [{"role": "user", "content": "x"}],
        },
        "/v1/responses": {
            "model": "m",
            "input": "hi",
            "tools": [
                {"type": "tool_search", "execution": "client"},
                {"type": "namespace", "name": "ns", "description": "d", "tools": [_FN_G]},
                {"type": "custom", "name": "apply_patch"},
            ],
        },
    }
    async with TestServer(app) as up:
        from agentworld.proxy.config import UpstreamConfig

        proxy = await make_proxy(UpstreamConfig.single(str(up.make_url("")).rstrip("/")))
        await answered_and_recorded(proxy, pool, caplog, calls, rng, n=150)


async def answered_and_recorded(
    proxy: Any, pool: Any, caplog: Any, calls: dict[str, dict[str, Any]], rng: random.Random, n: int
) -> None:
    """Make ``n`` of ``calls`` (streamed or not) through ``proxy`` to an upstream answering
    them malformed: each gets the upstream's answer or a 502 and leaves a step, and the
    proxy logs no failure of its own."""
    async with aiohttp.ClientSession() as s:
        for _ in range(n):
            path = rng.choice(list(calls))
            body = {**calls[path], "stream": rng.random() < 0.5}
            headers = {"anthropic-version": "2023-06-01"}
            async with s.post(proxy.url + path, json=body, headers=headers) as r:
                text = await r.text()
            assert r.status in (200, 502), (path, body, r.status, text)
            assert "internal proxy error" not in text, (path, body, text)
    await proxy.stop()
    ours = [r for r in caplog.records if r.name.startswith("agentworld")]
    assert not ours, [r.getMessage() for r in ours]
    steps = [r for r in pool.iter_records() if r["kind"] == "step"]
    assert len({(s["trajectory"], s["index"]) for s in steps}) == n  # every call has its step
    assert {s["status"] for s in steps} == {"ok", "error"}
