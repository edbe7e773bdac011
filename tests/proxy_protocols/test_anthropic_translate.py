"""Anthropic Messages <-> chat completions: requests, messages, streams, checked with the SDK's types."""

from __future__ import annotations

import pytest
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import Message, RawMessageStreamEvent
from pydantic import TypeAdapter

from agentworld import records
from agentworld.proxy import anthropic as am
from agentworld.proxy.anthropic_stream import AnthropicAssembler, ChatToAnthropic, error_event
from agentworld.proxy.protocols import BadRequest, thread_form
from tests.proxy_protocols.chat_fixtures import chat_body, chat_chunks, parse_sse

EVENT = TypeAdapter(RawMessageStreamEvent)
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
        ({"model": "m", "max_tokens": 5, "messages": [], "temperature": "hot"}, "temperature"),
        ({"model": "m", "max_tokens": 5, "messages": [], "stop_sequences": "x"}, "stop_sequences"),
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
