"""OpenAI Responses <-> chat completions: items, chains, responses, streams, checked with the SDK's types."""

from __future__ import annotations

import pytest
from openai import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from agentworld import records
from agentworld.proxy.bad_request import BadRequest
from agentworld.proxy.normal_form import thread_form
from agentworld.proxy.translate import responses as rs
from agentworld.proxy.translate import responses_answer as ra
from agentworld.proxy.translate.response_chains import ResponseChains, Stored
from agentworld.proxy.translate.responses_stream import ChatToResponses, ResponsesAssembler
from tests.proxy_protocols.chat_fixtures import chat_body, chat_chunks, parse_sse

EVENT = TypeAdapter(ResponseStreamEvent)
TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    "strict": True,
}


def request() -> dict:
    return {
        "model": "gpt-x",
        "instructions": "Be brief.",
        "tools": [TOOL],
        "tool_choice": {"type": "function", "name": "get_weather"},
        "max_output_tokens": 300,
        "temperature": 0.3,
        "text": {"format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}}},
        "reasoning": {"effort": "low"},
        "input": [
            {"role": "developer", "content": "Mind the units."},
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "Paris?"}],
            },
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": "Tool."}],
            },
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Checking."}],
            },
            {
                "type": "function_call",
                "call_id": "call_1",
                "name": "get_weather",
                "arguments": '{"city":"Paris"}',
            },
            {"type": "function_call_output", "call_id": "call_1", "output": "18C"},
            {
                "role": "user",
                "content": [
                    {"type": "input_image", "image_url": "https://x/y.png", "detail": "low"}
                ],
            },
        ],
    }


def test_items_normalise_into_turns():
    body = request()
    msgs = rs.messages(rs.items(body), body["instructions"])
    assert msgs[0] == {"role": "system", "content": "Be brief."}
    assert msgs[1] == {"role": "developer", "content": "Mind the units."}
    assert msgs[2] == {"role": "user", "content": [{"type": "text", "text": "Paris?"}]}
    assert msgs[3] == {
        "role": "assistant",
        "content": "Checking.",
        "reasoning": "Tool.",
        "tool_calls": [{"id": "call_1", "name": "get_weather", "arguments": '{"city":"Paris"}'}],
    }
    assert msgs[4] == {"role": "tool", "tool_call_id": "call_1", "content": "18C"}
    assert msgs[5]["content"] == [
        {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}}
    ]
    records.validate(
        records.make_step(
            trajectory="tr_x",
            index=0,
            agent="a",
            request={"messages": msgs},
            response=None,
            protocol=rs.PROTOCOL,
            status="cancelled",
        )
    )


@pytest.mark.parametrize(
    ("effort", "engine", "sent"),
    [
        ("high", "vllm", "high"),
        ("minimal", "vllm", None),  # vLLM takes low / medium / high and refuses the rest
        ("xhigh", "vllm", None),
        ("none", "vllm", None),
        ("minimal", "openai", "minimal"),  # OpenAI's chat API takes it
    ],
)
def test_reasoning_effort_goes_where_the_engine_takes_it(effort, engine, sent):
    """Codex sends the effort it is set to (``minimal``, ``xhigh``...): a value vLLM would
    refuse with a 400 on every call is left out for it."""
    body = {"model": "m", "input": "hi", "reasoning": {"effort": effort}}
    chat = rs.to_chat(body, rs.messages(rs.items(body)), engine=engine, model=None)
    assert chat.get("reasoning_effort") == sent


def test_string_input_is_one_user_message():
    assert rs.messages(rs.items({"input": "hi"})) == [{"role": "user", "content": "hi"}]


