"""``POST /v1/messages/count_tokens`` through the proxy: the engine's own count of the prompt a
Messages call would send (vLLM's ``/tokenize``), or the Anthropic upstream's answer as it is."""

from __future__ import annotations

import socket

import aiohttp
import anthropic
import pytest

from agentworld.proxy.fake_upstream import ids, render
from tests.proxy_protocols.conftest import steps_of
from tests.proxy_protocols.test_anthropic_sdk import TOOLS, client_for

CONVERSATION = {
    "model": "claude-test",
    "system": "Be brief.",
    "messages": [{"role": "user", "content": "Weather in Paris?"}],
    "tools": TOOLS,
}


async def test_the_count_is_the_prompt_a_messages_call_sends(translating, pool, chat_fake):
    fake, _ = chat_fake
    client = client_for(translating.url)
    counted = await client.messages.count_tokens(**CONVERSATION)
    answer = await client.messages.create(max_tokens=50, **CONVERSATION)
    # Claude Code calls the beta route with `?beta=true`; it answers the same
    beta = await client.beta.messages.count_tokens(**CONVERSATION, extra_query={"beta": "true"})
    await client.close()
    await translating.stop()

    asked, generated = fake.requests[0], fake.requests[1]
    assert counted.input_tokens == beta.input_tokens == answer.usage.input_tokens > 0
    assert counted.input_tokens == len(ids(render(asked["messages"])))
    assert asked["messages"] == generated["messages"]  # the very prompt generation sends
    assert asked["tools"] == generated["tools"] and asked["add_generation_prompt"] is True
    assert "max_tokens" not in asked and "return_token_ids" not in asked
    assert len(steps_of(pool)) == 1  # the counts are not recorded: no model ran


async def test_thinking_reaches_the_template_as_for_generation(translating, chat_fake):
    fake, _ = chat_fake
    client = client_for(translating.url)
    await client.messages.count_tokens(
        **CONVERSATION, thinking={"type": "enabled", "budget_tokens": 1024}
    )
    await client.close()
    assert fake.requests[0]["chat_template_kwargs"] == {"enable_thinking": True}


async def test_counts_are_in_the_stats_by_status(translating):
    async with aiohttp.ClientSession() as s:
        url = translating.url + "/v1/messages/count_tokens"
        async with s.post(url, json=CONVERSATION) as r:
            assert r.status == 200
        async with s.post(url, json={"model": "m"}) as r:
            assert r.status == 400
        async with s.get(translating.url + "/metrics") as r:
            metrics = await r.text()
    assert 'route="anthropic.count_tokens",status="200"} 1.0' in metrics
    assert 'route="anthropic.count_tokens",status="400"} 1.0' in metrics


@pytest.mark.parametrize(
    "body,status,says",
    [
        ({"messages": []}, 400, "model: Field required"),
        ({"model": "m"}, 400, "messages: Field required"),
        ({"model": "m", "messages": [{"role": "robot", "content": "x"}]}, 400, "messages.0.role"),
        (
            {
                "model": "m",
                "messages": [{"role": "user", "content": "hi"}],
                "tools": [{"type": "bash_20250124", "name": "bash"}],
            },
            400,
            "tools.0: tool type 'bash_20250124' needs an Anthropic upstream",
        ),
    ],
)
async def test_bad_requests_get_anthropic_errors_naming_the_field(
    translating, chat_fake, body, status, says
):
    async with (
        aiohttp.ClientSession() as s,
        s.post(translating.url + "/v1/messages/count_tokens", json=body) as r,
    ):
        assert r.status == status
        err = await r.json()
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    assert says in err["error"]["message"]
    assert not chat_fake[0].requests  # nothing reached the engine


async def test_an_upstream_without_a_tokenizer_is_named(make_proxy, native_fake):
    # a chat upstream with no /tokenize (here: one that speaks only the protocols)
    proxy = await make_proxy(native_fake[2])
    client = client_for(proxy.url)
    with pytest.raises(anthropic.NotFoundError) as err:
        await client.messages.count_tokens(**CONVERSATION)
    assert "has no /tokenize endpoint" in str(err.value)
    # a hosted API (engine openai) is not even asked
    hosted = client_for((await make_proxy(native_fake[2], engine="openai")).url)
    with pytest.raises(anthropic.NotFoundError) as err:
        await hosted.messages.count_tokens(**CONVERSATION)
    assert "engine 'openai', which has no /tokenize" in str(err.value)
    await client.close()
    await hosted.close()


