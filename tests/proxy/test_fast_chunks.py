"""The compiled reading of streamed chat events (agentworld/proxy/_chunks.c) against the
Python reading it stands in for, on the same events: the same answer assembled
(``partial()``, to the byte of its JSON), the same events to the agent (the same bytes
where nothing is stripped, the same JSON where the proxy's own fields are), the same
faults, ends and counts. The events: vLLM and OpenAI streams, every odd or broken shape
we could think of, each event cut at every byte, and a seeded mutation fuzz of them all.
"""

from __future__ import annotations

import json
import math
import os
import random
import struct
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import orjson
import pytest

from agentworld import raw_ids
from agentworld.proxy.adapters import fast_chunks
from agentworld.proxy.adapters.openai import CHAT, Injected
from agentworld.proxy.adapters.openai_stream import OpenAIRelay
from agentworld.proxy.fake_upstream import logprob_entry
from agentworld.proxy.sse import MALFORMED
from agentworld.proxy.upstream.answer_json import MIN_RAW_BYTES
from tests.proxy.test_proxy_chunks import ODD, RAW_ODD, STREAM
from tests.proxy.test_proxy_fastpaths import _vllm_events, logprob_lists
from tests.proxy_protocols.chat_fixtures import chat_chunks

pytestmark = pytest.mark.skipif(
    fast_chunks.Reader is None,
    reason="the C extension agentworld.proxy._chunks is not built here (no compiler at "
    "install), or AW_NO_EXTENSIONS is set: the proxy reads events in Python",
)

ROOT = Path(__file__).resolve().parents[2]
MODES = [Injected(False, False), Injected(True, True), Injected(False, True), Injected(True, False)]
MODE_IDS = ["as-it-came", "ids-and-logprobs", "logprobs", "ids"]
HEAD = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}


def data(obj: object) -> bytes:
    try:
        return b"data: " + orjson.dumps(obj)
    except TypeError:  # an int past 64 bits
        return b"data: " + json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def choice(**fields: object) -> dict:
    return {**HEAD, "choices": [{"index": 0, **fields}]}


def entries(*values: object) -> dict:
    return {
        "content": [
            {"token": "t", "logprob": v, "bytes": [116], "top_logprobs": []} for v in values
        ]
    }


# ---------------------------------------------------------------- the corpus

# fmt: off


def bench_stream() -> list[bytes]:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from _hop_servers import stream_body
    finally:
        sys.path.remove(str(ROOT / "bench"))
    return [e for e in stream_body().split(b"\n\n") if e]


def vllm_stream() -> list[bytes]:
    """As fake_upstream writes a streamed chat answer with ids and log-probs."""
    out = [data({**HEAD, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}], "prompt_token_ids": [1, 2, 3]})]
    text = "Héllo, wörld! 😀 中文 \"quoted\" back\\slash\n"
    for k in range(0, len(text), 3):
        piece = text[k : k + 3]
        lp = {"content": [logprob_entry(x, k + q) for q, x in enumerate(piece)]}
        ids = [ord(x) for x in piece]
        out.append(data(choice(delta={"content": piece}, logprobs=lp, finish_reason=None, token_ids=ids)))
    out.append(data(choice(delta={}, logprobs=None, finish_reason="stop", stop_reason=None, token_ids=[])))
    out.append(data({**HEAD, "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 9, "total_tokens": 12, "prompt_tokens_details": None}}))
    return out


def openai_stream() -> list[bytes]:
    """OpenAI's own: fields vLLM does not send (service_tier, obfuscation, refusal)."""
    head = {**HEAD, "service_tier": "default", "system_fingerprint": "fp_1"}
    lp = {"content": [{"token": "Hi", "logprob": -0.0012, "bytes": [72, 105], "top_logprobs": [{"token": "Hi", "logprob": -0.0012, "bytes": [72, 105]}]}], "refusal": None}
    return [
        data({**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "", "refusal": None}, "logprobs": None, "finish_reason": None}], "usage": None, "obfuscation": "x"}),
        data({**head, "choices": [{"index": 0, "delta": {"content": "Hi"}, "logprobs": lp, "finish_reason": None}], "usage": None}),
        data({**head, "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}], "usage": None}),
        data({**head, "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10, "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0}}}),
    ]


