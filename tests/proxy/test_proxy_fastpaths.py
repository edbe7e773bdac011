"""The proxy's cheaper hot-path helpers keep the exact behaviour of the plain versions."""

from __future__ import annotations

import copy
import json
from collections import deque
from types import SimpleNamespace

import orjson
import pytest
from multidict import CIMultiDict

from agentworld import raw_ids, records
from agentworld.proxy.adapters.openai import CHAT, COMPLETIONS, Injected
from agentworld.proxy.adapters.openai_stream import OpenAIRelay
from agentworld.proxy.command import _event_loop
from agentworld.proxy.normal_form import normalise_message, thread_form
from agentworld.proxy.sse import StreamAssembler, encode_event
from agentworld.proxy.upstream import answer_json
from agentworld.proxy.upstream.headers import upstream_headers

ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"


def reference_id(prefix: str, ms: int, rnd: bytes) -> str:
    """The id scheme spelt out: 48-bit ms time then 80 random bits, 26 base32 digits.

    The 80 bits are the low five bits of 16 random bytes, the first byte's highest.
    """
    bits = 0
    for b in rnd:
        bits = bits << 5 | (b & 31)
    n = (ms << 80) | bits
    digits = []
    for _ in range(26):
        n, r = divmod(n, 32)
        digits.append(ALPHABET[r])
    return prefix + "_" + "".join(reversed(digits))


@pytest.mark.parametrize(
    "ms, rnd",
    [
        (0, bytes(16)),
        (2**48 - 1, b"\xff" * 16),
        (1_796_035_251_123, bytes(range(0, 256, 16))),
        (1_700_000_000_000, b"\x1f" + bytes(15)),
        (1_700_000_000_001, bytes(15) + b"\xe1"),
    ],
)
def test_new_id_digits_match_the_reference_scheme(monkeypatch, ms, rnd):
    monkeypatch.setattr(records.time, "time_ns", lambda: ms * 1_000_000 + 999_999)
    # Tails come from bulk draws: with none queued, the next id takes a draw's first 16 bytes.
    monkeypatch.setattr(records, "_id_tails", deque())
    monkeypatch.setattr(records.os, "urandom", lambda n: (rnd * (n // 16 + 1))[:n])
    assert records.new_id("st") == reference_id("st", ms, rnd)
    assert records.new_id("st") == reference_id("st", ms, rnd)  # the draw's next 16 bytes


def chat_body() -> dict:
    return {
        "id": "c1",
        "prompt_token_ids": [1, 2, 3],
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "hi"},
                "token_ids": [7, 8],
                "logprobs": {"content": [{"token": "h", "logprob": -0.5}]},
            },
            "not a choice",
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2},
    }


@pytest.mark.parametrize("adapter", [CHAT, COMPLETIONS])
@pytest.mark.parametrize(
    "injected", [Injected(True, True), Injected(True, False), Injected(False, True)]
)
def test_stripped_equals_strip_and_leaves_the_body_whole(adapter, injected):
    body = chat_body()
    before = copy.deepcopy(body)
    expected = copy.deepcopy(body)
    adapter.strip(expected, injected)
    assert adapter.stripped(body, injected) == expected
    assert body == before  # the record is built from it after the answer left


def test_replies_are_the_recorded_assistant_messages():
    body = chat_body()
    replies = CHAT.replies(body)
    assert [r for _, r, _ in CHAT.choices(body)] == [{"message": replies[0], **_rest(body)}]
    assert replies == [{"role": "assistant", "content": "hi"}]


def _rest(body: dict) -> dict:
    return {"id": body["id"], "usage": body["usage"]}


def test_logprobs_kept_only_when_all_are_numbers():
    body = chat_body()
    ((_, _, tokens),) = CHAT.choices(body)
    assert "completion_logprobs" not in tokens  # one log-prob for two token ids
    body["choices"][0]["logprobs"]["content"] = [{"logprob": -1}, {"logprob": -0.25}]
    ((_, _, tokens),) = CHAT.choices(body)
    assert tokens["completion_logprobs"] == [-1, -0.25]
    # An entry whose log-prob is no number (a bool, null, a string, none at all), or that
    # is not an object: the log-probs are left out, the ids kept.
    for bad in ({"logprob": True}, {"logprob": None}, {"logprob": "-1"}, {}, "x", [-1], None):
        body["choices"][0]["logprobs"]["content"] = [bad, {"logprob": -0.25}]
        ((_, _, tokens),) = CHAT.choices(body)
        assert "completion_logprobs" not in tokens, bad
        assert tokens["completion_ids"] == body["choices"][0]["token_ids"]


@pytest.mark.parametrize("role", ["user", "assistant", "system", "tool", "function"])
@pytest.mark.parametrize("content", ["", " x ", "\n\tsay"])
def test_a_plain_message_is_normalised_and_threaded_as_any_other(role, content):
    plain = {"role": role, "content": content}
    named = {"role": role, "content": content, "name": 7}  # a third key: the general path
    assert normalise_message(plain) == normalise_message(named)
    assert normalise_message(plain) == {
        "role": "tool" if role == "function" else role,
        "content": content,
    }
    assert thread_form(plain) == thread_form({**plain, "name": ""})