def test_request_translates_to_chat():
    body = {**request(), "stream": True}
    chat = rs.to_chat(
        body, rs.messages(rs.items(body), body["instructions"]), engine="vllm", model=None
    )
    assert chat["model"] == "gpt-x" and chat["max_tokens"] == 300 and chat["temperature"] == 0.3
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert chat["tools"][0]["function"]["strict"] is True
    assert chat["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "w", "schema": {"type": "object"}},
    }
    assert chat["reasoning_effort"] == "low"
    assert chat["stream_options"] == {"include_usage": True}
    assert [m["role"] for m in chat["messages"]] == [
        "system",
        "system",
        "user",
        "assistant",
        "tool",
        "user",
    ]
    assert chat["messages"][3]["tool_calls"][0]["function"] == {
        "name": "get_weather",
        "arguments": '{"city":"Paris"}',
    }


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "m"}, "input"),
        ({"input": 5}, "input"),
        ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
        ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id"),
        ({"input": "x", "previous_response_id": 3}, "previous_response_id"),
        ({"input": "x", "tools": {}}, "tools"),
        ({"input": "x", "max_output_tokens": 1.5}, "max_output_tokens"),
        ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
        # each was once a 500 (found by fuzzing the proxy)
        ({"input": [{"role": {}, "content": "x"}]}, "input[0].role"),
        (
            {"input": [{"type": "function_call_output", "call_id": "c", "output": False}]},
            "input[0].output",
        ),
        (
            {"input": [{"type": "function_call", "call_id": "c", "name": "f" * 2000}]},
            "input[0].name",
        ),
        (  # a chat model would get the call as NAMESPACE__NAME: too long for a record
            {
                "input": [
                    {"type": "function_call", "call_id": "c", "name": "f", "namespace": "n" * 2000}
                ]
            },
            "input[0].namespace",
        ),
        (
            {"input": [{"type": "function_call", "call_id": "c", "name": "f", "namespace": [1]}]},
            "input[0].namespace",
        ),
    ],
)
def test_bad_requests_name_the_field(body, param):
    with pytest.raises(BadRequest) as info:
        rs.check(body)
    assert info.value.param == param


def test_builtin_tools_and_items_need_passthrough():
    with pytest.raises(BadRequest, match="passthrough"):
        rs.tools({"tools": [{"type": "local_shell"}]})
    with pytest.raises(BadRequest, match="passthrough"):
        rs.messages([{"type": "web_search_call", "id": "ws_1"}])
    assert rs.messages([{"type": "web_search_call", "id": "ws_1"}], strict=False) == []


def test_chains_rebuild_history_and_forget_evicted_ancestors():
    chains = ResponseChains(max_responses=2)
    a = [{"type": "message", "role": "user", "content": "1"}]
    chains.put(
        "r1", Stored("tr_a", None, a, [{"type": "message", "role": "assistant", "content": "x"}])
    )
    chains.put(
        "r2", Stored("tr_a", "r1", [{"type": "message", "role": "user", "content": "2"}], [])
    )
    assert [i["content"] for i in chains.history("r2")] == ["1", "x", "2"]
    chains.put("r3", Stored("tr_a", "r2", [], []))
    with pytest.raises(BadRequest, match="ancestor 'r1'"):
        chains.history("r3")
    with pytest.raises(BadRequest, match="'nope' not found") as info:
        chains.history("nope")
    assert info.value.param == "previous_response_id"


def test_chains_stay_within_their_byte_budget():
    big = [{"type": "message", "role": "user", "content": "x" * 1000}]
    chains = ResponseChains(max_bytes=2500)
    for i in range(3):
        chains.put(f"r{i}", Stored("tr_a", None, big, []))
    assert len(chains) == 2 and 2000 < chains.bytes <= 2500  # the oldest went
    assert chains.get("r0") is None and chains.get("r2") is not None
    chains.put("r2", Stored("tr_a", None, [], []))  # replacing one gives its bytes back
    assert len(chains) == 2 and 1000 < chains.bytes < 1100
    alone = ResponseChains(max_bytes=10)
    alone.put("r", Stored("tr_a", None, big, []))  # the newest stays even when over
    assert alone.get("r") is not None


def test_unary_answer_is_a_valid_response():
    chat = chat_body(
        content="Sunny.",
        reasoning="Look.",
        calls=[("call_5", "get_weather", '{"city":"Oslo"}')],
        finish="tool_calls",
    )
    resp = Response.model_validate(ra.from_chat(chat, request(), "resp_1"))
    assert resp.id == "resp_1" and resp.status == "completed"
    assert [o.type for o in resp.output] == ["reasoning", "message", "function_call"]
    assert resp.output_text == "Sunny."
    assert resp.output[2].call_id == "call_5" and resp.output[2].arguments == '{"city":"Oslo"}'
    assert resp.usage.input_tokens == 5
    truncated = Response.model_validate(
        ra.from_chat(chat_body(finish="length"), request(), "resp_2")
    )
    assert (
        truncated.status == "incomplete"
        and truncated.incomplete_details.reason == "max_output_tokens"
    )


def _stream(
    chunks: list[dict], body: dict
) -> tuple[ChatToResponses, list[tuple[str | None, dict]]]:
    tr = ChatToResponses(body, "resp_s")
    out = b"".join(b for c in chunks for b in tr.feed(c))
    u = chunks[-1]["usage"]
    out += b"".join(tr.finish(u["prompt_tokens"], u["completion_tokens"], 0))
    return tr, parse_sse(out)