def two_choices() -> list[bytes]:
    """n=2: the choices' events interleaved, and both in one event."""
    out = []
    for i in (0, 1):
        out.append(data({**HEAD, "choices": [{"index": i, "delta": {"role": "assistant", "content": ""}}]}))
    for k, word in enumerate(["a", "b", "c", "d"]):
        out.append(data(choice(index=k % 2, delta={"content": word}, logprobs=entries(-0.5 * k), token_ids=[k])))
    both = [{"index": 1, "delta": {"content": "x"}, "token_ids": [9]}, {"index": 0, "delta": {"content": "y"}, "token_ids": [8], "finish_reason": "length"}]
    out.append(data({**HEAD, "choices": both}))
    out.append(data({**HEAD, "choices": [{"index": 1, "delta": {}, "finish_reason": "stop", "stop_reason": 7}]}))
    return out


# Events of every shape the C reader takes, or must leave to Python: each is put into a
# vLLM stream, after its second event.
C_ODD: dict[str, bytes] = {
    # strings
    "escapes": b'data: {"choices":[{"index":0,"delta":{"content":"\\n\\"\\\\\\/\\b\\f\\r\\t\\u00e9\\u4e2d\\u0000\\u001f"}}]}',
    "surrogate pair": b'data: {"choices":[{"index":0,"delta":{"content":"\\ud83d\\ude00 \\uD83D\\uDE00"}}]}',
    "lone high surrogate": b'data: {"choices":[{"index":0,"delta":{"content":"\\ud800"}}]}',
    "lone low surrogate": b'data: {"choices":[{"index":0,"delta":{"content":"\\udc00x"}}]}',
    "high then not low": b'data: {"choices":[{"index":0,"delta":{"content":"\\ud800\\u0041"}}]}',
    "high then escape": b'data: {"choices":[{"index":0,"delta":{"content":"\\ud800\\n"}}]}',
    "bad escape": b'data: {"choices":[{"index":0,"delta":{"content":"\\x41"}}]}',
    "short hex": b'data: {"choices":[{"index":0,"delta":{"content":"\\u12"}}]}',
    "raw utf-8": 'data: {"choices":[{"index":0,"delta":{"content":"é✓😀中\x7f"}}]}'.encode(),
    "overlong utf-8": b'data: {"choices":[{"index":0,"delta":{"content":"\xc0\x80"}}]}',
    "utf-8 surrogate": b'data: {"choices":[{"index":0,"delta":{"content":"\xed\xa0\x80"}}]}',
    "past U+10FFFF": b'data: {"choices":[{"index":0,"delta":{"content":"\xf4\x90\x80\x80"}}]}',
    "cut utf-8": b'data: {"choices":[{"index":0,"delta":{"content":"\xe2\x82"}}]}',
    "utf-8 in a skipped token": b'data: {"choices":[{"index":0,"logprobs":{"content":[{"token":"\xff","logprob":-1}]}}]}',
    "lone surrogate in a skipped token": b'data: {"choices":[{"index":0,"logprobs":{"content":[{"token":"\\udc00","logprob":-1}]}}]}',
    "high surrogate in a skipped token": b'data: {"choices":[{"index":0,"logprobs":{"content":[{"token":"a\\ud800","logprob":-1}]}}]}',
    "bad escape in a skipped token": b'data: {"choices":[{"index":0,"logprobs":{"content":[{"token":"\\q","logprob":-1}]}}]}',
    "control character in a skipped token": b'data: {"choices":[{"index":0,"logprobs":{"content":[{"token":"\x1f","logprob":-1}]}}]}',
    "surrogate pair in a skipped token": b'data: {"choices":[{"index":0,"logprobs":{"content":[{"token":"\\ud83d\\ude00","logprob":-1,"bytes":[240,159,152,128]}]}}]}',
    "invalid utf-8 in an unknown key": b'data: {"x\xff":1,"choices":[{"index":0,"delta":{"content":"k"}}]}',
    "lone surrogate in an unknown value": b'data: {"x":"\\udc00","choices":[{"index":0,"delta":{"content":"k"}}]}',
    "control character": b'data: {"choices":[{"index":0,"delta":{"content":"a\x01b"}}]}',
    "tab in a string": b'data: {"choices":[{"index":0,"delta":{"content":"a\tb"}}]}',
    "NUL in a string": b'data: {"choices":[{"index":0,"delta":{"content":"a\x00b"}}]}',
    "escaped key": b'data: {"\\u0069d":"x","choices":[{"index":0,"delta":{"content":"k"}}]}',
    "escaped choice key": b'data: {"choices":[{"\\u0069ndex":1,"delta":{"content":"k"}}]}',
    "non-ascii key": 'data: {"clé":1,"choices":[{"index":0,"delta":{"content":"k"}}]}'.encode(),
    # integers
    "index int64 max": data({**HEAD, "choices": [{"index": 2**63 - 1, "delta": {"content": "M"}}]}),
    "index int64 min": data({**HEAD, "choices": [{"index": -(2**63), "delta": {"content": "m"}}]}),
    "index past int64": data({**HEAD, "choices": [{"index": 2**63, "delta": {"content": "p"}}]}),
    "index below int64": b'data: {"choices":[{"index":-9223372036854775809,"delta":{"content":"b"}}]}',
    "index minus zero": b'data: {"choices":[{"index":-0,"delta":{"content":"z"}}]}',
    "index leading zero": b'data: {"choices":[{"index":01,"delta":{"content":"z"}}]}',
    "index exponent": b'data: {"choices":[{"index":1e0,"delta":{"content":"z"}}]}',
    "index 20 digits": b'data: {"choices":[{"index":12345678901234567890,"delta":{"content":"z"}}]}',
    "created past 64 bits": b'data: {"id":"x","created":18446744073709551616,"choices":[]}',
    "created float": b'data: {"created":1.5,"choices":[]}',
    "created null": b'data: {"created":null,"choices":[]}',
    "token ids big": data(choice(token_ids=[2**63 - 1, -(2**63), 0, 151643])),
    "token ids past int64": data(choice(token_ids=[2**64])),
    "token ids floats": b'data: {"choices":[{"index":0,"token_ids":[1.0]}]}',
    "token ids leading zero": b'data: {"choices":[{"index":0,"token_ids":[1,02]}]}',
    "token ids spaced": b'data: {"choices":[{"index":0,"token_ids":[ 1 , 2 ,3 ]}]}',
    "token ids trailing comma": b'data: {"choices":[{"index":0,"token_ids":[1,2,]}]}',
    "token ids null": data(choice(token_ids=None, delta={"content": "n"})),
    "token ids empty": data(choice(token_ids=[])),
    "stop reason int": data(choice(stop_reason=151643)),
    "stop reason float": b'data: {"choices":[{"index":0,"stop_reason":1.5}]}',
    "stop reason bool": b'data: {"choices":[{"index":0,"stop_reason":true}]}',
    # log-prob values
    "logprob values": data(choice(logprobs=entries(-0.0, 0.0, 0, -1, 1e-05, -2.3841855067985307e-07, -17.5, 1e22, 2**53 + 1, -1e-22))),
    "logprob forms": b'data: {"choices":[{"index":0,"logprobs":{"content":[{"logprob":1E+2},{"logprob":-0.000},{"logprob":0e5},{"logprob":-0},{"logprob":1.7976931348623157e308},{"logprob":2.2250738585072014e-308},{"logprob":0.12345678901234567890123},{"logprob":123456789012345678901234.5},{"logprob":9007199254740993.0},{"logprob":9007199254740993},{"logprob":1.5e22},{"logprob":9007199254740992e22},{"logprob":1e-23},{"logprob":-9223372036854775808}]}}]}',
    "logprob overflow": b'data: {"choices":[{"index":0,"logprobs":{"content":[{"logprob":1e400}]}}]}',
    "logprob underflow": b'data: {"choices":[{"index":0,"logprobs":{"content":[{"logprob":1e-400}]}}]}',
    "logprob subnormal": b'data: {"choices":[{"index":0,"logprobs":{"content":[{"logprob":5e-324}]}}]}',
    "logprob past int64": b'data: {"choices":[{"index":0,"logprobs":{"content":[{"logprob":9223372036854775808}]}}]}',
    "logprob bad number": b'data: {"choices":[{"index":0,"logprobs":{"content":[{"logprob":-.5}]}}]}',
    "logprob dot": b'data: {"choices":[{"index":0,"logprobs":{"content":[{"logprob":1.}]}}]}',
    "logprob exponent alone": b'data: {"choices":[{"index":0,"logprobs":{"content":[{"logprob":1e}]}}]}',
    "logprob plus": b'data: {"choices":[{"index":0,"logprobs":{"content":[{"logprob":+1}]}}]}',
    "logprob null": data(choice(logprobs={"content": [{"token": "a", "logprob": None}]})),
    "logprob absent": data(choice(logprobs={"content": [{"token": "a"}, {}]}, token_ids=[1])),
    "logprob a list": data(choice(logprobs={"content": [{"logprob": [1]}]})),
    "logprob true": data(choice(logprobs={"content": [{"logprob": True}]})),
    "logprob twice": b'data: {"choices":[{"index":0,"logprobs":{"content":[{"logprob":-1,"logprob":-2}]}}]}',
    "token twice": b'data: {"choices":[{"index":0,"logprobs":{"content":[{"token":"a","token":"b","logprob":-2}]}}]}',
    "entry extra field": data(choice(logprobs={"content": [{"token": "a", "logprob": -1, "id": 5}]})),
    "top logprobs": data(choice(logprobs={"content": [{"token": "a", "logprob": -1, "bytes": [97], "top_logprobs": [{"token": "a", "logprob": -1, "bytes": [97]}, {"token": "b", "logprob": -2.5, "bytes": None}]}]})),
    "deep top logprobs": b'data: {"choices":[{"index":0,"logprobs":{"content":[{"logprob":-1,"top_logprobs":' + b"[" * 80 + b"]" * 80 + b"}]}}]}",
    "entry spaced": b'data: {"choices":[{"index":0,"logprobs":{"content":[ { "token" : "a" , "logprob" : -1 , "bytes" : [ 97 ] , "top_logprobs" : [ ] } ]}}]}',
    "entry bytes odd": b'data: {"choices":[{"index":0,"logprobs":{"content":[{"token":"a","logprob":-1,"bytes":[0,10,255],"top_logprobs":[]},{"token":"b","logprob":-1,"bytes":[01],"top_logprobs":[]}]}}]}',
    "entry a number": data(choice(logprobs={"content": [1]})),
    "logprobs content twice": b'data: {"choices":[{"index":0,"logprobs":{"content":[],"content":null}}]}',
    "logprobs extra": data(choice(logprobs={"content": [], "refusal": None, "x": [1, {"y": "z"}]})),
    "logprobs content empty": data(choice(logprobs={"content": []})),
    # keys and shapes
    "duplicate top key": b'data: {"id":"a","id":"b","choices":[]}',
    "duplicate choices": b'data: {"choices":[],"choices":[{"index":0,"delta":{"content":"d"}}]}',
    "duplicate choice key": b'data: {"choices":[{"index":0,"delta":{"content":"d"},"delta":{"content":"e"}}]}',
    "duplicate delta key": b'data: {"choices":[{"index":0,"delta":{"content":"d","content":"e"}}]}',
    "duplicate unknown key": b'data: {"x":1,"x":2,"choices":[{"index":0,"delta":{"content":"u","y":1,"y":2}}]}',
    "unknown top key": data({**HEAD, "choices": [], "service_tier": "default"}),
    "unknown choice key": data(choice(delta={"content": "x"}, matched_stop=1)),
    "unknown delta key": data(choice(delta={"content": "x", "refusal": None})),
    "reasoning null": data(choice(delta={"content": "x", "reasoning": None, "reasoning_content": None, "tool_calls": None})),
    "tool calls empty": data(choice(delta={"tool_calls": []})),
    "usage null": data({**HEAD, "choices": [], "usage": None}),
    "usage nested": data({**HEAD, "choices": [], "usage": {"prompt_tokens": 1, "details": {"cached": [1, 2.5, None, True, False, "s\u00e9"]}, "x": {}}}),
    "usage duplicate key": b'data: {"choices":[],"usage":{"a":1,"a":2}}',
    "usage nested duplicate": b'data: {"choices":[],"usage":{"a":{"b":1,"b":2}}}',
    "usage a list": data({**HEAD, "choices": [], "usage": [1]}),
    "usage a number": data({**HEAD, "choices": [], "usage": 5}),
    "usage big int": b'data: {"choices":[],"usage":{"a":99999999999999999999}}',
    "usage escaped key": b'data: {"choices":[],"usage":{"\\u0061":1,"b\\n":2}}',
    "usage deep": b'data: {"choices":[],"usage":{"a":' + b"[" * 80 + b"]" * 80 + b"}}",
    "fingerprint": data({**HEAD, "choices": [], "system_fingerprint": "fp_x"}),
    "fingerprint a number": data({**HEAD, "choices": [], "system_fingerprint": 5}),
    "role empty": data(choice(delta={"role": "", "content": "e"})),
    "role null": data(choice(delta={"role": None, "content": None})),
    "role a number": data(choice(delta={"role": 1})),
    "finish reason a number": data(choice(finish_reason=1)),
    "delta null": data(choice(delta=None, token_ids=[3])),
    "delta empty": data(choice(delta={})),
    "choices null": data({**HEAD, "choices": None}),
    "choices empty": data({**HEAD, "choices": []}),
    "choice empty": data({**HEAD, "choices": [{}]}),
    "choice a number": data({**HEAD, "choices": [5]}),
    "many choices": data({**HEAD, "choices": [{"index": i, "delta": {"content": str(i)}, "token_ids": [i], "logprobs": entries(-i)} for i in range(40)]}),
    "empty object": b"data: {}",
    "ids in every place": b'data: {"prompt_token_ids":[1],"choices":[{"token_ids":[1],"index":0,"logprobs":{"content":[]},"token_ids2":0}]}',
    "ids first and last": b'data: {"prompt_token_ids":null,"id":"q","choices":[{"token_ids":[4],"logprobs":null,"index":0,"token_ids2":1}],"object":"o"}',
    "ids only": b'data: {"prompt_token_ids":[7,8],"choices":[{"token_ids":[4]},{"logprobs":{"content":[{"logprob":-1}]}}]}',
    "ids adjacent": b'data: {"choices":[{"index":0,"token_ids":[1],"logprobs":{"content":[]}, "delta" : {"content":"a"} }],"prompt_token_ids":[2]}',
    "prompt ids long": data({**HEAD, "choices": [], "prompt_token_ids": list(range(100_000, 102_000))}),
    "event too long": data(choice(delta={"content": "x" * MIN_RAW_BYTES})),
    "long event with log-probs": data(choice(delta={"content": "x"}, logprobs=entries(*[-0.5] * 200))),
    "event just short": data(choice(delta={"content": "x" * (MIN_RAW_BYTES - 60)})),
    # whitespace and SSE
    "spaced": b'data:  { "id" : "s" , "choices" : [ { "index" : 0 , "delta" : { "content" : "sp" } , "logprobs" : { "content" : [ { "logprob" : -1 } ] } , "token_ids" : [ 1 ] } ] , "prompt_token_ids" : [ 2 ] }  ',
    "tabs and CRs": b'data: {\t"choices":\r[{"index":0,\t"delta":{"content":"t"}}]\t}\r',
    "no space after data:": b'data:{"choices":[{"index":0,"delta":{"content":"n"}}]}',
    "comment": b": keep-alive",
    "event name": b'event: chunk\ndata: {"choices":[{"index":0,"delta":{"content":"e"}}]}',
    "two data lines": b'data: {"choices":[{"index":0,\ndata: "delta":{"content":"2"}}]}',
    "newline in JSON": b'data: {"choices":\n[]}',
    "trailing junk": b'data: {"choices":[]} x',
    "two objects": b'data: {"choices":[]}{}',
    "empty data": b"data: ",
    "data null": b"data: null",
    "data list": b"data: [1]",
    "data string": b'data: "x"',
    "DONE spaced": b"data:  [DONE] ",
    "DONE inside": b"data: [DONE]",
    "empty event": b"",
    "error event": data({"error": {"message": "boom", "type": "internal", "code": 500}}),
    "error null": data({**HEAD, "choices": [], "error": None}),
}


