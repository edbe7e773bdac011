"""A streamed chat call's log-probs, end to end: whichever reading took its events (the C
reader, the typed one, the general one, or all three in one stream), the step the pool
stores holds each token's ``logprob`` exactly as the upstream wrote it (an integer stays
an integer, -0.0 stays -0.0), or none at all when one is not a number."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from agentworld.proxy.adapters import fast_chunks
from agentworld.proxy.config import UpstreamConfig
from agentworld.proxy.sse import StreamAssembler
from tests.proxy.conftest import steps_of

USER = [{"role": "user", "content": "hi"}]
HEAD = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
NUMBERS = [-0.5, -1, 0, -0.0, -2.3841855067985307e-07, -17.5, -1e-05, -3, -0.125, -9.5e-12]
WITH_NULL = [-0.5, -1, None, -0.25, -2.0, -17.5, -1e-05, -3, -0.125, -9.5e-12]


def entries(values: list[Any]) -> dict[str, Any]:
    return {
        "content": [
            {"token": f"t{k}", "logprob": v, "bytes": [116], "top_logprobs": []}
            for k, v in enumerate(values)
        ]
    }


def token(k: int, values: list[Any], how: str) -> dict[str, Any]:
    """Token event ``k`` (two tokens each): ``how`` says which reading it is made for."""
    delta: dict[str, Any] = {"content": f"w{k} "}
    if how == "typed":  # reasoning: the C reader leaves it to the typed one
        delta = {"reasoning_content": f"r{k}"}
    choice = {
        "index": 0,
        "delta": delta,
        "logprobs": entries(values[2 * k : 2 * k + 2]),
        "finish_reason": None,
        "token_ids": [100 + 2 * k, 101 + 2 * k],
    }
    return {**HEAD, "choices": [choice]}


# An event every typed reading refuses (its log-probs' content no list; and a field the
# rewriting one does not know): the general reading takes it, a no-op, and the rest.
GENERAL = {
    **HEAD,
    "choices": [{"index": 0, "logprobs": {"content": {}}}],
    "service_tier": "default",
}

# Which reading each of the five token events is made for; GENERAL goes before the
# first marked "general" (from there on, the general reading reads them all).
PLANS = {
    "c": ["c"] * 5,
    "typed": ["typed"] * 5,
    "general": ["general"] * 5,
    "mixed": ["c", "typed", "c", "general", "general"],
}


def stream(plan: list[str], values: list[Any]) -> bytes:
    first = {**HEAD, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                  "logprobs": None, "finish_reason": None}],
             "prompt_token_ids": [1, 2, 3]}  # fmt: skip
    events = [first]
    for k, how in enumerate(plan):
        if how == "general" and GENERAL not in events:
            events.append(GENERAL)
        events.append(token(k, values, how))
    end = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop", "token_ids": []}
    events.append({**HEAD, "choices": [end]})
    usage = {"prompt_tokens": 3, "completion_tokens": 10, "total_tokens": 13}
    events.append({**HEAD, "choices": [], "usage": usage})
    return b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events) + b"data: [DONE]\n\n"


@pytest.fixture
async def scripted() -> AsyncIterator[str]:
    """An upstream answering each call with the stream its ``model`` names (plan/values)."""

    async def answer(request: web.Request) -> web.StreamResponse:
        plan, values = (await request.json())["model"].split("/")
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        await out.write(stream(PLANS[plan], NUMBERS if values == "numbers" else WITH_NULL))
        await out.write_eof()
        return out

    app = web.Application()
    app.router.add_post("/v1/chat/completions", answer)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield str(server.make_url("")).rstrip("/")
    await server.close()


@pytest.mark.parametrize("values", ["numbers", "with-null"])
@pytest.mark.parametrize("asked", [False, True], ids=["proxy-asked", "agent-asked"])
@pytest.mark.parametrize("plan", list(PLANS))
async def test_a_streamed_calls_logprobs_are_stored_as_they_came(
    monkeypatch, make_proxy, pool, scripted, plan, asked, values
):
    read = {"add": 0, "add_typed": 0}
    for name in read:
        original = getattr(StreamAssembler, name)

        def counted(self, chunk, _original=original, _name=name):
            read[_name] += 1
            return _original(self, chunk)

        monkeypatch.setattr(StreamAssembler, name, counted)
    proxy = await make_proxy(UpstreamConfig.single(scripted))
    body: dict[str, Any] = {"model": f"{plan}/{values}", "messages": USER, "stream": True}
    if asked:
        body |= {"logprobs": True, "return_token_ids": True}
    async with (
        aiohttp.ClientSession() as s,
        s.post(proxy.url + "/v1/chat/completions", json=body) as r,
    ):
        assert r.status == 200
        text = await r.text()
    assert text.endswith("data: [DONE]\n\n")
    await proxy.stop()
    [step] = steps_of(pool)
    assert step["status"] == "ok"
    tokens = step["tokens"]
    assert tokens["completion_ids"] == list(range(100, 110))
    if values == "numbers":  # the same numbers, of the same types, to the byte
        assert orjson.dumps(tokens["completion_logprobs"]) == orjson.dumps(NUMBERS)
        assert [type(v) for v in tokens["completion_logprobs"]] == [type(v) for v in NUMBERS]
    else:  # a null log-prob: none kept, the ids are
        assert "completion_logprobs" not in tokens
    # The readings the plan meant took the events: without the C reader built, the typed
    # one takes what it would have (the role event, the finish, the usage, the tokens).
    c = fast_chunks.Reader is not None
    want = {
        "c": {"add": 0, "add_typed": 0 if c else 8},
        "typed": {"add": 0, "add_typed": 5 if c else 8},
        "general": {"add": 8, "add_typed": 0 if c else 1},  # GENERAL and all after it
        "mixed": {"add": 5, "add_typed": 1 if c else 4},
    }
    assert read == want[plan]
