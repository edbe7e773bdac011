"""The official ``anthropic`` SDK through the proxy: a tool-use conversation, streamed and not,
translated onto a vLLM-shaped chat upstream and passed through to an Anthropic-shaped one."""

from __future__ import annotations

import aiohttp
import anthropic
import orjson
import pytest

from agentworld.proxy.fake_upstream import ids, render
from agentworld.proxy.translate.anthropic import thinking_signature
from tests.proxy_protocols.conftest import steps_of

TOOLS = [
    {
        "name": "get_weather",
        "description": "Weather for a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]


def client_for(url: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        base_url=url, api_key="agent-key", max_retries=0, _strict_response_validation=True
    )


async def ask(client: anthropic.AsyncAnthropic, stream: bool, **kw) -> anthropic.types.Message:
    kw = {"model": "claude-test", "max_tokens": 200, "system": "Be brief.", "tools": TOOLS, **kw}
    if not stream:
        return await client.messages.create(**kw)
    async with client.messages.stream(**kw) as s:
        async for _ in s:
            pass
        return await s.get_final_message()


async def conversation(client, stream: bool) -> tuple:
    """User question -> tool_use -> tool_result -> final answer."""
    msgs = [{"role": "user", "content": "Weather in Paris?"}]
    first = await ask(client, stream, messages=msgs)
    assert first.stop_reason == "tool_use"
    tool = next(b for b in first.content if b.type == "tool_use")
    msgs += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": tool.id, "content": "18C"}],
        },
    ]
    second = await ask(client, stream, messages=msgs)
    return first, tool, second


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
async def test_translated_tool_conversation(translating, pool, chat_fake, stream):
    fake, _ = chat_fake
    client = client_for(translating.url)
    first, tool, second = await conversation(client, stream)
    assert tool.name == "get_weather" and tool.input == {"q": "Weather in", "j": 0}
    assert tool.id == "call_0_0"
    assert second.stop_reason == "end_turn"
    assert second.content[0].text == "ok 1: Weather in Paris?"
    assert second.usage.input_tokens > first.usage.input_tokens > 0
    await client.close()
    await translating.stop()

    sent = fake.requests[1]
    assert [m["role"] for m in sent["messages"]] == ["system", "user", "assistant", "tool"]
    assert sent["messages"][3] == {"role": "tool", "content": "18C", "tool_call_id": "call_0_0"}
    assert sent["return_token_ids"] is True and sent["max_tokens"] == 200

    s0, s1 = steps_of(pool)
    assert s0["trajectory"] == s1["trajectory"] and (s0["index"], s1["index"]) == (0, 1)
    assert s1["metadata"]["threading"] == "auto"
    for s, answer in ((s0, first), (s1, second)):
        assert s["protocol"] == "anthropic.messages" and s["status"] == "ok"
        assert s["tokens"]["source"] == "engine"
        assert s["raw"]["response"]["id"] == answer.id == s["response"]["id"]
        assert s["raw"]["request"]["model"] == "claude-test"
    assert s0["tokens"]["prompt_ids"] == ids(render(fake.requests[0]["messages"]))
    assert s0["tokens"]["completion_ids"] == ids('{"q":"Weather in","j":0}')
    assert len(s0["tokens"]["completion_logprobs"]) == len(s0["tokens"]["completion_ids"])
    assert s1["tokens"]["completion_ids"] == ids("ok 1: Weather in Paris?")
    assert s0["response"]["message"]["tool_calls"] == [
        {"id": "call_0_0", "name": "get_weather", "arguments": '{"q":"Weather in","j":0}'}
    ]
    assert s0["response"]["finish_reason"] == "tool_calls"
    assert s0["response"]["message"]["content"] is None  # streamed too: as vLLM's unary answer
    assert s1["request"]["messages"][2:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_0_0", "name": "get_weather", "arguments": '{"q":"Weather in","j":0}'}
            ],
        },
        {"role": "tool", "tool_call_id": "call_0_0", "content": "18C"},
    ]
    assert s1["request"]["tools"][0]["function"]["name"] == "get_weather"
    assert s1["request"]["params"]["max_tokens"] == 200


