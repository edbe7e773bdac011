"""Anthropic Messages <-> chat completions: requests, messages, streams, checked with the SDK's types."""

from __future__ import annotations

import pytest
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import Message, RawMessageStreamEvent
from pydantic import TypeAdapter

from agentworld import records
from agentworld.proxy.bad_request import BadRequest
from agentworld.proxy.config import UpstreamConfig
from agentworld.proxy.count_tokens import tokenize_body
from agentworld.proxy.normal_form import thread_form
from agentworld.proxy.translate import anthropic as am
from agentworld.proxy.translate.anthropic_stream import (
    AnthropicAssembler,
    ChatToAnthropic,
    error_event,
)
from agentworld.proxy.translate.chat_form import name_calls
from tests.proxy_protocols.chat_fixtures import chat_body, chat_chunks, parse_sse

EVENT = TypeAdapter(RawMessageStreamEvent)
HI = [{"role": "user", "content": "hi"}]
WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def conversation() -> dict:
    return {
        "model": "claude-x",
        "max_tokens": 256,
        "system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use tools."}],
        "tools": [WEATHER],
        "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
        "stop_sequences": ["###"],
        "temperature": 0.2,
        "top_k": 5,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Need the tool.", "signature": "sig"},
                    {"type": "text", "text": "Checking."},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "get_weather",
                        "input": {"city": "Paris"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "18C"}],
                    },
                    {"type": "text", "text": "And tomorrow?"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"},
                    },
                ],
            },
        ],
    }


def test_request_normalises_every_block_kind():
    msgs = am.messages(conversation())
    assert msgs[0] == {"role": "system", "content": "Be brief.\n\nUse tools."}
    assert msgs[1] == {"role": "user", "content": "Weather in Paris?"}
    assert msgs[2] == {
        "role": "assistant",
        "content": "Checking.",
        "reasoning": "Need the tool.",
        "tool_calls": [{"id": "toolu_1", "name": "get_weather", "arguments": '{"city":"Paris"}'}],
    }
    assert msgs[3] == {"role": "tool", "tool_call_id": "toolu_1", "content": "18C"}
    assert msgs[4]["role"] == "user"
    assert msgs[4]["content"] == [
        {"type": "text", "text": "And tomorrow?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
    ]
    step = records.make_step(
        trajectory="tr_x",
        index=0,
        agent="a",
        request={"messages": msgs},
        response=None,
        protocol=am.PROTOCOL,
        status="cancelled",
    )
    records.validate(step)


def test_request_translates_to_chat():
    body = {**conversation(), "stream": True}
    chat = am.to_chat(body, am.messages(body), engine="vllm", model=None)
    assert chat["model"] == "claude-x"
    assert chat["max_tokens"] == 256
    assert chat["stop"] == ["###"]
    assert chat["top_k"] == 5 and chat["temperature"] == 0.2
    assert chat["tool_choice"] == "auto" and chat["parallel_tool_calls"] is False
    assert chat["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather for a city",
                "parameters": WEATHER["input_schema"],
            },
        }
    ]
    assert chat["chat_template_kwargs"] == {"enable_thinking": True}
    assert chat["stream_options"] == {"include_usage": True}
    asst = chat["messages"][2]
    assert asst["tool_calls"][0] == {
        "id": "toolu_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
    }
    assert asst["reasoning_content"] == "Need the tool."
    assert chat["messages"][3] == {"role": "tool", "content": "18C", "tool_call_id": "toolu_1"}
    plain = am.to_chat(body, am.messages(body), engine="openai", model="gpt-x")
    assert plain["model"] == "gpt-x"
    assert "top_k" not in plain and "chat_template_kwargs" not in plain
    assert "reasoning_content" not in plain["messages"][2]


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ({"type": "any"}, "required"),
        ({"type": "none"}, "none"),
        (
            {"type": "tool", "name": "get_weather"},
            {"type": "function", "function": {"name": "get_weather"}},
        ),
    ],
)
def test_tool_choice(choice, expected):
    body = {**conversation(), "tool_choice": choice}
    assert am.to_chat(body, am.messages(body), engine="vllm", model=None)["tool_choice"] == expected


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "m", "messages": []}, "max_tokens"),
        ({"model": "m", "max_tokens": 0, "messages": []}, "max_tokens"),
        ({"max_tokens": 5, "messages": []}, "model"),
        ({"model": "m", "max_tokens": 5, "messages": "hi"}, "messages"),
        (
            {"model": "m", "max_tokens": 5, "messages": [{"role": "tool", "content": "x"}]},
            "messages.0.role",
        ),
        (
            {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": 3}]},
            "messages.0.content",
        ),
        (
            {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{}]}]},
            "messages.0.content.0",
        ),
        ({"model": "m", "max_tokens": 5, "messages": HI, "temperature": "hot"}, "temperature"),
        ({"model": "m", "max_tokens": 5, "messages": HI, "stop_sequences": "x"}, "stop_sequences"),
        ({"model": "m", "max_tokens": 5, "messages": []}, "messages"),  # as Anthropic: 400
        (  # a named choice of a tool not given: Anthropic refuses it
            {
                "model": "m",
                "max_tokens": 5,
                "messages": HI,
                "tool_choice": {"type": "tool", "name": "x"},
            },
            "tool_choice.name",
        ),
        # each was once a 500 (found by fuzzing the proxy)
        (
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": [{"type": "tool_result", "content": -1}]}],
            },
            "messages.0.content.0.content",
        ),
        (
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [
                    {"role": "user", "content": [{"type": "tool_result", "content": ["x"]}]}
                ],
            },
            "messages.0.content.0.content.0",
        ),
        (
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "t", "name": "f" * 2000}],
                    }
                ],
            },
            "messages.0.content.0.name",
        ),
    ],
)
def test_bad_requests_name_the_field(body, param):
    with pytest.raises(BadRequest) as info:
        am.check(body)
    assert info.value.param == param


