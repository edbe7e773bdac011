"""The relays' typed reading of chat events (adapters/openai_chunks.py) against the general
way (orjson and ``StreamAssembler.add``): the same events to the agent, the same assembled
answer, the same faults, whatever the upstream sends; for chat as it came, and translated
to Messages and Responses."""

from __future__ import annotations

from types import SimpleNamespace

import orjson
import pytest

from agentworld import raw_ids
from agentworld.proxy.adapters import openai_chunks
from agentworld.proxy.adapters.openai import CHAT, Injected
from agentworld.proxy.adapters.openai_stream import OpenAIRelay
from agentworld.proxy.adapters.translated import MESSAGES, RESPONSES
from agentworld.proxy.adapters.translated_stream import TranslatedRelay
from agentworld.proxy.sse import MALFORMED, StreamAssembler
from tests.proxy.test_proxy_fastpaths import logprob_lists

HEAD = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}


def lp(*tokens: str) -> dict:
    entries = [{"token": t, "logprob": -0.25, "bytes": [65], "top_logprobs": []} for t in tokens]
    return {"content": entries}


def token(text: str, ids: list[int], **extra) -> dict:
    choice = {"index": 0, "delta": {"content": text}, "logprobs": lp(*text), "token_ids": ids}
    return {**HEAD, "choices": [{**choice, **extra}]}


# A vLLM stream: role first (with the prompt's ids), tokens, the finish, the usage.
STREAM = [
    {**HEAD, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                          "logprobs": None, "finish_reason": None}],
     "prompt_token_ids": [1, 2, 3]},
    token("He", [7, 8]),
    token("llo", [9, 10, 11], finish_reason=None),
    {**HEAD, "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop",
                          "stop_reason": None, "token_ids": []}]},
    {**HEAD, "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 5}},
]  # fmt: skip

