"""Custom (free-form) tools, as Codex sends its ``apply_patch``, translated onto a chat upstream:
the chat model gets a function of one string ``input``; the agent gets ``custom_tool_call``
items (unary, event stream and the SDK's stream helper); the record keeps what the model wrote."""

from __future__ import annotations

import openai
import orjson
import pytest

from agentworld.proxy.responses import custom_input
from tests.proxy_protocols.conftest import steps_of
from tests.proxy_protocols.test_responses_sdk import MODES, ask, client_for

GRAMMAR = 'start: begin_patch hunk+ end_patch\nbegin_patch: "*** Begin Patch" LF'
APPLY_PATCH = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Use the apply_patch tool to edit files.",
    "format": {"type": "grammar", "syntax": "lark", "definition": GRAMMAR},
}
SHELL = {
    "type": "function",
    "name": "shell",
    "description": "Runs a shell command",
    "parameters": {
        "type": "object",
        "properties": {"command": {"type": "array", "items": {"type": "string"}}},
        "required": ["command"],
    },
}
PATCH = '*** Begin Patch\nfix the bu "✓"\n*** End Patch'  # what the fake writes as its input


@pytest.mark.parametrize("mode", MODES)
async def test_custom_tool_round_trip(translating, pool, chat_fake, mode):
    fake, _ = chat_fake
    client = client_for(translating.base_url)
    tools = [APPLY_PATCH, SHELL]
    choice = {"type": "custom", "name": "apply_patch"}
    first = await ask(client, mode, input="fix the bug", tools=tools, tool_choice=choice)
    (call,) = first.output
    assert call.type == "custom_tool_call" and call.name == "apply_patch"
    assert call.input == PATCH
    out = [{"type": "custom_tool_call_output", "call_id": call.call_id, "output": "Done!"}]
    second = await ask(client, mode, input=out, previous_response_id=first.id, tools=tools)
    assert second.output_text.startswith("ok 1: fix the bug")
    await client.close()
    await translating.stop()

    asked = fake.requests[0]
    fn = asked["tools"][0]["function"]
    assert fn["name"] == "apply_patch" and asked["tools"][1]["function"]["name"] == "shell"
    assert fn["parameters"]["required"] == ["input"]
    assert fn["description"].startswith("Use the apply_patch tool to edit files.\n\n")
    assert fn["description"].endswith(f"grammar (lark):\n{GRAMMAR}")
    assert asked["tool_choice"] == {"type": "function", "function": {"name": "apply_patch"}}
    # the rebuilt conversation gives the model its own call back, and the tool's output
    sent = fake.requests[1]["messages"]
    written = orjson.dumps({"input": PATCH}).decode()
    assert sent[2]["tool_calls"][0]["function"] == {"name": "apply_patch", "arguments": written}
    assert sent[3] == {"role": "tool", "content": "Done!", "tool_call_id": call.call_id}

    s0, s1 = steps_of(pool)
    (recorded,) = s0["response"]["message"]["tool_calls"]
    assert recorded["name"] == "apply_patch" and orjson.loads(recorded["arguments"]) == {
        "input": PATCH
    }
    assert s0["request"]["tools"][0]["function"]["parameters"]["required"] == ["input"]
    assert s1["request"]["messages"][2]["tool_calls"][0]["arguments"] == written
    assert s0["raw"]["response"]["output"][0]["input"] == PATCH  # what the agent saw


async def test_custom_call_streams_its_input_once_whole(translating, chat_fake):
    client = client_for(translating.base_url)
    events = [
        ev
        async for ev in await client.responses.create(
            model="gpt-test", input="fix the bug", tools=[APPLY_PATCH], stream=True
        )
    ]
    await client.close()
    kinds = [ev.type for ev in events]
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.custom_tool_call_input.delta",
        "response.custom_tool_call_input.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert events[2].item.input == "" and events[3].delta == PATCH == events[4].input
    assert events[5].item.input == PATCH == events[6].response.output[0].input
    assert [ev.sequence_number for ev in events] == list(range(len(events)))


def test_a_call_the_model_wrote_without_an_input_reaches_the_agent_as_written():
    assert custom_input('{"q":"x","j":0}') == '{"q":"x","j":0}'
    assert custom_input("not json") == "not json"
    assert custom_input('{"input":"a\\nb"}') == "a\nb"


async def test_a_grammar_without_its_text_is_refused(translating, chat_fake):
    client = client_for(translating.base_url)
    tool = {**APPLY_PATCH, "format": {"type": "grammar", "syntax": "lark"}}
    with pytest.raises(openai.BadRequestError) as err:
        await client.responses.create(model="gpt-test", input="x", tools=[tool])
    await client.close()
    assert "tools[0].format.definition" in str(err.value)
    assert not chat_fake[0].requests