def as_pi_sends_back(block: anthropic.types.ContentBlock) -> dict:
    """A content block as pi (its ``pi-ai`` Anthropic provider) sends it back: a thinking
    block without a signature, which it takes for an interrupted one, becomes text."""
    out = block.model_dump(exclude_none=True)
    if out["type"] == "thinking" and not out["signature"].strip():
        return {"type": "text", "text": out["thinking"]}
    return out


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
async def test_translated_thinking_comes_back_as_thinking_and_threads(translating, pool, stream):
    client = client_for(translating.url)
    msgs = [{"role": "user", "content": "Weather in Paris? think first"}]
    first = await ask(client, stream, messages=msgs)
    thinking, tool = first.content[0], first.content[-1]
    assert thinking.type == "thinking" and thinking.thinking == "Let me think."
    assert thinking.signature == thinking_signature("Let me think.")
    msgs += [
        {"role": "assistant", "content": [as_pi_sends_back(b) for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": tool.id, "content": "18C"}],
        },
    ]
    assert msgs[1]["content"][0]["type"] == "thinking"  # signed: it goes back as it came
    await ask(client, stream, messages=msgs)
    await client.close()
    await translating.stop()

    s0, s1 = steps_of(pool)
    assert s1["trajectory"] == s0["trajectory"] and s1["index"] == 1  # the answer was continued
    assert s1["request"]["messages"][2] == {
        "role": "assistant",
        "content": None,
        "reasoning": "Let me think.",
        "tool_calls": [
            {"id": tool.id, "name": "get_weather", "arguments": '{"q":"Weather in","j":0}'}
        ],
    }


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
async def test_passthrough_tool_conversation(passing, pool, native_fake, stream):
    fake, _, _ = native_fake
    client = client_for(passing.url)
    first, tool, second = await conversation(client, stream)
    assert tool.input == {"city": "Paris"} and first.content[0].text == "Let me check."
    assert second.content[0].text == "Done after 3 messages."
    await client.close()
    await passing.stop()

    assert fake.requests[1]["system"] == "Be brief."  # the agent's own request, as sent
    got = fake.headers[0]  # the agent's key and API version reach the upstream
    assert "agent-key" in (got.get("x-api-key") or got.get("authorization", ""))
    assert "anthropic-version" in got
    s0, s1 = steps_of(pool)
    assert s0["trajectory"] == s1["trajectory"]
    assert s0["tokens"] == {"source": "none"}
    assert s0["metadata"]["protocol_mode"] == "passthrough"
    assert s0["response"]["message"] == {
        "role": "assistant",
        "content": "Let me check.",
        "tool_calls": [{"id": tool.id, "name": "get_weather", "arguments": '{"city":"Paris"}'}],
    }
    assert s0["response"]["usage"] == {
        "prompt_tokens": 13,
        "completion_tokens": 7,
        "total_tokens": 20,
    }
    assert s0["raw"]["response"]["id"] == first.id
    assert [m["role"] for m in s1["request"]["messages"]] == ["system", "user", "assistant", "tool"]
    assert s1["response"]["finish_reason"] == "stop"


async def test_explicit_trajectory_from_the_lifecycle_api(translating, pool):
    async with (
        aiohttp.ClientSession() as http,
        http.post(translating.url + "/aw/trajectories", json={"agent": "coder"}) as r,
    ):
        opened = await r.json()
    client = client_for(opened["anthropic_base_url"])
    for q in ("one", "two"):  # unrelated conversations, one trajectory
        await client.messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": q}]
        )
    await client.close()
    await translating.stop()
    steps = steps_of(pool)
    assert [s["trajectory"] for s in steps] == [opened["trajectory"]] * 2
    assert [s["index"] for s in steps] == [0, 1]


async def test_errors_in_anthropic_shape(translating, pool, make_proxy):
    client = client_for(translating.url)
    with pytest.raises(anthropic.BadRequestError) as bad:
        await client.messages.create(
            model="m", max_tokens=10, messages=[{"role": "tool", "content": "x"}]
        )
    assert bad.value.body["error"]["type"] == "invalid_request_error"
    assert "messages.0.role" in bad.value.body["error"]["message"]
    with pytest.raises(anthropic.InternalServerError) as boom:
        await client.messages.create(
            model="fail-500", max_tokens=10, messages=[{"role": "user", "content": "x"}]
        )
    assert boom.value.body == {
        "type": "error",
        "error": {"type": "api_error", "message": "engine exploded"},
    }
    async with (
        aiohttp.ClientSession() as http,
        http.post(translating.url + "/v1/messages", data=b"{not json") as r,
    ):
        assert r.status == 400
        assert (await r.json())["type"] == "error"
    dead = await make_proxy("http://127.0.0.1:9")  # nothing listens on the discard port
    with pytest.raises(anthropic.APIStatusError) as down:
        await client_for(dead.url).messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "x"}]
        )
    assert down.value.status_code == 502
    assert down.value.body["error"]["type"] == "api_error"
    await client.close()
    await translating.stop()
    await dead.stop()
    errors = [s for s in steps_of(pool) if s["status"] == "error"]
    assert sorted(s["error"]["type"] for s in errors) == ["upstream_status", "upstream_unreachable"]


async def test_stream_broken_by_the_upstream(translating, pool):
    client = client_for(translating.url)
    with pytest.raises(anthropic.APIStatusError):
        async with client.messages.stream(
            model="break", max_tokens=50, messages=[{"role": "user", "content": "long answer"}]
        ) as s:
            async for _ in s:
                pass
    await client.close()
    await translating.stop()
    (step,) = steps_of(pool)
    assert step["status"] == "error" and step["error"]["type"] == "upstream_disconnected"
    assert step["response"]["message"]["content"]  # what arrived before the break is kept


async def test_structured_output_is_asked_of_the_engine(translating, chat_fake):
    fake, _ = chat_fake
    client = client_for(translating.url)
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    msg = await client.messages.create(
        model="claude-test",
        max_tokens=100,
        messages=[{"role": "user", "content": "Weather?"}],
        output_config={"format": {"type": "json_schema", "schema": schema}},
    )
    await client.close()
    assert fake.requests[0]["response_format"]["json_schema"]["schema"] == schema
    assert orjson.loads(msg.content[0].text) == {"answer": "ok 1: Weather?"}