def test_anthropic_only_tools_need_passthrough():
    body = {**conversation(), "tools": [{"type": "bash_20250124", "name": "bash"}]}
    with pytest.raises(BadRequest, match="passthrough"):
        am.tools(body)
    with pytest.raises(BadRequest, match="passthrough"):  # any JSON where a type goes
        am.tools({**conversation(), "tools": [{"type": ["custom"], "name": "x"}]})
    weird = {**conversation(), "output_config": {"effort": ["high"]}}
    assert "reasoning_effort" not in am.to_chat(weird, [], engine="vllm", model=None)


def test_unary_answer_is_a_valid_message_with_tool_use():
    chat = chat_body(
        content="Let me look.",
        reasoning="Think first.",
        calls=[("call_9", "get_weather", '{"city": "Oslo"}')],
        finish="tool_calls",
    )
    msg = am.from_chat(chat, conversation())
    parsed = Message.model_validate(msg)
    assert [b.type for b in parsed.content] == ["thinking", "text", "tool_use"]
    assert parsed.content[2].id == "call_9" and parsed.content[2].input == {"city": "Oslo"}
    assert parsed.stop_reason == "tool_use"
    assert parsed.usage.input_tokens == 5
    assert parsed.usage.output_tokens == len("Think first.Let me look.") + len('{"city": "Oslo"}')


@pytest.mark.parametrize(
    ("finish", "matched", "reason", "sequence"),
    [
        ("stop", None, "end_turn", None),
        ("length", None, "max_tokens", None),
        ("stop", "###", "stop_sequence", "###"),
        ("stop", 128001, "end_turn", None),  # vLLM reports a stop token id, not a sequence
    ],
)
def test_stop_reasons(finish, matched, reason, sequence):
    msg = Message.model_validate(
        am.from_chat(chat_body(finish=finish, stop_reason=matched), conversation())
    )
    assert (msg.stop_reason, msg.stop_sequence) == (reason, sequence)


def _stream(chunks: list[dict], body: dict) -> list[tuple[str | None, dict]]:
    tr = ChatToAnthropic(body)
    out = b"".join(b for c in chunks for b in tr.feed(c))
    final = chunks[-1]["usage"]
    out += b"".join(tr.finish(final["prompt_tokens"], final["completion_tokens"], 0))
    return parse_sse(out)


def test_stream_events_are_valid_and_accumulate_to_the_unary_message():
    spec = {
        "content": "Let me look.",
        "reasoning": "Think first.",
        "calls": [
            ("call_1", "get_weather", '{"city": "Oslo"}'),
            ("call_2", "get_weather", '{"city": "Rome"}'),
        ],
        "finish": "tool_calls",
    }
    events = _stream(chat_chunks(**spec), conversation())
    names = [n for n, _ in events]
    assert names[:2] == ["message_start", "ping"]
    assert names[-2:] == ["message_delta", "message_stop"]
    assert all(n == d["type"] for n, d in events)
    snapshot = None
    bufs: dict = {}
    for name, data in events:
        if name == "ping":
            continue
        ev = EVENT.validate_python(data)
        snapshot = accumulate_event(event=ev, current_snapshot=snapshot, json_bufs=bufs)
    unary = Message.model_validate(am.from_chat(chat_body(**spec), conversation()))
    got = Message.model_validate(snapshot.model_dump())
    assert [b.model_dump() for b in got.content] == [b.model_dump() for b in unary.content]
    assert got.stop_reason == "tool_use"
    assert got.usage.input_tokens == 5 and got.usage.output_tokens == unary.usage.output_tokens


