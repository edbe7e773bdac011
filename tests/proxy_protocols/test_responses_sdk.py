"""The ``openai`` SDK's Responses client through the proxy: a tool-use conversation chained by
``previous_response_id``, streamed and not, translated onto a vLLM-shaped chat upstream and passed
through to a Responses-shaped one."""

from __future__ import annotations

import openai
import pytest

from agentworld.proxy.fake_upstream import ids, render
from tests.proxy_protocols.conftest import steps_of

TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        "strict": False,
    }
]


def client_for(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=url, api_key="agent-key", max_retries=0, _strict_response_validation=True
    )


async def ask(client: openai.AsyncOpenAI, mode: str, **kw):
    kw = {"model": "gpt-test", "instructions": "Be brief.", "tools": TOOLS, **kw}
    if mode == "unary":
        return await client.responses.create(**kw)
    if mode == "events":
        final = None
        async for ev in await client.responses.create(stream=True, **kw):
            if ev.type == "response.completed":
                final = ev.response
        return final
    async with client.responses.stream(**kw) as s:
        async for _ in s:
            pass
        return await s.get_final_response()


async def conversation(client, mode: str) -> tuple:
    """Question -> function_call -> (previous_response_id + function_call_output) -> answer."""
    first = await ask(client, mode, input="Weather in Paris?")
    call = next(o for o in first.output if o.type == "function_call")
    out = [{"type": "function_call_output", "call_id": call.call_id, "output": "18C"}]
    second = await ask(client, mode, input=out, previous_response_id=first.id)
    return first, call, second


MODES = ["unary", "events", "helper"]


@pytest.mark.parametrize("mode", MODES)
async def test_translated_chain(translating, pool, chat_fake, mode):
    fake, _ = chat_fake
    client = client_for(translating.base_url)
    first, call, second = await conversation(client, mode)
    assert first.status == "completed"
    assert call.name == "get_weather" and call.arguments == '{"q":"Weather in","j":0}'
    assert second.output_text == "ok 1: Weather in Paris?"
    assert second.previous_response_id == first.id
    await client.close()
    await translating.stop()

    # The chat upstream stores nothing: the proxy rebuilt the whole conversation from the chain.
    sent = fake.requests[1]
    assert [m["role"] for m in sent["messages"]] == ["system", "user", "assistant", "tool"]
    assert sent["messages"][2]["tool_calls"][0]["id"] == call.call_id
    assert sent["messages"][3] == {"role": "tool", "content": "18C", "tool_call_id": call.call_id}

    s0, s1 = steps_of(pool)
    assert s0["trajectory"] == s1["trajectory"] and [s0["index"], s1["index"]] == [0, 1]
    for s, answer in ((s0, first), (s1, second)):
        assert s["protocol"] == "openai.responses" and s["status"] == "ok"
        assert s["tokens"]["source"] == "engine"
        assert s["response"]["id"] == answer.id == s["raw"]["response"]["id"]
    assert s0["tokens"]["prompt_ids"] == ids(render(fake.requests[0]["messages"]))
    assert s1["tokens"]["prompt_ids"] == ids(render(sent["messages"]))
    assert s1["tokens"]["completion_ids"] == ids("ok 1: Weather in Paris?")
    assert s1["request"]["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call.call_id, "name": "get_weather", "arguments": call.arguments}
            ],
        },
        {"role": "tool", "tool_call_id": call.call_id, "content": "18C"},
    ]
    assert s1["raw"]["request"]["previous_response_id"] == first.id
    assert s1["response"]["finish_reason"] == "stop"
    # The output items the agent saw are what the chain stored (ids included).
    assert s0["raw"]["response"]["output"][0]["id"] == first.output[0].id


@pytest.mark.parametrize("mode", ["unary", "events"])
async def test_a_chain_goes_on_after_a_proxy_restart(make_proxy, pool, chat_fake, mode):
    """The chat upstream stores nothing and the proxy's chain store is in memory: after a
    restart it comes back from the pool for the re-opened trajectories, so the agent's next
    ``previous_response_id`` still finds the whole conversation."""
    fake, url = chat_fake
    first_proxy = await make_proxy(url, restore=True)
    client = client_for(first_proxy.base_url)
    first = await ask(client, mode, input="Weather in Paris?")
    call = next(o for o in first.output if o.type == "function_call")
    await client.close()
    await first_proxy.stop()

    second_proxy = await make_proxy(url, restore=True)
    client = client_for(second_proxy.base_url)
    out = [{"type": "function_call_output", "call_id": call.call_id, "output": "18C"}]
    second = await ask(client, mode, input=out, previous_response_id=first.id)
    third = await ask(client, mode, input="And Rome?", previous_response_id=second.id)
    await client.close()
    await second_proxy.stop()

    assert second.output_text == "ok 1: Weather in Paris?"
    roles = ["system", "user", "assistant", "tool", "assistant", "user"]
    assert [m["role"] for m in fake.requests[2]["messages"]] == roles
    assert fake.requests[1]["messages"][2]["tool_calls"][0]["id"] == call.call_id
    steps = steps_of(pool)
    assert [s["index"] for s in steps] == [0, 1, 2]
    assert len({s["trajectory"] for s in steps}) == 1  # the chain also names the trajectory
    assert steps[2]["response"]["id"] == third.id


