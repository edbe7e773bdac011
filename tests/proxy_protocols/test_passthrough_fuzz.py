"""A same-protocol upstream (Anthropic Messages, OpenAI Responses) whose answers, unary and
streamed, have fields of the wrong type or shape: every call still gets an answer (the
upstream's, or a 502 / an error event) and leaves a step, and the proxy logs no failure of
its own. Seeded, so a failure reproduces."""

from __future__ import annotations

import json
import logging
import random
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.proxy.test_proxy_fuzz import answered_and_recorded, mutated

CALLS: dict[str, dict[str, Any]] = {
    "/v1/messages": {
        "model": "m",
        "max_tokens": 50,
        "messages": [{"role": "user", "content": "Weather?"}],
        "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
    },
    "/v1/responses": {
        "model": "m",
        "input": "Weather?",
        "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}],
    },
}


async def _answers(url: str) -> dict[tuple[str, bool], Any]:
    """What the well-behaved fakes answer each call, unary (a body) and streamed (events)."""
    out: dict[tuple[str, bool], Any] = {}
    async with aiohttp.ClientSession() as s:
        for path, body in CALLS.items():
            async with s.post(url + path, json=body) as r:
                out[(path, False)] = await r.json()
            async with s.post(url + path, json={**body, "stream": True}) as r:
                text = await r.text()
            events = []
            for block in filter(None, text.split("\n\n")):
                fields = dict(line.split(": ", 1) for line in block.split("\n"))
                events.append((fields.get("event"), json.loads(fields["data"])))
            out[(path, True)] = events
    return out


@pytest.mark.parametrize("seed", [1, 2])
async def test_malformed_answers_of_a_same_protocol_upstream(
    make_proxy, pool, native_fake, caplog, seed
):
    caplog.set_level(logging.ERROR)
    answers = await _answers(native_fake[2])
    rng = random.Random(seed)

    async def answer(request: web.Request) -> web.StreamResponse:
        if not (await request.json()).get("stream"):
            return web.json_response(mutated(answers[(request.path, False)], rng))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for name, data in answers[(request.path, True)]:
            data = mutated(data, rng) if rng.random() < 0.3 else data
            data.pop("stream", None)
            head = f"event: {name}\n".encode() if name else b""
            await resp.write(head + b"data: " + json.dumps(data).encode() + b"\n\n")
        return resp

    app = web.Application()
    for path in CALLS:
        app.router.add_post(path, answer)
    async with TestServer(app) as up:
        proxy = await make_proxy(str(up.make_url("")).rstrip("/"), mode="passthrough")
        await answered_and_recorded(proxy, pool, caplog, CALLS, rng, n=120)