def _accumulated(events: list[tuple[str | None, dict]]) -> Message:
    """The Message the ``anthropic`` SDK builds from a stream (it raises on what it cannot)."""
    snapshot, bufs = None, {}
    for name, data in events:
        if name != "ping":
            ev = EVENT.validate_python(data)
            snapshot = accumulate_event(event=ev, current_snapshot=snapshot, json_bufs=bufs)
    return Message.model_validate(snapshot.model_dump())


@pytest.mark.parametrize(
    ("arguments", "finish"),
    [
        ("{'city': 'Oslo'}", "tool_calls"),  # Python, not JSON
        ("not json at all", "tool_calls"),
        ('"Oslo"', "tool_calls"),  # a JSON string (a quoted answer)
        ("[1, 2]", "tool_calls"),
        ('{"city": "Oslo"}}', "tool_calls"),
        ('{"city": "Oslo", "note": "cut of', "length"),  # max_tokens mid-call
    ],
)
def test_streamed_tool_input_is_the_unary_object_whatever_the_model_wrote(arguments, finish):
    """The SDK parses every ``input_json_delta`` as part of an object, and raised on a model's
    non-object arguments, losing the turn: a call goes out whole, as the unary answer has it."""
    spec = {"content": "On it.", "calls": [("call_1", "get_weather", arguments)], "finish": finish}
    got = _accumulated(_stream(chat_chunks(**spec), conversation()))
    unary = Message.model_validate(am.from_chat(chat_body(**spec), conversation()))
    assert [b.model_dump() for b in got.content] == [b.model_dump() for b in unary.content]
    assert isinstance(got.content[-1].input, dict)
    assert (
        got.stop_reason == unary.stop_reason == ("max_tokens" if finish == "length" else "tool_use")
    )


def test_a_tool_call_cut_off_says_max_tokens_or_the_window():
    """A call cut off by max_tokens is no call to run: Anthropic says ``max_tokens`` (the
    window's own stop when the proxy cut max_tokens to the room left)."""
    calls = [("call_1", "write_file", '{"path": "a.py", "content": "print(')]
    body = chat_body(content=None, calls=calls, finish="length")
    assert am.from_chat(body, conversation())["stop_reason"] == "max_tokens"
    windowed = am.from_chat(body, conversation(), window=True)
    assert windowed["stop_reason"] == "model_context_window_exceeded"


def test_calls_whose_arguments_come_after_both_heads_stream_whole():
    """Some upstreams send every call's head first, then the arguments: each call's input
    reaches the agent whole (an earlier block cannot take deltas once the next opened)."""
    chunks = chat_chunks(content=None, finish="tool_calls")
    role, rest = chunks[0], chunks[1:]
    heads = [
        {"index": j, "id": f"call_{j}", "type": "function", "function": {"name": "get_weather"}}
        for j in range(2)
    ]
    args = [
        {"index": j, "function": {"arguments": piece}}
        for j, city in enumerate(("Oslo", "Rome"))
        for piece in ('{"city": ', f'"{city}"}}')
    ]
    base = {k: role[k] for k in ("id", "object", "created", "model")}
    mid = [
        {**base, "choices": [{"index": 0, "delta": {"tool_calls": [tc]}, "finish_reason": None}]}
        for tc in heads + args
    ]
    got = _accumulated(_stream([role, *mid, *rest], conversation()))
    assert [(b.id, b.input) for b in got.content] == [
        ("call_0", {"city": "Oslo"}),
        ("call_1", {"city": "Rome"}),
    ]