def corpus() -> dict[str, list[bytes]]:
    base = [data(c) for c in STREAM]
    streams = {
        "test_proxy_chunks": base,
        "bench": bench_stream(),
        "vllm": vllm_stream(),
        "openai": openai_stream(),
        "two choices": two_choices(),
        "fastpaths": _vllm_events(),
        "chat fixtures": [data(c) for c in chat_chunks(reasoning="think", calls=[("c1", "f", '{"a": 1}')])],
        "first event bare": [b'data: {"choices":[]}', b'data: {"system_fingerprint":"f","choices":[]}', *base],
        "first event empty": [b"data: {}", *base],
        "after DONE": [*base, b"data: [DONE]", *base[1:3]],
    }
    odd = {f"odd {k}": data(v) for k, v in ODD.items()}
    odd |= {f"raw {k}": v if v.startswith(b":") else b"data: " + v for k, v in RAW_ODD.items()}
    odd |= C_ODD
    for name, ev in odd.items():
        streams[name] = [*base[:2], ev, *base[2:]]
    return streams


# fmt: on
CORPUS = corpus()


# ---------------------------------------------------------------- running both readings


def run(events: list[bytes], injected: Injected, *, fast: bool, reads: str = "pipeline") -> dict:
    """``events`` (and [DONE]) through a chat relay, the C reader on or off: everything
    the relay says, the agent's bytes, and how many events Python read."""
    x = SimpleNamespace(call=SimpleNamespace(injected=injected), threads=False)
    relay = OpenAIRelay(x, "http://up", CHAT)
    if not fast:
        relay._fast = None
    python_read = []
    feed_py = relay._feed
    relay._feed = lambda evs, parts: python_read.extend(evs) or feed_py(evs, parts)
    events = [*events, b"data: [DONE]"]
    if reads == "one":
        batches = [events]
    elif reads == "each":
        batches = [[e] for e in events]
    else:  # as the pipeline feeds a stream that came in one read: its first event alone
        batches = [events[:1], events[1:]]
    parts: list[bytes] = []
    fault = None
    for batch in batches:
        fault = relay.feed(batch, parts)
        if fault is not None:
            break
    try:
        partial = raw_ids.dumps(relay.partial())
    except MALFORMED as exc:
        partial = repr(exc).encode()
    sent = b"".join(parts)
    if injected.any:  # the same JSON (keys in another order: the upstream's, or msgspec's)
        sent = [canonical(e) for e in sent.split(b"\n\n")]
    return {
        "fault": fault and (fault.status, fault.type, fault.message),
        "partial": partial,
        # (the values lists' type, and long prompt ids kept as bytes, RawIds, which the JSON
        # above does not tell)
        "logprobs": logprob_lists(relay.asm),
        "prompt_ids": type(relay.asm.prompt_token_ids).__name__,
        "sent": sent,
        "error": relay.error,
        "chunks": relay.asm.chunks,
        "done": relay.done,
        "end": (f := relay.end_fault()) and f.message,
        "python_read": len(python_read),
    }