@pytest.mark.parametrize("mode", MODES)
async def test_passthrough_chain(passing, pool, native_fake, mode):
    _, fake, _ = native_fake
    client = client_for(passing.base_url)
    first, call, second = await conversation(client, mode)
    assert call.arguments == '{"city":"Paris"}'
    assert second.output_text == "Done after 3 items."  # the upstream resolved the chain itself
    await client.close()
    await passing.stop()

    assert fake.requests[1]["previous_response_id"] == first.id  # forwarded untouched
    s0, s1 = steps_of(pool)
    assert s0["trajectory"] == s1["trajectory"]
    assert s0["tokens"] == {"source": "none"}
    assert s0["response"]["finish_reason"] == "tool_calls"
    assert s0["response"]["usage"] == {
        "prompt_tokens": 20,
        "completion_tokens": 9,
        "total_tokens": 29,
    }
    # ... while the record still holds the whole conversation, rebuilt by the proxy.
    assert [m["role"] for m in s1["request"]["messages"]] == ["system", "user", "assistant", "tool"]
    assert s1["response"]["message"] == {"role": "assistant", "content": "Done after 3 items."}


async def test_unknown_previous_response(translating, pool):
    client = client_for(translating.base_url)
    with pytest.raises(openai.BadRequestError) as bad:
        await client.responses.create(model="m", input="hi", previous_response_id="resp_nope")
    assert bad.value.body["param"] == "previous_response_id"
    assert bad.value.body["code"] == "previous_response_not_found"  # as OpenAI's
    assert "resp_nope" in bad.value.body["message"]
    with pytest.raises(openai.BadRequestError) as tool:
        await client.responses.create(model="m", input="hi", tools=[{"type": "local_shell"}])
    assert "passthrough" in tool.value.body["message"]
    await client.close()
    await translating.stop()
    assert steps_of(pool) == []  # bad input opens no trajectory and records nothing


async def test_upstream_error_reaches_the_agent(translating, pool):
    client = client_for(translating.base_url)
    with pytest.raises(openai.InternalServerError) as boom:
        await client.responses.create(model="fail-500", input="hi")
    assert boom.value.body["message"] == "engine exploded"
    await client.close()
    await translating.stop()
    (step,) = steps_of(pool)
    assert step["status"] == "error" and step["error"]["status"] == 500
    assert step["protocol"] == "openai.responses"


async def test_a_stream_the_upstream_breaks_ends_in_response_failed(translating, pool):
    """As OpenAI ends a failed stream: ``error``, then ``response.failed`` with the error;
    before, the stream ended on a bare ``error`` and a client waited for an end in vain."""
    client = client_for(translating.base_url)
    stream = await client.responses.create(model="break", input="hi", stream=True)
    events = [ev async for ev in stream]
    assert events[0].type == "response.created"
    assert [ev.type for ev in events[-2:]] == ["error", "response.failed"]
    failed = events[-1].response
    assert failed.status == "failed" and "closed the connection" in failed.error.message
    await client.close()
    await translating.stop()
    (step,) = steps_of(pool)
    assert step["status"] == "error" and failed.error.message in step["error"]["message"]


async def test_store_false_keeps_no_chain_as_openai(translating, chat_fake):
    """Codex sends ``store: false`` and its whole history each turn: nothing is kept for it."""
    client = client_for(translating.base_url)
    first = await client.responses.create(model="gpt-test", input="hi", store=False)
    assert first.store is False
    with pytest.raises(openai.BadRequestError) as err:
        await client.responses.create(model="gpt-test", input="and?", previous_response_id=first.id)
    assert f"Previous response with id '{first.id}' not found" in str(err.value)
    kept = await client.responses.create(model="gpt-test", input="hi")  # store defaults to true
    again = await client.responses.create(
        model="gpt-test", input="and?", previous_response_id=kept.id
    )
    assert again.previous_response_id == kept.id
    await client.close()


@pytest.mark.parametrize("mode", MODES)
async def test_store_false_reasoning_comes_back_as_reasoning_and_threads(translating, pool, mode):
    """As Codex and pi run: ``store: false``, the whole history sent back each turn, the
    model's reasoning items among it; the next call continues the same trajectory, and
    the reasoning is the model's reasoning in it, not something it said."""
    client = client_for(translating.base_url)
    kw = {"store": False, "include": ["reasoning.encrypted_content"]}
    kw["reasoning"] = {"effort": "high", "summary": "auto"}
    history: list = [{"role": "user", "content": "Weather in Paris? think first"}]
    first = await ask(client, mode, input=history, **kw)
    kinds = [o.type for o in first.output]
    assert kinds == ["reasoning", "function_call"]
    thought, call = first.output
    assert thought.content[0].type == "reasoning_text"
    assert thought.content[0].text == "Let me think."
    history += [o.model_dump(exclude_none=True) for o in first.output]
    history.append({"type": "function_call_output", "call_id": call.call_id, "output": "18C"})
    second = await ask(client, mode, input=history, **kw)
    assert second.output_text.startswith("ok 1: Weather in Paris?")
    await client.close()
    await translating.stop()

    s0, s1 = steps_of(pool)
    assert s1["trajectory"] == s0["trajectory"] and s1["index"] == 1
    assert s1["metadata"]["threading"] == "auto"
    assert s1["request"]["messages"][2] == {
        "role": "assistant",
        "content": None,
        "reasoning": "Let me think.",
        "tool_calls": [{"id": call.call_id, "name": "get_weather", "arguments": call.arguments}],
    }
    assert s1["request"]["params"]["chat"]["reasoning_effort"] == "high"