def test_stream_events_are_valid_and_accumulate_to_the_unary_response():
    spec = {
        "content": "Sunny in Oslo.",
        "reasoning": "Look it up.",
        "calls": [
            ("call_1", "get_weather", '{"city":"Oslo"}'),
            ("call_2", "get_weather", '{"city":"Rome"}'),
        ],
        "finish": "tool_calls",
    }
    _, events = _stream(chat_chunks(**spec), request())
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    assert events[0][0] == "response.created" and events[-1][0] == "response.completed"
    state = ResponseStreamState(input_tools=[TOOL], text_format=omit)
    for _, data in events:
        for _ev in state.handle_event(EVENT.validate_python(data)):
            pass
    final = Response.model_validate(events[-1][1]["response"])
    unary = Response.model_validate(ra.from_chat(chat_body(**spec), request(), "resp_s"))
    strip = lambda r: [{k: v for k, v in o.model_dump().items() if k != "id"} for o in r.output]  # noqa: E731
    assert strip(final) == strip(unary)
    assert final.usage.output_tokens == unary.usage.output_tokens
    assert state._completed_response is not None


def test_assembler_and_record_from_a_stream():
    spec = {
        "content": "Done.",
        "calls": [("call_3", "get_weather", '{"city":"Oslo"}')],
        "finish": "tool_calls",
    }
    _, events = _stream(chat_chunks(**spec), request())
    asm = ResponsesAssembler()
    for _, data in events:
        asm.add(data)
    assert asm.done
    rec = ra.response_record(asm.result())
    assert rec["finish_reason"] == "tool_calls"
    assert rec["message"] == {
        "role": "assistant",
        "content": "Done.",
        "tool_calls": [{"id": "call_3", "name": "get_weather", "arguments": '{"city":"Oslo"}'}],
    }
    assert rec["usage"] == {"prompt_tokens": 5, "completion_tokens": 20, "total_tokens": 25}


def test_assembler_keeps_a_cut_stream():
    _, events = _stream(chat_chunks(content="Partial answer"), request())
    asm = ResponsesAssembler()
    for _, data in events[:6]:
        asm.add(data)
    assert not asm.done
    assert ra.response_record(asm.result())["message"]["content"] == "Partia"  # two 3-char deltas


def test_output_resent_as_input_threads_to_the_same_turn():
    resp = ra.from_chat(
        chat_body(content="Hi.", reasoning="r", calls=[("c1", "f", "{}")], finish="tool_calls"),
        request(),
        "r",
    )
    recorded = ra.response_record(resp)["message"]
    resent = rs.messages(resp["output"])[0]
    assert thread_form(recorded) == thread_form(resent)


@pytest.mark.parametrize("chunks", [0, 1, 3], ids=["before-anything", "after-role", "mid-text"])
def test_a_failed_stream_ends_as_openai_ends_one(chunks):
    """A failure, even before the upstream's first chunk, reaches a client as OpenAI sends it:
    ``response.created`` first (the SDK raised a RuntimeError, not an API error, without
    it), then ``error`` and ``response.failed`` with the error and the output so far."""
    tr = ChatToResponses(request(), "resp_e")
    out = b"".join(b for c in chat_chunks()[:chunks] for b in tr.feed(c))
    events = parse_sse(out + tr.fail(502, "upstream down"))
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    names = [n for n, _ in events]
    assert names[:2] == ["response.created", "response.in_progress"]
    assert names[-2:] == ["error", "response.failed"]
    state = ResponseStreamState(input_tools=[TOOL], text_format=omit)
    for _, data in events:
        state.handle_event(EVENT.validate_python(data))
    error = EVENT.validate_python(events[-2][1])
    assert error.message == "upstream down" and error.code == "server_error"
    failed = Response.model_validate(events[-1][1]["response"])
    assert failed.status == "failed" and failed.error.message == "upstream down"
    assert len(failed.output) == (1 if chunks == 3 else 0)  # the message begun, in progress


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
def test_a_call_cut_off_by_max_output_tokens_is_an_incomplete_item(stream):
    """The response is incomplete, and so is the call the limit cut off: a client must not
    take its half-written arguments for a call to run."""
    spec = {
        "content": "Writing.",
        "calls": [("call_1", "get_weather", '{"city": "Os')],
        "finish": "length",
    }
    if stream:
        _, events = _stream(chat_chunks(**spec), request())
        assert events[-1][0] == "response.incomplete"
        resp = Response.model_validate(events[-1][1]["response"])
        done = [EVENT.validate_python(d) for n, d in events if n == "response.output_item.done"]
        assert [d.item.status for d in done] == ["completed", "incomplete"]
    else:
        resp = Response.model_validate(ra.from_chat(chat_body(**spec), request(), "resp_s"))
    assert resp.status == "incomplete"
    assert resp.incomplete_details.reason == "max_output_tokens"
    assert [o.status for o in resp.output] == ["completed", "incomplete"]