def test_upstream_headers_same_decision_on_every_call():
    incoming = CIMultiDict(
        [
            ("Host", "h"),
            ("Authorization", "Bearer agent"),
            ("X-AW-Trajectory", "tr_1"),
            ("x-aw-agent", "a"),
            ("Connection", "keep-alive"),
            ("X-Custom", "1"),
            ("x-custom", "2"),
        ]
    )
    for _ in range(3):  # the second and third calls hit the per-name cache
        kept = upstream_headers(incoming, None, forward_client_auth=True)
        assert list(kept.items()) == [
            ("Authorization", "Bearer agent"),
            ("X-Custom", "1"),
            ("x-custom", "2"),
        ]
        keyed = upstream_headers(incoming, "k", forward_client_auth=True)
        assert keyed.getall("Authorization") == ["Bearer k"]
        assert "X-AW-Trajectory" not in keyed and "Connection" not in keyed


def test_event_loop_choice():
    assert _event_loop(False) is None
    loop = _event_loop(True)
    try:
        uvloop = pytest.importorskip("uvloop")
        assert isinstance(loop, uvloop.Loop)
    finally:
        if loop is not None:
            loop.close()


def logprob_lists(asm: StreamAssembler) -> dict[int, str]:
    """Each assembled choice's ``logprobs`` type: every reading makes a LogprobValues of
    the entries' values (a plain list's JSON is the same, but ``logprob_values`` would
    read it as entries, each None)."""
    kinds = {i: type(ch.logprobs).__name__ for i, ch in asm.choices.items()}
    assert set(kinds.values()) <= {"NoneType", "LogprobValues"}, kinds
    return kinds


def _vllm_events() -> list[bytes]:
    """vLLM-shaped chat chunks: unicode, escapes, reasoning, tool-call deltas, two choices,
    a long prompt (its ids parsed as RawIds), finish and usage chunks, spaced JSON."""
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}

    def lp(*tokens: str) -> dict:
        return {
            "content": [
                {"token": t, "logprob": -0.5, "bytes": [1], "top_logprobs": []} for t in tokens
            ]
        }

    chunks = [
        {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None}],
         "prompt_token_ids": list(range(100_000, 102_000))},
        {**head, "choices": [
            {"index": 0, "delta": {"content": "héllo ✓ 😀"}, "logprobs": lp("hé", "llo"), "token_ids": [5, 6]},
            {"index": 1, "delta": {"reasoning_content": 'a"b\\c\n\t\u0001'}, "logprobs": lp("a"), "token_ids": [7]},
        ]},
        {**head, "choices": [{"index": 1, "delta": {"tool_calls": [
            {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"x": '}}]},
            "logprobs": lp("{"), "token_ids": [8]}]},
        {**head, "choices": [{"index": 1, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '"ü"}'}}]},
            "logprobs": lp("}"), "token_ids": [9], "finish_reason": "tool_calls", "stop_reason": None}]},
        {**head, "choices": [{"index": 0, "delta": {}, "logprobs": None, "token_ids": [], "finish_reason": "stop"}]},
        {**head, "choices": [], "usage": {"prompt_tokens": 2000, "completion_tokens": 5, "total_tokens": 2005}},
    ]  # fmt: skip
    events = [b"data: " + orjson.dumps(c) for c in chunks]
    events.append(b"data: " + json.dumps(chunks[1]).encode())  # spaced, \u-escaped: re-encoded
    return events


@pytest.mark.parametrize(
    "injected",
    [Injected(True, True), Injected(True, False), Injected(False, True), Injected(False, False)],
)
def test_the_chat_relay_agrees_with_parse_strip_and_encode(injected):
    """The relay parses and re-encodes a token's event inline: the agent gets what
    ``answer_json.loads`` + ``strip`` + ``encode_event`` make of it (byte for byte when
    nothing is stripped), and the assembler what ``answer_json.loads`` gives (of the
    log-prob entries, their values: all a record keeps, and all the assembler keeps)."""
    events = _vllm_events()
    x = SimpleNamespace(call=SimpleNamespace(injected=injected), threads=False)
    relay = OpenAIRelay(x, "http://up", CHAT)
    parts: list[bytes] = []
    assert relay.feed(events, parts) is None
    expected = []
    asm = StreamAssembler(chat=True)
    for ev in events:
        obj = answer_json.loads(ev[6:])
        asm.add(obj)
        if injected.any:
            CHAT.strip(obj, injected)
            expected.append(encode_event(obj))
        else:
            expected.append(ev + b"\n\n")
    sent = b"".join(parts)  # (the relay may join a read's events in one part)
    if injected.any:
        split = [e for e in sent.split(b"\n\n") if e]
        assert [orjson.loads(e[6:]) for e in split] == [orjson.loads(e[6:]) for e in expected]
    else:
        assert sent == b"".join(expected)
    assert "prompt_token_ids" not in sent.decode() or not injected.token_ids
    got, want = relay.partial(), asm.result()
    assert raw_ids.dumps(got) == raw_ids.dumps(want)
    values = {0: "LogprobValues", 1: "LogprobValues"}
    assert logprob_lists(relay.asm) == logprob_lists(asm) == values
    first, second = got["choices"]
    assert first["message"]["content"] == "héllo ✓ 😀" + "héllo ✓ 😀"  # the spaced copy too
    assert first["token_ids"] == [5, 6, 5, 6]
    assert second["message"]["reasoning"] == 'a"b\\c\n\t\u0001' * 2
    assert second["message"]["tool_calls"][0]["function"]["arguments"] == '{"x": "ü"}'
    assert second["token_ids"] == [7, 8, 9, 7] and len(second["logprobs"]["content"]) == 4
    assert got["usage"]["total_tokens"] == 2005
    assert len(got["prompt_token_ids"]) == 2000
