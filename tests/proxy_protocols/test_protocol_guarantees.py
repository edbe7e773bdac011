"""The gateway's guarantees on the new routes: odd input is a 400 in the protocol's shape (never a
500), reasoning survives translation, strict durability records before the closing event."""

from __future__ import annotations

import aiohttp
import anthropic
import openai
import pytest

from tests.proxy_protocols.conftest import steps_of

ODD_BODIES = [
    b"[]",
    b"null",
    b'"x"',
    b"{}",
    b'{"model": 1, "max_tokens": 5, "messages": []}',
    b'{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "tool_result"}, 7]}]}',
    b'{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}',
    b'{"model": "m", "max_tokens": 5, "messages": [], "tools": [{"name": 3}]}',
    b'{"model": "m", "max_tokens": 5, "messages": [], "tool_choice": {"type": "sometimes"}}',
    b'{"model": "m", "input": [{"type": "message", "role": "user", "content": [{"type": "input_audio"}]}]}',
    b'{"model": "m", "input": [{"type": "function_call"}]}',
    b'{"model": "m", "input": "x", "tool_choice": {"type": "allowed_tools"}, "tools": [{"type": "function", "name": "f"}]}',
    b'{"model": "m", "input": "x", "text": {"format": {"type": "yaml"}}}',
    b'{"model": "m", "input": "x", "stream": "yes"}',
]


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/responses"])
async def test_odd_bodies_are_400s_in_the_protocols_shape(translating, pool, path):
    async with aiohttp.ClientSession() as http:
        for raw in ODD_BODIES:
            async with http.post(translating.url + path, data=raw) as r:
                body = await r.json()
                assert r.status == 400, (raw, body)
                if path == "/v1/messages":
                    assert (
                        body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
                    )
                else:
                    assert body["error"]["type"] == "invalid_request_error"
    await translating.stop()
    assert steps_of(pool) == []


async def test_reasoning_is_translated_both_ways(translating, pool):
    a = anthropic.AsyncAnthropic(base_url=translating.url, api_key="k", max_retries=0)
    msg = await a.messages.create(
        model="m", max_tokens=50, messages=[{"role": "user", "content": "think hard"}]
    )
    assert [b.type for b in msg.content] == ["thinking", "text"]
    assert msg.content[0].thinking == "Let me think."
    o = openai.AsyncOpenAI(base_url=translating.base_url, api_key="k", max_retries=0)
    async with o.responses.stream(model="m", input="think again") as s:
        final = await s.get_final_response()
    assert [i.type for i in final.output] == ["reasoning", "message"]
    assert final.output[0].content[0].text == "Let me think."
    await a.close()
    await o.close()
    await translating.stop()
    for s in steps_of(pool):
        assert s["response"]["message"]["reasoning"] == "Let me think."


async def test_strict_durability(make_proxy, chat_fake, pool):
    proxy = await make_proxy(chat_fake[1], durability="strict")
    a = anthropic.AsyncAnthropic(base_url=proxy.url, api_key="k", max_retries=0)
    async with a.messages.stream(
        model="m", max_tokens=50, messages=[{"role": "user", "content": "hi"}]
    ) as s:
        assert (await s.get_final_message()).content[0].text == "ok 1: hi"
    o = openai.AsyncOpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)
    assert (await o.responses.create(model="m", input="yo")).output_text == "ok 1: yo"
    await a.close()
    await o.close()
    await proxy.stop()
    assert [s["status"] for s in steps_of(pool)] == ["ok", "ok"]


async def test_agent_leaving_mid_stream_is_recorded_as_cancelled(translating, pool):
    async with aiohttp.ClientSession() as http:
        body = {"model": "slow", "input": "a slow answer please", "stream": True}
        async with http.post(translating.base_url + "/responses", json=body) as r:
            await r.content.readany()  # one piece, then hang up
    await translating.stop()
    (step,) = steps_of(pool)
    assert step["status"] == "cancelled" and step["protocol"] == "openai.responses"


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/responses"])
@pytest.mark.parametrize(
    ("model", "stream"),
    [
        ("refused", False),
        ("refused", True),
        ("bad-json", True),
        ("no-stream", True),
        ("fail-500", True),
    ],
)
async def test_every_failed_call_names_its_step(make_proxy, chat_fake, pool, path, model, stream):
    """An error the proxy makes (or translates) for an upstream fault names the step it
    recorded, as a relayed upstream error does; a stream answered without an event stream
    is a wrong-shaped answer, a 502."""
    url = "http://127.0.0.1:9" if model == "refused" else chat_fake[1]  # discard port: refused
    proxy = await make_proxy(url)
    if path == "/v1/messages":
        body = {"model": model, "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}
    else:
        body = {"model": model, "input": "x"}
    async with (
        aiohttp.ClientSession() as http,
        http.post(proxy.url + path, json={**body, "stream": stream}) as r,
    ):
        status, headers = r.status, r.headers
        assert "error" in await r.json()
    assert status == (500 if model == "fail-500" else 502)
    await proxy.stop()
    (step,) = steps_of(pool)
    assert step["status"] == "error" and step["error"]["status"] == status
    if model in ("bad-json", "no-stream"):
        assert step["error"]["type"] == "upstream_invalid"
    assert headers["X-AW-Trajectory"] == step["trajectory"]
    assert headers["X-AW-Step"] == str(step["index"])