def _namespaced_body() -> dict:
    inner_custom = {"type": "custom", "name": "note", "description": "Write a note."}
    namespace = {
        "type": "namespace",
        "name": "crm",
        "description": "Customer records.",
        "tools": [{**TOOL, "name": "lookup"}, inner_custom],
    }
    return {
        "model": "gpt-x",
        "input": "hi",
        "tools": [
            namespace,
            TOOL,
            {"type": "web_search"},
            {"type": "file_search", "vector_store_ids": ["v"]},
        ],
    }


def test_namespaced_tools_reach_a_chat_model_by_a_joined_name_and_answer_by_namespace():
    body = _namespaced_body()
    names = [t["function"]["name"] for t in rs.tools(body)]
    assert names == ["crm__lookup", "crm__note", "get_weather"]  # hosted tools left out
    assert rs.left_out(body) == ["web_search", "file_search"]
    assert rs.tools(body)[1]["function"]["description"] == "(crm: Customer records.)\nWrite a note."
    chat = chat_body(
        content=None,
        calls=[("c1", "crm__lookup", "{}"), ("c2", "crm__note", '{"input": "hi"}')],
        finish="tool_calls",
    )
    lookup, note = Response.model_validate(ra.from_chat(chat, body, "resp_n")).output
    assert (lookup.type, lookup.namespace, lookup.name) == ("function_call", "crm", "lookup")
    assert (note.type, note.namespace, note.name, note.input) == (
        "custom_tool_call",
        "crm",
        "note",
        "hi",
    )
    # ... and streamed, the items say the same from the first event on.
    _, events = _stream(chat_chunks(content=None, calls=[("c1", "crm__lookup", "{}")]), body)
    added = [d["item"] for n, d in events if n == "response.output_item.added"]
    assert (added[0]["namespace"], added[0]["name"]) == ("crm", "lookup")
    # The agent's own history gives them back by the joined name.
    again = rs.messages(
        [
            {
                "type": "function_call",
                "call_id": "c1",
                "namespace": "crm",
                "name": "lookup",
                "arguments": "{}",
            }
        ]
    )
    assert again[0]["tool_calls"][0]["name"] == "crm__lookup"
    choice = {"type": "function", "name": "lookup", "namespace": "crm"}
    assert rs.to_chat({**body, "tool_choice": choice}, [], engine="vllm", model=None)[
        "tool_choice"
    ] == {"type": "function", "function": {"name": "crm__lookup"}}


def test_a_namespace_of_other_tools_is_refused_naming_it():
    body = {"tools": [{"type": "namespace", "name": "x", "tools": [{"type": "web_search"}]}]}
    with pytest.raises(BadRequest) as info:
        rs.tools(body)
    assert info.value.param == "tools[0].tools[0]"


def test_deferred_functions_wait_for_the_agents_own_search_but_not_for_openais():
    deferred = {**TOOL, "name": "later", "defer_loading": True}
    search = {"type": "tool_search", "execution": "client"}
    names = lambda body, items=(): [t["function"]["name"] for t in rs.tools(body, items)]  # noqa: E731
    assert names({"tools": [TOOL, deferred, search]}) == ["get_weather", "tool_search"]
    # What the agent's search loaded is given, deferred flag and all.
    out = {"type": "tool_search_output", "call_id": "s1", "tools": [deferred]}
    assert names({"tools": [TOOL, deferred, search]}, [out]) == [
        "get_weather",
        "tool_search",
        "later",
    ]
    # OpenAI's own search (hosted) is left out: the chat model gets every tool up front.
    hosted = {"tools": [TOOL, deferred, {"type": "tool_search"}]}
    assert names(hosted) == ["get_weather", "later"] and rs.left_out(hosted) == ["tool_search"]
    # The model's search call answers as the agent's own tool_search_call, arguments an object.
    chat = chat_body(
        content=None, calls=[("c9", "tool_search", '{"query": "x"}')], finish="tool_calls"
    )
    (item,) = Response.model_validate(ra.from_chat(chat, {"tools": [search]}, "resp_t")).output
    assert (item.type, item.call_id, item.arguments) == ("tool_search_call", "c9", {"query": "x"})


def test_a_tool_two_searches_loaded_is_given_once():
    search = {"type": "tool_search", "execution": "client"}
    loaded = {"type": "tool_search_output", "tools": [{**TOOL, "name": "later"}]}
    names = [t["function"]["name"] for t in rs.tools({"tools": [TOOL, search]}, [loaded, loaded])]
    assert names == ["get_weather", "tool_search", "later"]