# Events of every shape the structs might read otherwise than the general way: each is put
# into the stream above, after its second event.
ODD = {
    "reasoning": {**HEAD, "choices": [{"index": 0, "delta": {"reasoning": "r"}, "token_ids": [4]}]},
    "reasoning_content": {**HEAD, "choices": [{"index": 0, "delta": {"reasoning_content": "rc"}}]},
    "both reasonings": {**HEAD, "choices": [{"delta": {"reasoning": None, "reasoning_content": "x"}}]},
    "tool call": {**HEAD, "choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "c1", "type": "function", "function": {"name": "f", "arguments": "{"}}]}}]},
    "tool call, no index": {**HEAD, "choices": [{"delta": {"tool_calls": [{"function": {"arguments": "}"}}]}}]},
    "tool calls not a list": {**HEAD, "choices": [{"delta": {"tool_calls": "ab"}}]},
    "tool calls a number": {**HEAD, "choices": [{"delta": {"tool_calls": 5}}]},
    "tool call index a string": {**HEAD, "choices": [{"delta": {"tool_calls": [{"index": "a"}]}}]},
    "second choice": {**HEAD, "choices": [{"index": 1, "delta": {"content": "b"}, "logprobs": lp("b"),
                                           "token_ids": [5]}]},
    "no index": {**HEAD, "choices": [{"delta": {"content": "n"}}]},
    "index null": {**HEAD, "choices": [{"index": None, "delta": {"content": "n"}}]},
    "index float": {**HEAD, "choices": [{"index": 1.0, "delta": {"content": "f"}}]},
    "index bool": {**HEAD, "choices": [{"index": True, "delta": {"content": "t"}}]},
    "index string": {**HEAD, "choices": [{"index": "0", "delta": {"content": "s"}}]},
    "index negative": {**HEAD, "choices": [{"index": -1, "delta": {"content": "m"}}]},
    "index past 64 bits": {**HEAD, "choices": [{"index": 2**64 - 1, "delta": {"content": "b"}}]},
    "choices null": {**HEAD, "choices": None},
    "choices absent": {**HEAD},
    "choices a string": {**HEAD, "choices": "xy"},
    "choices an object": {**HEAD, "choices": {"index": 0}},
    "choice a number": {**HEAD, "choices": [5, {"index": 0, "delta": {"content": "k"}}]},
    "delta null": {**HEAD, "choices": [{"index": 0, "delta": None, "token_ids": [6]}]},
    "delta a string": {**HEAD, "choices": [{"index": 0, "delta": "x"}]},
    "delta zero": {**HEAD, "choices": [{"index": 0, "delta": 0}]},
    "delta empty list": {**HEAD, "choices": [{"index": 0, "delta": []}]},
    "content a number": {**HEAD, "choices": [{"index": 0, "delta": {"content": 5}}]},
    "content null": {**HEAD, "choices": [{"index": 0, "delta": {"content": None, "role": "assistant"}}]},
    "role empty": {**HEAD, "choices": [{"index": 0, "delta": {"role": "", "content": "e"}}]},
    "role a number": {**HEAD, "choices": [{"index": 0, "delta": {"role": 3}}]},
    "delta extra field": {**HEAD, "choices": [{"index": 0, "delta": {"content": "x", "refusal": None}}]},
    "logprobs empty": {**HEAD, "choices": [{"index": 0, "logprobs": {}}]},
    "logprobs content null": {**HEAD, "choices": [{"index": 0, "logprobs": {"content": None}}]},
    "logprobs content a string": {**HEAD, "choices": [{"index": 0, "logprobs": {"content": "x"}}]},
    "logprob entry a number": {**HEAD, "choices": [{"index": 0, "logprobs": {"content": [5]},
                                                     "token_ids": [1]}]},
    "logprob entry without logprob": {**HEAD, "choices": [{"index": 0, "logprobs": {"content": [{"token": "a"}]},
                                                            "token_ids": [1]}]},
    "logprob a string": {**HEAD, "choices": [{"index": 0, "logprobs": {"content": [{"logprob": "x"}]},
                                               "token_ids": [1]}]},
    "logprob entries, then odd ones": {**HEAD, "choices": [{"index": 0, "token_ids": [1, 2, 3, 4],
        "logprobs": {"content": [{"logprob": -1}, {"token": "b"}, 5, {"logprob": -0.5}]}}]},
    "logprobs a number": {**HEAD, "choices": [{"index": 0, "logprobs": 5}]},
    "logprobs zero": {**HEAD, "choices": [{"index": 0, "logprobs": 0}]},
    "logprobs refusal": {**HEAD, "choices": [{"index": 0, "logprobs": {"content": None, "refusal": None}}]},
    "token ids a string": {**HEAD, "choices": [{"index": 0, "token_ids": "12"}]},
    "finish reason a number": {**HEAD, "choices": [{"index": 0, "finish_reason": 5}]},
    "stop reason a number": {**HEAD, "choices": [{"index": 0, "stop_reason": 42}]},
    "choice extra field": {**HEAD, "choices": [{"index": 0, "delta": {"content": "x"}, "matched_stop": 1}]},
    "top extra field": {**HEAD, "choices": [], "service_tier": "default", "obfuscation": "ab"},
    "fingerprint": {**HEAD, "choices": [], "system_fingerprint": "fp"},
    "fingerprint null": {**HEAD, "choices": [], "system_fingerprint": None},
    "usage not an object": {**HEAD, "choices": [], "usage": [1]},
    "prompt ids not a list": {**HEAD, "choices": [], "prompt_token_ids": "x"},
    "no id or model": {"choices": [{"index": 0, "delta": {"content": "q"}}], "created": None},
    "error": {"error": {"message": "boom", "type": "internal", "code": 500}},
    "error null": {"error": None},
    "error with choices": {**HEAD, "error": "e", "choices": [{"index": 0, "delta": {"content": "z"}}]},
    "not an object": [1, 2],
    "a string": "data",
}  # fmt: skip

RAW_ODD = {
    "not JSON": b"{nope",
    "invalid UTF-8": b'{"choices":[{"index":0,"delta":{"content":"\xff"}}]}',
    "lone surrogate": b'{"choices":[{"index":0,"delta":{"content":"\\ud800"}}]}',
    "escapes": b'{"choices":[{"index":0,"delta":{"content":"\\u00e9\\n\\"x"}}]}',
    "spaced": b'{ "choices" : [ { "index" : 0 , "delta" : { "content" : "sp" } } ] }',
    "duplicate keys": b'{"choices":[{"index":0,"index":1,"delta":{"content":"d"},"delta":null}]}',
    "number out of range": b'{"choices":[{"index":0,"stop_reason":1e400}]}',
    "comment line": b": keep-alive",
}

MODES = [Injected(False, False), Injected(True, True), Injected(False, True), Injected(True, False)]


def feed(payloads: list[bytes], injected: Injected, *, typed: bool) -> dict:
    x = SimpleNamespace(call=SimpleNamespace(injected=injected), threads=False)
    relay = OpenAIRelay(x, "http://up", CHAT)
    if not typed:
        relay._typed = None
    parts: list[bytes] = []
    events = [p if p.startswith(b":") else b"data: " + p for p in [*payloads, b"[DONE]"]]
    fault = relay.feed(events, parts)
    try:
        partial = raw_ids.dumps(relay.partial())
    except MALFORMED as exc:
        partial = repr(exc)
    # The events as the agent reads them (the relay may join a read's events in one part).
    sent = [
        e if not injected.any or not e.startswith(b"data: {") else orjson.loads(e[6:])
        for e in b"".join(parts).split(b"\n\n")
    ]
    return {
        "fault": fault and (fault.status, fault.type, fault.message),
        "sent": sent,
        "partial": partial,
        "logprobs": logprob_lists(relay.asm),
        "error": relay.error,
        "chunks": relay.asm.chunks,
        "done": relay.done,
        "end": (f := relay.end_fault()) and f.message,
    }


def streams() -> list[tuple[str, list[bytes]]]:
    base = [orjson.dumps(c) for c in STREAM]
    odd = {name: orjson.dumps(c) for name, c in ODD.items()} | RAW_ODD
    return [("plain", base)] + [(name, [*base[:2], ev, *base[2:]]) for name, ev in odd.items()]


@pytest.mark.parametrize("injected", MODES, ids=lambda i: f"ids{i.token_ids:d}-lps{i.logprobs:d}")
@pytest.mark.parametrize("name, payloads", streams(), ids=[n for n, _ in streams()])
def test_typed_reading_agrees_with_the_general_way(name, payloads, injected):
    """(One known difference is left out: an integer past 64 bits, which msgspec reads
    exactly and orjson as a float; a record refuses it either way, ids being below 2^31
    and counts 64-bit, and keeps the step without it.)"""
    assert feed(payloads, injected, typed=True) == feed(payloads, injected, typed=False)


@pytest.mark.parametrize("injected", MODES[:3], ids=["as-it-came", "ids-and-logprobs", "logprobs"])
def test_a_vllm_stream_is_read_into_structs(monkeypatch, injected):
    """The fast path is taken (not just correct when skipped): vLLM's events never reach
    the general assembler, and the agent's copy is written from the structs."""

    def general(self, chunk):
        raise AssertionError(f"the general way read {chunk!r}")

    monkeypatch.setattr(StreamAssembler, "add", general)
    got = feed([orjson.dumps(c) for c in STREAM], injected, typed=True)
    assert got["fault"] is None and got["chunks"] == len(STREAM)
    body = orjson.loads(got["partial"])
    assert body["choices"][0]["message"]["content"] == "Hello"
    assert body["choices"][0]["token_ids"] == [7, 8, 9, 10, 11]
    assert body["choices"][0]["logprobs"]["content"] == [-0.25] * 5
    assert body["prompt_token_ids"] == [1, 2, 3]
    if injected.any:  # null stays null, absent stays absent, the injected fields go
        first, second = got["sent"][0], got["sent"][1]
        assert first["choices"][0] == {"index": 0, "delta": {"role": "assistant", "content": ""},
                                       "logprobs": None, "finish_reason": None}  # fmt: skip
        want = {"index": 0, "delta": {"content": "He"}, "logprobs": None, "token_ids": [7, 8]}
        if injected.token_ids:
            del want["token_ids"]
        assert second["choices"][0] == want
        assert ("prompt_token_ids" in first) is not injected.token_ids


def test_rewrite_refuses_fields_it_would_drop():
    """REWRITE writes the agent's copy from the structs, so a field they do not name must
    send the event the general way, not vanish from what the agent gets."""
    event = orjson.dumps({**HEAD, "choices": [], "service_tier": "default"})
    with pytest.raises(openai_chunks.NOT_TYPED):
        openai_chunks.REWRITE(event)
    assert openai_chunks.READ(event).choices == []


def translated(monkeypatch, adapter, payloads: list[bytes], *, typed: bool) -> dict:
    """A translated relay (Messages or Responses over chat) fed ``payloads``: the protocol's
    events it sends (ids and clocks made repeatable), its assembled answer and its end."""
    from itertools import count

    from agentworld.proxy.translate import chat_form, responses_stream

    n = count()
    monkeypatch.setattr(chat_form.secrets, "token_hex", lambda k: f"{next(n):0{2 * k}d}")
    monkeypatch.setattr(responses_stream.time, "time", lambda: 1_800_000_000.0)
    call = SimpleNamespace(injected=Injected(True, True), metadata={})
    body = {"model": "m", "max_tokens": 64, "messages": [], "input": "hi"}
    x = SimpleNamespace(adapter=adapter, call=call, body=body, rid="r", history=[])
    relay = TranslatedRelay(x, "http://up", adapter)
    if not typed:
        relay._typed = None
    parts: list[bytes] = []
    fault = relay.feed([b"data: " + p for p in [*payloads, b"[DONE]"]], parts)
    try:
        partial = raw_ids.dumps(relay.partial())
    except MALFORMED as exc:
        partial = repr(exc)
    try:
        tail = b"".join(relay.tr.finish(1, 2, 3))
    except MALFORMED as exc:
        tail = repr(exc).encode()
    return {
        "fault": fault and (fault.status, fault.type, fault.message),
        "sent": parts,
        "tail": tail,
        "partial": partial,
        "logprobs": logprob_lists(relay.asm),
        "error": relay.error,
        "done": relay.done,
    }


@pytest.mark.parametrize("adapter", [MESSAGES, RESPONSES], ids=lambda a: a.protocol)
@pytest.mark.parametrize("name, payloads", streams(), ids=[n for n, _ in streams()])
def test_translated_relays_read_typed_as_the_general_way(monkeypatch, adapter, name, payloads):
    """A chat upstream's events translated to Messages or Responses: the typed reading gives
    the agent the same events, byte for byte, and the record the same answer."""
    got = translated(monkeypatch, adapter, payloads, typed=True)
    assert got == translated(monkeypatch, adapter, payloads, typed=False)


@pytest.mark.parametrize("adapter", [MESSAGES, RESPONSES], ids=lambda a: a.protocol)
def test_translated_relays_read_a_vllm_stream_into_structs(monkeypatch, adapter):
    def general(self, chunk):
        raise AssertionError(f"the general way read {chunk!r}")

    monkeypatch.setattr(StreamAssembler, "add", general)
    got = translated(monkeypatch, adapter, [orjson.dumps(c) for c in STREAM], typed=True)
    assert got["fault"] is None and got["done"]
    assert b"He" in b"".join(got["sent"]) and b"llo" in b"".join(got["sent"])
    body = orjson.loads(got["partial"])
    assert body["choices"][0]["message"]["content"] == "Hello"
    assert body["choices"][0]["token_ids"] == [7, 8, 9, 10, 11]