def canonical(event: bytes) -> bytes:
    """An event's JSON with sorted keys (ints, floats and -0.0 kept apart), or the event."""
    try:
        return orjson.dumps(orjson.loads(event[6:]), option=orjson.OPT_SORT_KEYS)
    except orjson.JSONDecodeError:
        return event


def agree(events: list[bytes], injected: Injected, reads: str = "pipeline") -> dict:
    """Both readings of ``events``, asserted the same; the C one's result."""
    got = run(events, injected, fast=True, reads=reads)
    want = run(events, injected, fast=False, reads=reads)
    assert {**got, "python_read": 0} == {**want, "python_read": 0}
    return got


@pytest.mark.parametrize("injected", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("name", list(CORPUS))
def test_the_c_reader_agrees_with_python(name, injected):
    for reads in ("pipeline", "one", "each"):
        agree(CORPUS[name], injected, reads)


@pytest.mark.parametrize("injected", MODES[:3], ids=MODE_IDS[:3])
@pytest.mark.parametrize("name", ["bench", "vllm", "two choices", "chat fixtures"])
def test_the_c_reader_takes_vllm_streams_whole(name, injected):
    """Not just correct when it steps aside: vLLM's events (tool calls and reasoning
    aside) never reach Python."""
    got = agree(CORPUS[name], injected)
    python = sum(b"tool_calls" in e or b"reasoning" in e for e in CORPUS[name])
    assert got["python_read"] == python and got["done"] and got["fault"] is None


def test_the_c_reader_stands_aside_where_the_typed_reading_does():
    """Only token ids injected: the agent's events are written again with their whole
    log-prob entries, by Python's general reading (the typed structs, and the C reader,
    keep only the values); and after an event the typed reading refuses, the rest of the
    stream is Python's."""
    x = SimpleNamespace(call=SimpleNamespace(injected=Injected(True, False)), threads=False)
    assert OpenAIRelay(x, "u", CHAT)._fast is None
    events = [*CORPUS["bench"][:3], b'data: {"choices":"x"}', *CORPUS["bench"][3:]]
    got = agree(events, Injected(False, False))
    assert got["python_read"] == len(events) - 2  # the first two events were C's


def test_rewritten_events_keep_the_upstream_bytes_less_the_cuts():
    """The agent's copy is the upstream's event with the proxy's fields cut out and the
    log-probs made null: its own key order and spacing (Python's is msgspec's)."""
    ev = b'data: {"id":"a", "prompt_token_ids":[1,2],"choices":[{"token_ids":[3],"index":0,"logprobs":{"content":[]},"delta":{"content":"x"}}]}'
    x = SimpleNamespace(call=SimpleNamespace(injected=Injected(True, True)), threads=False)
    parts: list[bytes] = []
    assert OpenAIRelay(x, "u", CHAT).feed([ev], parts) is None
    assert parts == [
        b'data: {"id":"a","choices":[{"index":0,"logprobs":null,"delta":{"content":"x"}}]}\n\n'
    ]


# ---------------------------------------------------------------- broken and random events


@pytest.mark.parametrize("injected", MODES[:2], ids=MODE_IDS[:2])
def test_every_cut_of_an_event(injected):
    """Each event of a vLLM stream cut at every byte (a truncated event): the same as
    Python, whatever the cut leaves."""
    stream = CORPUS["vllm"][:3] + CORPUS["openai"][1:2] + [C_ODD["spaced"], C_ODD["usage nested"]]
    for ev in stream:
        for k in range(6, len(ev)):
            agree([stream[0], ev[:k], stream[1]], injected, "one")


def mutate(rng: random.Random, ev: bytes) -> bytes:
    b = bytearray(ev)
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(6)
        i = rng.randrange(6, len(b) + 1) if len(b) > 6 else len(b)
        if op == 0 and i < len(b):  # a byte changed
            b[i] = rng.randrange(256)
        elif op == 1:  # a byte from JSON's own
            b[i:i] = rng.choice(
                [
                    b"{",
                    b"}",
                    b"[",
                    b"]",
                    b'"',
                    b",",
                    b":",
                    b"\\",
                    b"-",
                    b".",
                    b"e",
                    b"0",
                    b"9",
                    b" ",
                    b"\xc3",
                    b"\\u",
                    b"null",
                    b'"x"',
                    b"1e999",
                ]
            )
        elif op == 2:  # a span removed
            del b[i : i + rng.randint(1, 8)]
        elif op == 3:  # a span repeated
            j = rng.randrange(6, len(b) + 1) if len(b) > 6 else len(b)
            b[i:i] = b[min(i, j) : max(i, j)][:40]
        elif op == 4:  # cut short
            del b[i:]
        else:  # a digit changed (numbers are where the readers could part)
            digits = [k for k, c in enumerate(b) if 48 <= c <= 57]
            if digits:
                b[rng.choice(digits)] = rng.randrange(48, 58)
    return bytes(b)


@pytest.mark.parametrize("seed", range(4))
def test_mutated_streams(seed):
    """Seeded random mutations of the corpus's events (a few thousand streams): no crash,
    and the same as Python."""
    rng = random.Random(seed)
    names = list(CORPUS)
    for _ in range(800):
        stream = list(CORPUS[rng.choice(names)])
        for _ in range(rng.randint(1, 2)):
            k = rng.randrange(len(stream))
            stream[k] = mutate(rng, stream[k])
        agree(stream, rng.choice(MODES[:3]), rng.choice(["pipeline", "one", "each"]))


def random_double(rng: random.Random) -> float:
    while True:
        d = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
        if d == d and abs(d) != float("inf"):
            return d


@pytest.mark.parametrize("seed", range(2))
def test_logprob_numbers(seed):
    """Log-probs as numbers come: shortest reprs of random doubles, and decimals of up to 25
    digits and any exponent, rounded to the same double as msgspec rounds them."""
    rng = random.Random(seed)
    numbers = [repr(random_double(rng)) for _ in range(300)]
    numbers += [repr(-rng.random() * 10 ** rng.randint(-12, 3)) for _ in range(300)]
    for _ in range(400):
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 25)))
        dot = rng.randint(0, len(digits))
        num = (
            rng.choice(["", "-"])
            + (digits[:dot] or "0")
            + ("." + digits[dot:] if digits[dot:] else "")
        )
        if rng.random() < 0.5:
            num += rng.choice("eE") + rng.choice(["", "+", "-"]) + str(rng.randint(0, 330))
        numbers.append(num)
    # (Python reads what is no JSON number, and out of range ends the stream: left out.)
    numbers = [n for n in numbers if is_json_number(n) and math.isfinite(float(n))]
    events = [
        b'data: {"choices":[{"index":0,"logprobs":{"content":[{"token":"t","logprob":%s,"bytes":[1],"top_logprobs":[]},{"logprob":%s}]}}]}'
        % (n.encode(), n.encode())
        for n in numbers
    ]
    got = agree([CORPUS["bench"][0], *events], Injected(True, True), "one")
    assert got["fault"] is None and got["python_read"] < len(events) / 10