def test_calls_without_ids_get_unique_ones_the_record_keeps():
    """An upstream that names no call: each gets an id of its own (not ``toolu_0`` every
    turn), and the record and the ``raw`` answer hold the ids the agent was given."""
    spec = {"content": None, "calls": [("", "get_weather", '{"city": "Oslo"}')] * 2}
    chunks = chat_chunks(finish="tool_calls", **spec)
    ids = []
    for _ in range(2):
        tr = ChatToAnthropic(conversation())
        out = b"".join(b for c in chunks for b in tr.feed(c)) + b"".join(tr.finish(5, 9, 0))
        ids += [b.id for b in _accumulated(parse_sse(out)).content]
        assembled = chat_body(finish="tool_calls", **spec)
        name_calls(assembled, "toolu", tr.call_ids())
        assert [b["id"] for b in am.from_chat(assembled, conversation())["content"]] == ids[-2:]
    assert len(set(ids)) == 4 and all(i.startswith("toolu_") for i in ids)


def test_translated_thinking_is_signed_as_anthropic_signs_it():
    """A client holds a thinking block without a signature for an interrupted one (pi sends it
    back as text): each translated block is signed, unary and streamed, and the stream gives
    the signature as the block's last delta, as Anthropic's does."""
    spec = {"content": "Sure.", "reasoning": "Hmm, Oslo.", "finish": "stop"}
    block = am.from_chat(chat_body(**spec), conversation())["content"][0]
    signature = am.thinking_signature("Hmm, Oslo.")
    assert block == {"type": "thinking", "thinking": "Hmm, Oslo.", "signature": signature}
    assert signature.startswith("aw1.") and signature != am.thinking_signature("Hmm, Rome.")
    events = [d for _, d in _stream(chat_chunks(**spec), conversation()) if d.get("index") == 0]
    assert events[0]["type"] == "content_block_start"
    assert events[0]["content_block"] == {"type": "thinking", "thinking": "", "signature": ""}
    deltas = [d["delta"] for d in events[1:-1]]
    assert {d["type"] for d in deltas[:-1]} == {"thinking_delta"}
    assert "".join(d["thinking"] for d in deltas[:-1]) == "Hmm, Oslo."
    assert deltas[-1] == {"type": "signature_delta", "signature": signature}
    assert events[-1] == {"type": "content_block_stop", "index": 0}


