"""Custom (free-form) tools, as Codex sends its ``apply_patch``, translated onto a chat upstream:
the chat model gets a function of one string ``input``; the agent gets ``custom_tool_call``
items (unary, event stream and the SDK's stream helper); the record keeps what the model wrote."""

from __future__ import annotations

import openai
import orjson
import pytest

from agentworld.proxy.translate.responses import custom_input
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


async def test_custom_call_input_streams_as_the_model_writes_it(translating, chat_fake):
    client = client_for(translating.base_url)
    events = [
        ev
        async for ev in await client.responses.create(
            model="gpt-test", input="fix the bug", tools=[APPLY_PATCH], stream=True
        )
    ]
    await client.close()
    kinds = [ev.type for ev in events]
    deltas = [ev for ev in events if ev.type == "response.custom_tool_call_input.delta"]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds[3 : 3 + len(deltas)] == ["response.custom_tool_call_input.delta"] * len(deltas)
    assert kinds[3 + len(deltas) :] == [
        "response.custom_tool_call_input.done",
        "response.output_item.done",
        "response.completed",
    ]
    # the fake writes one token per character: the escaped text arrives in many pieces
    assert len(deltas) > 10 and "".join(d.delta for d in deltas) == PATCH
    done, item_done, completed = events[-3:]
    assert events[2].item.input == "" and done.input == PATCH == item_done.item.input
    assert completed.response.output[0].input == PATCH
    assert [ev.sequence_number for ev in events] == list(range(len(events)))


def test_input_decoder_never_splits_an_escape_or_a_surrogate_pair():
    import random

    from agentworld.proxy.translate.responses_stream import InputDecoder

    rng = random.Random(7)
    for text in (PATCH, 'a "b" \\ c\n\u2028 ✓ 😀', ""):
        plain = orjson.dumps({"input": text}).decode()
        escaped = plain.replace("✓", "\\u2713").replace("😀", "\\ud83d\\ude00")
        for args in (plain, escaped, ' { "input" : ' + plain[len('{"input":') :]):
            for _ in range(100):
                decoder, got, i = InputDecoder(), "", 0
                while i < len(args):
                    k = rng.randint(1, 5)
                    got += decoder.feed(args[i : i + k])
                    i += k
                assert decoder.ok and got == text, (args, got)
    other = InputDecoder()  # arguments of another shape: nothing streams, ok turns false
    assert other.feed('{"q": "x", "input": "y"}') == "" and not other.ok


def test_arguments_of_another_shape_reach_the_agent_whole_at_the_end():
    """A model that ignores the one-``input`` schema: nothing streams while it writes, and
    the agent gets what it wrote once the call ends."""
    from agentworld.proxy.translate.responses_stream import ChatToResponses

    tr = ChatToResponses({"model": "m", "tools": [APPLY_PATCH]}, "resp_1")

    def chunk(args: str, *, first: bool = False) -> dict:
        call = {"index": 0, "function": {"arguments": args}}
        if first:
            call.update(id="call_1", type="function", function={"name": "apply_patch"})
        return {"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}

    events = tr.feed(chunk("", first=True))
    for piece in ('{"pat', 'ch": "x', '"}'):
        events += tr.feed(chunk(piece))
    events += tr.finish(1, 3, 0)
    parsed = [orjson.loads(e.split(b"data: ", 1)[1]) for e in events]
    kinds = [p["type"] for p in parsed]
    assert kinds.count("response.custom_tool_call_input.delta") == 1
    delta = next(p for p in parsed if p["type"] == "response.custom_tool_call_input.delta")
    done = next(p for p in parsed if p["type"] == "response.custom_tool_call_input.done")
    assert delta["delta"] == done["input"] == '{"patch": "x"}'
    assert kinds.index("response.custom_tool_call_input.delta") > kinds.index(
        "response.output_item.added"
    )


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
