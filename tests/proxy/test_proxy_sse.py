"""SSE splitting and stream assembly, byte by byte."""

from __future__ import annotations

import orjson
import pytest

from agentworld.proxy.adapters import openai_chunks
from agentworld.proxy.adapters.openai_records import LogprobValues
from agentworld.proxy.sse import EventSplitter, SSEError, StreamAssembler, event_data


def test_events_split_across_reads_and_line_endings():
    raw = b': ping\r\n\r\ndata: {"a": 1}\r\n\r\nevent: x\ndata: line1\ndata: line2\n\ndata: [DONE]\n\n'
    sp = EventSplitter()
    events = [ev for i in range(len(raw)) for ev in sp.split(raw[i : i + 1])]
    assert [event_data(e) for e in events] == [None, b'{"a": 1}', b"line1\nline2", b"[DONE]"]
    assert sp.pending == b""


def test_oversized_event_is_refused():
    sp = EventSplitter(max_event_bytes=64)
    with pytest.raises(SSEError, match="over 64 bytes"):
        list(sp.split(b"data: " + b"x" * 100))


def test_assembler_rebuilds_tool_calls_reasoning_ids_and_usage():
    chunks = [
        {
            "id": "c1",
            "model": "m",
            "created": 1,
            "prompt_token_ids": [1, 2],
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
        },
        {
            "id": "c1",
            "choices": [{"index": 0, "delta": {"reasoning_content": "hm"}, "token_ids": [5]}],
        },
        {
            "id": "c1",
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "t0",
                                "type": "function",
                                "function": {"name": "f", "arguments": ""},
                            }
                        ]
                    },
                }
            ],
        },
        {
            "id": "c1",
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"a"'}}]},
                    "token_ids": [6, 7],
                    "logprobs": {"content": [{"logprob": -1.0}, {"logprob": -2.0}]},
                }
            ],
        },
        {
            "id": "c1",
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]},
                    "token_ids": [8],
                }
            ],
        },
        {"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {"id": "c1", "choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 4}},
    ]
    asm = StreamAssembler(chat=True)
    for c in chunks:
        asm.add(orjson.loads(orjson.dumps(c)))
    body = asm.result()
    (choice,) = body["choices"]
    assert choice["message"]["tool_calls"] == [
        {"id": "t0", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    ]
    assert choice["message"]["reasoning"] == "hm"
    assert choice["message"]["content"] is None  # the first chunk's "": null, as vLLM's unary
    assert choice["token_ids"] == [5, 6, 7, 8] and choice["finish_reason"] == "tool_calls"
    assert body["prompt_token_ids"] == [1, 2] and body["usage"]["completion_tokens"] == 4
    assert body["id"] == "c1"


def test_assembled_logprobs_are_the_entries_values():
    """Each reading keeps of a log-prob entry its value only (None for an entry without
    one, or not an object), in one list whatever mix of readings fed the choice."""

    def event(*entries: object) -> bytes:
        return orjson.dumps({"choices": [{"index": 0, "logprobs": {"content": list(entries)}}]})

    asm = StreamAssembler(chat=True)
    asm.add_typed(openai_chunks.READ(event({"token": "a", "logprob": -1, "top_logprobs": []})))
    asm.add(orjson.loads(event({"logprob": -0.5}, {"token": "b"}, 5, {"logprob": 0})))
    asm.add_typed(openai_chunks.READ(event({"logprob": None}, {"logprob": -0.0})))
    asm.add(orjson.loads(event({"logprob": -2.5})))
    values = asm.choices[0].logprobs
    assert type(values) is LogprobValues
    assert orjson.dumps(values) == b"[-1,-0.5,null,null,0,null,-0.0,-2.5]"
    assert asm.result()["choices"][0]["logprobs"] == {"content": values}


def test_assembler_keeps_an_error_event():
    asm = StreamAssembler(chat=True)
    asm.add({"error": {"message": "boom", "code": 500}})
    assert asm.error == {"message": "boom", "code": 500}


def _reference_split(chunks: list[bytes]) -> tuple[list[bytes], bytes]:
    """What splitting the whole stream at once gives (the splitter must agree at any cut)."""
    buf = b"".join(chunks).replace(b"\r\n", b"\n")
    *events, rest = buf.split(b"\n\n")
    return events, rest


@pytest.mark.parametrize("crlf", [False, True], ids=["lf", "crlf"])
def test_any_cut_of_a_stream_gives_the_same_events(crlf):
    import random

    rng = random.Random(3)
    raw = b"".join(
        b"data: " + orjson.dumps({"i": i, "pad": "x" * rng.randrange(0, 40)}) + b"\n\n"
        for i in range(30)
    )
    raw += b"event: e\ndata: a\ndata: b\n\n: comment\n\ndata: tail"
    if crlf:
        raw = raw.replace(b"\n", b"\r\n")
    for _ in range(200):
        cuts = sorted(rng.sample(range(1, len(raw)), rng.randrange(1, 40)))
        chunks = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
        sp = EventSplitter()
        got = [ev for c in chunks for ev in sp.split(c)]
        events, rest = _reference_split(chunks)
        assert got == events
        assert sp.pending.replace(b"\r\n", b"\n") == rest


def test_blank_line_straddling_two_reads():
    sp = EventSplitter()
    assert sp.split(b"data: 1\n") == []
    assert sp.split(b"\ndata: 2\n") == [b"data: 1"]
    assert sp.split(b"\n") == [b"data: 2"]
    assert sp.pending == b""


def test_a_long_event_over_many_reads_is_searched_once():
    """A first chunk of a long prompt's ids, read 1 KB at a time: each read is searched
    on its own (not the whole event again), and the event comes out whole."""
    event = b"data: " + orjson.dumps({"prompt_token_ids": list(range(40_000))})
    sp = EventSplitter()
    out = [ev for i in range(0, len(event), 1024) for ev in sp.split(event[i : i + 1024])]
    assert out == [] and len(sp._parts) == -(-len(event) // 1024)
    assert sp.split(b"\n\ndata: [DONE]\n\n") == [event, b"data: [DONE]"]


def test_oversized_event_over_many_reads_is_refused():
    sp = EventSplitter(max_event_bytes=64)
    sp.split(b"data: " + b"x" * 40)
    with pytest.raises(SSEError, match="over 64 bytes"):
        sp.split(b"y" * 40)