def is_json_number(text: str) -> bool:
    try:
        return isinstance(json.loads(text), int | float)
    except ValueError:
        return False


# ---------------------------------------------------------------- the switch


def test_aw_no_extensions_turns_it_off():
    code = (
        "from agentworld.proxy.adapters import fast_chunks\n"
        "from types import SimpleNamespace\n"
        "from agentworld.proxy.adapters.openai import CHAT, Injected\n"
        "from agentworld.proxy.adapters.openai_stream import OpenAIRelay\n"
        "x = SimpleNamespace(call=SimpleNamespace(injected=Injected(True, True)), threads=False)\n"
        "print(fast_chunks.Reader is None, OpenAIRelay(x, 'u', CHAT)._fast is None)\n"
    )
    for value, off in (("1", "True True"), ("0", "False False"), ("", "False False")):
        env = {**os.environ, "AW_NO_EXTENSIONS": value, "PYTHONPATH": str(ROOT)}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, check=True)
        assert out.stdout.decode().strip() == off, value


def test_reader_refuses_wrong_arguments():
    x = SimpleNamespace(call=SimpleNamespace(injected=Injected(False, False)), threads=False)
    read = OpenAIRelay(x, "u", CHAT)._fast
    assert read is not None
    for args in [(), ([], 0), ((), 0, []), ([], "0", []), ([], 0, ())]:
        with pytest.raises(TypeError):
            read(*args)
    parts: list[bytes] = []
    assert read([1, b"data: {}"], 0, parts) == (0, False)  # not bytes: Python's
    assert read([b"data: {}"], 5, parts) == (5, False) and parts == []
    assert read([b"data: {}", b"data: [DONE]"], -3, parts) == (2, True)
    assert parts == [b"data: {}\n\n"]
