"""The upstream headers an agent's SDK acts on reach it through recorded routes: back-off on a
429 (``retry-after``), rate-limit budgets and request ids; the engine's other headers do not."""

from __future__ import annotations

import anthropic
import openai
import pytest

from tests.proxy.conftest import steps_of

ASK = {"model": "rate-limit", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
async def test_a_429_reaches_the_agent_with_its_back_off_headers(proxy, pool, stream):
    client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)
    with pytest.raises(openai.RateLimitError) as err:
        await client.chat.completions.create(**ASK, stream=stream)
    await client.close()
    got = err.value.response.headers
    assert got["retry-after"] == "7" and got["x-ratelimit-remaining-requests"] == "0"
    assert got["x-request-id"] == "req-limited" and "x-engine-internal" not in got
    assert got["x-aw-trajectory"]  # the proxy's own headers stay
    await proxy.stop()
    (step,) = steps_of(pool)
    assert step["status"] == "error" and step["error"]["status"] == 429


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
async def test_answers_carry_the_upstreams_request_id(proxy, fake, stream):
    fake[0].response_headers = {"x-request-id": "req-42", "x-ratelimit-limit-tokens": "9000"}
    client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)
    kw = {**ASK, "model": "m", "stream": stream}
    async with client.chat.completions.with_streaming_response.create(**kw) as raw:
        assert raw.headers["x-request-id"] == "req-42"
        assert raw.headers["x-ratelimit-limit-tokens"] == "9000"
        assert raw.headers["content-type"].startswith(
            "text/event-stream" if stream else "application/json"
        )
        await raw.read()
    await client.close()


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
async def test_translated_anthropic_calls_relay_them_too(proxy, stream):
    client = anthropic.AsyncAnthropic(base_url=proxy.url, api_key="k", max_retries=0)
    kw = {"model": "rate-limit", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    with pytest.raises(anthropic.RateLimitError) as err:
        if stream:
            async with client.messages.stream(**kw) as s:
                await s.get_final_message()
        else:
            await client.messages.create(**kw)
    await client.close()
    got = err.value.response.headers
    assert got["retry-after"] == "7" and "x-engine-internal" not in got
    assert err.value.body["error"]["type"] == "rate_limit_error"


BODIES = {
    "/v1/chat/completions": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    "/v1/completions": {"model": "m", "prompt": "Once upon"},
    "/v1/messages": {
        "model": "m",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "hi"}],
    },
    "/v1/responses": {"model": "m", "input": "hi"},
}


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
@pytest.mark.parametrize("route", list(BODIES))
async def test_answers_carry_the_policy_version_on_every_protocol(proxy, fake, pool, route, stream):
    """The version the engine announces reaches the agent as the server's own answers carry it,
    and is the version the step is recorded under."""
    import aiohttp

    fake[0].policy_version = 7
    async with aiohttp.ClientSession() as http:
        body = {**BODIES[route], "stream": stream}
        async with http.post(proxy.url + route, json=body) as resp:
            await resp.read()
            assert resp.status == 200, await resp.text()
            assert resp.headers["X-AW-Policy-Version"] == "7"
    await proxy.stop()
    (step,) = steps_of(pool)
    assert step["policy_version"] == 7
