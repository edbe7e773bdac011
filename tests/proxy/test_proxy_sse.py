"""SSE splitting and stream assembly, byte by byte."""

from __future__ import annotations

import orjson
import pytest

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
    assert choice["message"]["reasoning"] == "hm" and choice["message"]["content"] == ""
    assert choice["token_ids"] == [5, 6, 7, 8] and choice["finish_reason"] == "tool_calls"
    assert body["prompt_token_ids"] == [1, 2] and body["usage"]["completion_tokens"] == 4
    assert body["id"] == "c1"


def test_assembler_keeps_an_error_event():
    asm = StreamAssembler(chat=True)
    asm.add({"error": {"message": "boom", "code": 500}})
    assert asm.error == {"message": "boom", "code": 500}