async def test_upstream_faults_are_502_with_the_engines_message(make_proxy, chat_fake):
    proxy = await make_proxy(chat_fake[1])
    client = client_for(proxy.url)
    with pytest.raises(anthropic.InternalServerError) as err:
        await client.messages.count_tokens(**{**CONVERSATION, "model": "fail-500"})
    assert err.value.status_code == 502 and "engine exploded" in str(err.value)
    with pytest.raises(anthropic.BadRequestError) as err:  # its own refusal keeps its status
        await client.messages.count_tokens(**{**CONVERSATION, "model": "fail-400"})
    assert "max_tokens is too large" in str(err.value)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"  # bound, never listening
        refused = client_for((await make_proxy(dead)).url)
        with pytest.raises(anthropic.InternalServerError) as err:
            await refused.messages.count_tokens(**CONVERSATION)
        await refused.close()
    assert err.value.status_code == 502
    async with aiohttp.ClientSession() as s, s.get(proxy.url + "/aw/stats") as r:
        stats = await r.json()
    assert stats["errors"]["upstream"] == 1
    await client.close()


async def test_passthrough_forwards_to_the_anthropic_upstream(passing, native_fake):
    fake_anthropic = native_fake[0]
    client = client_for(passing.url)
    counted = await client.beta.messages.count_tokens(**CONVERSATION, extra_query={"beta": "true"})
    await client.close()
    assert counted.input_tokens == 7  # the upstream's own answer
    (sent,) = fake_anthropic.requests
    assert sent["_query"] == "beta=true" and sent["messages"] == CONVERSATION["messages"]
    assert sent["tools"] == TOOLS
    assert fake_anthropic.headers[0]["anthropic-beta"] == "token-counting-2024-11-01"
    got = fake_anthropic.headers[0]  # the agent's own key goes with it
    assert "agent-key" in (got.get("x-api-key") or got.get("authorization", ""))


async def test_passthrough_sends_the_configured_key_as_anthropic_takes_it(make_proxy, native_fake):
    fake_anthropic, _, url = native_fake
    proxy = await make_proxy(url, mode="passthrough", api_keys={"default": "sk-ant-configured"})
    client = client_for(proxy.url)
    await client.messages.count_tokens(**CONVERSATION)
    await client.close()
    got = fake_anthropic.headers[0]
    assert got["x-api-key"] == "sk-ant-configured"
    assert "agent-key" not in got.get("authorization", "")  # the agent's own key stays behind


async def test_a_model_the_engine_does_not_serve_is_its_own_404(make_proxy):
    """vLLM answers an unknown model with a 404 error object: that is the answer, not a
    missing endpoint."""
    from aiohttp import web
    from aiohttp.test_utils import TestServer

    async def tokenize(request: web.Request) -> web.Response:
        err = {"message": "The model `claude-x` does not exist.", "type": "NotFoundError"}
        return web.json_response({"error": {**err, "param": None, "code": 404}}, status=404)

    app = web.Application()
    app.router.add_post("/tokenize", tokenize)
    engine = TestServer(app, host="127.0.0.1")
    await engine.start_server()
    try:
        proxy = await make_proxy(str(engine.make_url("")).rstrip("/"))
        client = client_for(proxy.url)
        with pytest.raises(anthropic.NotFoundError) as err:
            await client.messages.count_tokens(**CONVERSATION)
        await client.close()
    finally:
        await engine.close()
    assert "The model `claude-x` does not exist." in str(err.value)
    assert "no /tokenize endpoint" not in str(err.value)


async def test_an_anthropic_clients_other_calls_carry_the_key_as_x_api_key(make_proxy, native_fake):
    """Pass-through paths cannot know the protocol from the path; an Anthropic client says
    so in ``anthropic-version``, and its configured key then goes as Anthropic takes it."""
    fake_anthropic, _, url = native_fake
    proxy = await make_proxy(url, mode="passthrough", api_keys={"default": "sk-ant-configured"})
    agent = {"anthropic-version": "2023-06-01", "x-api-key": "agent-key"}
    async with aiohttp.ClientSession() as s, s.get(proxy.url + "/v1/models", headers=agent) as r:
        assert r.status == 200 and (await r.json())["data"][0]["id"] == "claude-x"
    got = fake_anthropic.headers[0]
    assert got["x-api-key"] == "sk-ant-configured" and "authorization" not in got
    async with aiohttp.ClientSession() as s, s.get(proxy.url + "/v1/models") as r:
        assert r.status == 200  # no anthropic-version: the usual Authorization header
    assert fake_anthropic.headers[1]["authorization"] == "Bearer sk-ant-configured"