def test_stream_with_stop_sequence_and_no_usage_chunk():
    tr = ChatToAnthropic(conversation())
    out = b"".join(b for c in chat_chunks(stop_reason="###", usage=False) for b in tr.feed(c))
    out += b"".join(tr.finish(5, 12, 0))
    delta = next(d for n, d in parse_sse(out) if n == "message_delta")
    assert delta["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "###"}


def test_assembler_rebuilds_the_message_and_normalises_it():
    spec = {
        "content": "Sure.",
        "reasoning": "Hmm.",
        "calls": [("toolu_7", "get_weather", '{"city":"Oslo"}')],
    }
    events = _stream(chat_chunks(finish="tool_calls", **spec), conversation())
    asm = AnthropicAssembler()
    for _, data in events:
        asm.add(data)
    assert asm.done and asm.error is None
    msg = Message.model_validate(asm.result())
    assert msg.content[-1].input == {"city": "Oslo"}
    rec = am.response_record(asm.result())
    assert rec["finish_reason"] == "tool_calls"
    assert rec["message"] == {
        "role": "assistant",
        "content": "Sure.",
        "reasoning": "Hmm.",
        "tool_calls": [{"id": "toolu_7", "name": "get_weather", "arguments": '{"city":"Oslo"}'}],
    }
    assert rec["usage"]["prompt_tokens"] == 5


def test_response_resent_as_history_threads_to_the_same_turn():
    """The agent sends the answer back as an assistant turn: threading must see the same message."""
    msg = am.from_chat(
        chat_body(
            reasoning="Oslo, then.",
            calls=[("c1", "get_weather", '{"city": "Oslo"}')],
            finish="tool_calls",
        ),
        conversation(),
    )
    recorded = am.response_record(msg)["message"]
    resent = am.messages({"messages": [{"role": "assistant", "content": msg["content"]}]})[0]
    assert thread_form(recorded) == thread_form(resent)


def test_error_shapes():
    assert am.error_body(400, "bad")["error"] == {"type": "invalid_request_error", "message": "bad"}
    assert am.error_body(502, "down")["error"]["type"] == "api_error"
    assert am.error_body(529, "busy")["error"]["type"] == "overloaded_error"
    ((name, data),) = parse_sse(error_event(504, "slow"))
    assert name == "error" and data == {
        "type": "error",
        "error": {"type": "api_error", "message": "slow"},
    }


def _tool(name: str, **kw) -> dict:
    return {"name": name, "input_schema": {"type": "object"}, **kw}


def test_deferred_tools_wait_for_a_reference_unless_the_search_is_anthropics():
    body = {
        **conversation(),
        "tools": [
            _tool("Bash"),
            _tool("WebFetch", defer_loading=True),
            _tool("Cron", defer_loading=True),
        ],
    }
    assert [t["function"]["name"] for t in am.tools(body)] == ["Bash"]
    loading = {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "content": [{"type": "tool_reference", "tool_name": "WebFetch"}],
            }
        ],
    }
    loaded = {**body, "messages": [*body["messages"], loading]}
    assert [t["function"]["name"] for t in am.tools(loaded)] == ["Bash", "WebFetch"]
    assert am.messages(loaded)[-1] == {
        "role": "tool",
        "tool_call_id": "toolu_1",
        "content": "Tool loaded: WebFetch",
    }
    # With Anthropic's own tool search (a server tool a chat upstream lacks), all up front.
    search = {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"}
    searched = {**body, "tools": [*body["tools"], search]}
    assert [t["function"]["name"] for t in am.tools(searched)] == ["Bash", "WebFetch", "Cron"]
    assert am.left_out(searched) == ["tool_search_tool_regex"]


def test_server_tools_are_left_out_but_a_pass_through_record_keeps_them():
    server = {"type": "web_fetch_20250910", "name": "web_fetch", "max_uses": 2}
    body = {**conversation(), "tools": [WEATHER, server]}
    assert [t["function"]["name"] for t in am.tools(body)] == ["get_weather"]
    assert am.left_out(body) == ["web_fetch"]
    assert am.record_tools(body)[1] == server  # the Anthropic upstream ran it: as sent


@pytest.mark.parametrize("engine", ["vllm", "openai"])
def test_a_prefill_is_continued(engine):
    """A final assistant turn is a prefill Anthropic goes on with: vLLM is asked to continue
    it (not to open a new assistant turn after it); count_tokens counts that prompt."""
    body = {
        "model": "m",
        "max_tokens": 50,
        "messages": [
            {"role": "user", "content": "Answer in JSON."},
            {"role": "assistant", "content": [{"type": "text", "text": '{"answer": '}]},
        ],
    }
    chat = am.to_chat(body, am.messages(body), engine=engine, model=None)
    assert chat["messages"][-1] == {"role": "assistant", "content": '{"answer": '}
    continued = {"continue_final_message": True, "add_generation_prompt": False}
    assert {k: chat[k] for k in continued if k in chat} == (continued if engine == "vllm" else {})
    up = UpstreamConfig(urls=("http://x",), engine=engine)
    assert tokenize_body(body, up)["add_generation_prompt"] is (engine != "vllm")
    answered = {**body, "messages": body["messages"][:1]}
    assert "continue_final_message" not in am.to_chat(
        answered, am.messages(answered), engine="vllm", model=None
    )


@pytest.mark.parametrize(
    ("thinking", "effort", "engine", "kwargs", "sent_effort"),
    [
        (
            {"type": "adaptive", "display": "omitted"},
            "medium",
            "vllm",
            {"enable_thinking": True},
            "medium",
        ),
        ({"type": "disabled"}, "high", "vllm", {"enable_thinking": False}, "high"),
        ({"type": "adaptive"}, "max", "vllm", {"enable_thinking": True}, None),  # not a chat effort
        ({"type": "adaptive"}, "low", "openai", None, None),
    ],
)
def test_thinking_and_effort(thinking, effort, engine, kwargs, sent_effort):
    body = {**conversation(), "thinking": thinking, "output_config": {"effort": effort}}
    chat = am.to_chat(body, am.messages(body), engine=engine, model=None)
    assert chat.get("chat_template_kwargs") == kwargs
    assert chat.get("reasoning_effort") == sent_effort


def test_structured_output_and_strict_tools_reach_the_engine():
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    body = {
        **conversation(),
        "tools": [{**WEATHER, "strict": True}],
        "output_config": {"format": {"type": "json_schema", "schema": schema}, "effort": "high"},
    }
    chat = am.to_chat(body, am.messages(body), engine="vllm", model=None)
    assert chat["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": schema, "strict": True},
    }
    assert chat["tools"][0]["function"]["strict"] is True
    assert chat["reasoning_effort"] == "high"
    with pytest.raises(BadRequest) as info:
        am.to_chat(
            {**body, "output_config": {"format": {"type": "json_schema"}}},
            [],
            engine="vllm",
            model=None,
        )
    assert info.value.param == "output_config.format.schema"
