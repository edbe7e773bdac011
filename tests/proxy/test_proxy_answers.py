"""The typed reading of a unary chat answer (adapters/openai_answer.py) against the general
way (``answer_json.loads`` and ``ChatAdapter.stripped``): the same copy to the agent, the
same steps' responses, tokens and replies, the same refusal, whatever the upstream sends,
under each way the proxy may have asked for token ids and log-probs."""

from __future__ import annotations

import orjson
import pytest

from agentworld import raw_ids
from agentworld.proxy.adapters import openai_answer
from agentworld.proxy.adapters.openai import CHAT, Injected
from agentworld.proxy.adapters.translated import MESSAGES, RESPONSES
from agentworld.proxy.sse import MALFORMED
from agentworld.proxy.upstream import answer_json
from agentworld.raw_ids import RawIds


def lp(*tokens: str) -> dict:
    entries = [
        {"token": t, "logprob": -0.5 * i, "bytes": list(t.encode()), "top_logprobs": []}
        for i, t in enumerate(tokens)
    ]
    return {"content": entries}


MESSAGE = {
    "role": "assistant",
    "content": "Hi!",
    "refusal": None,
    "annotations": None,
    "audio": None,
    "function_call": None,
    "tool_calls": [],
    "reasoning_content": None,
}
CHOICE = {
    "index": 0,
    "message": MESSAGE,
    "logprobs": lp("H", "i", "!"),
    "finish_reason": "stop",
    "stop_reason": None,
    "token_ids": [7, 8, 9],
}
# vLLM's answer to a chat call with return_token_ids and logprobs.
ANSWER = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
          "choices": [CHOICE], "service_tier": None, "system_fingerprint": None,
          "usage": {"prompt_tokens": 3, "total_tokens": 6, "completion_tokens": 3,
                    "prompt_tokens_details": None},
          "prompt_logprobs": None, "prompt_token_ids": [1, 2, 3], "kv_transfer_params": None}  # fmt: skip


def choice(**fields) -> dict:
    return {**ANSWER, "choices": [{**CHOICE, **fields}]}


def message(**fields) -> dict:
    return choice(message={**MESSAGE, **fields})


CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
LONG_IDS = list(range(100_000, 102_000))  # past answer_json.MIN_RAW_BYTES: kept as bytes

# Answers of every shape the structs might read otherwise than the general way.
ODD = {
    "tool calls": message(content=None, tool_calls=[CALL]),
    "reasoning": message(reasoning_content="think", reasoning="think"),
    "content parts": message(content=[{"type": "text", "text": "x"}]),
    "message null": choice(message=None),
    "message a string": choice(message="hi"),
    "message absent": {**ANSWER, "choices": [{"index": 0, "finish_reason": "stop"}]},
    "message extra field": message(matched_stop=1),
    "two choices": {**ANSWER, "choices": [CHOICE, {**CHOICE, "index": 1, "token_ids": [5]}]},
    "no index": {**ANSWER, "choices": [{k: v for k, v in CHOICE.items() if k != "index"}]},
    "index null": choice(index=None),
    "index float": choice(index=1.0),
    "index bool": choice(index=True),
    "index string": choice(index="0"),
    "index negative": choice(index=-1),
    "index past 64 bits": choice(index=2**64 - 1),
    "choices null": {**ANSWER, "choices": None},
    "choices absent": {k: v for k, v in ANSWER.items() if k != "choices"},
    "choices empty": {**ANSWER, "choices": []},
    "choices a string": {**ANSWER, "choices": "xy"},
    "choices an object": {**ANSWER, "choices": {"index": 0}},
    "choice a number": {**ANSWER, "choices": [5, CHOICE]},
    "logprobs null": choice(logprobs=None),
    "logprobs empty": choice(logprobs={}),
    "logprobs content null": choice(logprobs={"content": None}),
    "logprobs content a string": choice(logprobs={"content": "x"}),
    "logprob entry a number": choice(logprobs={"content": [5, 6, 7]}),
    "logprob entry without logprob": choice(logprobs={"content": [{"token": "a"}] * 3}),
    "logprob a string": choice(logprobs={"content": [{"logprob": "x"}] * 3}),
    "logprob null": choice(logprobs={"content": [{"logprob": None}] * 3}),
    "logprob an integer": choice(logprobs={"content": [{"logprob": 0}] * 3}),
    "logprobs fewer than ids": choice(logprobs=lp("H")),
    "logprobs a number": choice(logprobs=5),
    "logprobs refusal": choice(logprobs={"content": None, "refusal": None}),
    "token ids absent": {**ANSWER, "choices": [{k: v for k, v in CHOICE.items() if k != "token_ids"}]},
    "token ids null": choice(token_ids=None),
    "token ids a string": choice(token_ids="12"),
    "token ids with a bool": choice(token_ids=[1, True, 3]),
    "finish reason a number": choice(finish_reason=5),
    "finish reason null": choice(finish_reason=None),
    "stop reason a number": choice(stop_reason=42),
    "stop reason a string": choice(stop_reason="</s>"),
    "routed experts": choice(routed_experts="AAEC"),
    "choice extra field": choice(matched_stop=1),
    "choice prompt ids": choice(prompt_token_ids=[4, 5]),
    "choice prompt ids, no usage": {
        **{k: v for k, v in ANSWER.items() if k not in ("usage", "prompt_token_ids")},
        "choices": [{**CHOICE, "prompt_token_ids": [4, 5]}],
    },
    "top extra field": {**ANSWER, "obfuscation": "ab"},
    "fingerprint": {**ANSWER, "system_fingerprint": "fp"},
    "usage absent": {k: v for k, v in ANSWER.items() if k != "usage"},
    "usage null": {**ANSWER, "usage": None},
    "usage not an object": {**ANSWER, "usage": [1]},
    "prompt ids absent": {k: v for k, v in ANSWER.items() if k != "prompt_token_ids"},
    "prompt ids not a list": {**ANSWER, "prompt_token_ids": "x"},
    "prompt ids long": {**ANSWER, "prompt_token_ids": LONG_IDS},
    "prompt ids long, on the choice too": choice(prompt_token_ids=LONG_IDS) | {"prompt_token_ids": LONG_IDS},
    "prompt ids long, in the message": message(prompt_token_ids=LONG_IDS) | {"prompt_token_ids": LONG_IDS},
    "prompt ids long, not canonical": {**ANSWER, "prompt_token_ids": [*LONG_IDS, -1]},
    "no id or model": {"choices": [CHOICE], "created": None},
    "error": {"error": {"message": "boom", "type": "internal", "code": 500}},
    "error with choices": {**ANSWER, "error": "e"},
    "not an object": [1, 2],
    "a string": "data",
    "null": None,
}  # fmt: skip

RAW_ODD = {
    "not JSON": b"{nope",
    "empty": b"",
    "trailing garbage": orjson.dumps(ANSWER) + b"x",
    "invalid UTF-8": orjson.dumps(message(content="X")).replace(b'"X"', b'"\xff"'),
    "lone surrogate": orjson.dumps(message(content="X")).replace(b'"X"', b'"\\ud800"'),
    "escapes": orjson.dumps(message(content="X")).replace(b'"X"', b'"\\u00e9\\n\\"x"'),
    "spaced": orjson.dumps(ANSWER, option=orjson.OPT_INDENT_2),
    "duplicate keys": orjson.dumps(ANSWER).replace(b'"index":0', b'"index":0,"index":1'),
    "number out of range": orjson.dumps(choice(stop_reason=0)).replace(
        b'"stop_reason":0', b'"stop_reason":1e400'
    ),
    "a long prompt-ids key in a string": orjson.dumps(
        message(content='"prompt_token_ids":' + orjson.dumps(LONG_IDS).decode())
    ),
}

MODES = [Injected(False, False), Injected(True, True), Injected(False, True), Injected(True, False)]


def read(raw: bytes, injected: Injected, monkeypatch, *, typed: bool) -> dict:
    """What the proxy makes of ``raw``: the agent's copy and what the step records read of
    it (each choice's response and tokens, and the replies threading continues from)."""
    if not typed:
        monkeypatch.setattr(openai_answer, "read", lambda raw, strict: None)
    try:
        obj, sent = CHAT.read_answer(raw, injected)
    except MALFORMED as exc:
        return {"refused": type(exc).__name__}
    finally:
        monkeypatch.undo()
    try:
        steps = raw_ids.dumps([CHAT.choices(obj), CHAT.replies(obj)])
    except MALFORMED as exc:
        steps = repr(exc)
    return {
        "steps": steps,
        "sent": orjson.loads(sent) if injected.any else sent,
        "same bytes": sent is raw,
        "raw ids": [type(v).__name__ for v in (obj.get("prompt_token_ids"),)],
    }


def answers() -> list[tuple[str, bytes]]:
    odd = {name: orjson.dumps(a) for name, a in ODD.items()} | RAW_ODD
    return [("vllm", orjson.dumps(ANSWER)), *odd.items()]


@pytest.mark.parametrize("injected", MODES, ids=lambda i: f"ids{i.token_ids:d}-lps{i.logprobs:d}")
@pytest.mark.parametrize("name, raw", answers(), ids=[n for n, _ in answers()])
def test_typed_reading_agrees_with_the_general_way(monkeypatch, name, raw, injected):
    """(As for streams, one known difference is left out: an integer past 64 bits, which
    msgspec reads exactly and orjson as a float; a record refuses it either way.)"""
    typed = read(raw, injected, monkeypatch, typed=True)
    assert typed == read(raw, injected, monkeypatch, typed=False)


@pytest.mark.parametrize("injected", MODES[:3], ids=["as-it-came", "ids-and-logprobs", "logprobs"])
def test_a_vllm_answer_is_read_into_structs(monkeypatch, injected):
    """The fast path is taken (not just correct when skipped): vLLM's answer never reaches
    the general parser, its long prompt ids stay bytes, and the agent's copy leaves out
    what the proxy asked for, null kept null."""

    def general(raw):
        raise AssertionError("the general way read the answer")

    monkeypatch.setattr(answer_json, "loads_object", general)
    raw = orjson.dumps({**ANSWER, "prompt_token_ids": LONG_IDS})
    obj, sent = CHAT.read_answer(raw, injected)
    [(index, response, tokens)] = CHAT.choices(obj)
    assert (index, response["message"]["content"], response["finish_reason"]) == (0, "Hi!", "stop")
    assert tokens["completion_ids"] == [7, 8, 9]
    assert tokens["completion_logprobs"] == [0.0, -0.5, -1.0]
    assert isinstance(tokens["prompt_ids"], RawIds) and tokens["prompt_ids"] == LONG_IDS
    if not injected.any:
        assert sent is raw
        return
    agent = orjson.loads(sent)
    assert agent["choices"][0]["logprobs"] is None
    assert agent["choices"][0]["message"] == MESSAGE
    assert agent["usage"] == ANSWER["usage"] and agent["kv_transfer_params"] is None
    assert ("token_ids" in agent["choices"][0]) is not injected.token_ids
    assert agent.get("prompt_token_ids") == (None if injected.token_ids else LONG_IDS)


def test_ids_added_alone_leave_the_answer_to_the_general_way(monkeypatch):
    """The agent asked for log-probs itself: its copy keeps every entry whole, which the
    typed reading does not keep, so the general way reads the answer."""
    monkeypatch.setattr(openai_answer, "read", lambda raw, strict: pytest.fail("typed"))
    _, sent = CHAT.read_answer(orjson.dumps(ANSWER), Injected(True, False))
    agent = orjson.loads(sent)
    assert agent["choices"][0]["logprobs"] == CHOICE["logprobs"]
    assert "token_ids" not in agent["choices"][0] and "prompt_token_ids" not in agent


def test_rewrite_refuses_fields_it_would_drop():
    """REWRITE writes the agent's copy from the structs, so a field they do not name must
    send the answer the general way, not vanish from what the agent gets."""
    raw = orjson.dumps(choice(matched_stop=1))
    assert openai_answer.read(raw, strict=True) is None
    assert openai_answer.read(raw, strict=False) is not None
    _, sent = CHAT.read_answer(raw, Injected(True, True))
    assert orjson.loads(sent)["choices"][0]["matched_stop"] == 1


@pytest.mark.parametrize("asked", [False, True], ids=["proxy-asked", "agent-asked"])
async def test_the_proxy_reads_a_unary_answer_typed_end_to_end(monkeypatch, proxy, pool, asked):
    """Through the proxy and the fake vLLM: the general parser is never asked, the agent
    gets log-probs and ids only when it asked for them (then the engine's answer as it
    came), and the step holds every token's log-prob and id."""
    import aiohttp

    from tests.proxy.conftest import steps_of

    def general(raw):
        raise AssertionError("the general way read the answer")

    monkeypatch.setattr(answer_json, "loads_object", general)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    if asked:
        body |= {"logprobs": True, "return_token_ids": True}
    async with (
        aiohttp.ClientSession() as s,
        s.post(proxy.base_url + "/chat/completions", json=body) as r,
    ):
        assert r.status == 200
        agent = await r.json()
    await proxy.stop()
    [step] = steps_of(pool)
    tokens = step["tokens"]
    assert tokens["source"] == "engine" and tokens["prompt_ids"]
    assert len(tokens["completion_logprobs"]) == len(tokens["completion_ids"]) > 0
    choice = agent["choices"][0]
    assert step["response"]["message"]["content"] == choice["message"]["content"]
    if asked:  # the agent's own entries, whole, and the ids
        assert [e["logprob"] for e in choice["logprobs"]["content"]] == tokens[
            "completion_logprobs"
        ]
        assert all("token" in e for e in choice["logprobs"]["content"])
        assert choice["token_ids"] == tokens["completion_ids"]
        assert agent["prompt_token_ids"] == tokens["prompt_ids"]
    else:
        assert choice["logprobs"] is None
        assert "prompt_token_ids" not in agent and "token_ids" not in choice


def translated(monkeypatch, adapter, raw: bytes, *, typed: bool) -> dict:
    """What a translated call (Messages or Responses over chat) makes of the chat answer
    ``raw``: the protocol's answer the agent gets and the step's response and tokens (ids
    and clocks made repeatable), as ``translated_steps.ok_step`` makes them."""
    from itertools import count

    from agentworld.proxy.translate import chat_form, responses_answer

    n = count()
    monkeypatch.setattr(chat_form.secrets, "token_hex", lambda k: f"{next(n):0{2 * k}d}")
    monkeypatch.setattr(responses_answer.time, "time", lambda: 1_800_000_000.0)
    if not typed:
        monkeypatch.setattr(openai_answer, "read", lambda raw, strict: None)
    try:
        obj = openai_answer.parsed(raw)
        chat_form.name_calls(obj, adapter.call_prefix)
        got = CHAT.choices(obj)
        _, response, tokens = got[0]
        body = {
            "model": "m",
            "max_tokens": 64,
            "messages": [],
            "input": "hi",
            "stop_sequences": ["</s>"],
        }
        proto = adapter.from_chat(obj, body, "resp_1", tokens, False, [])
        return {"proto": raw_ids.dumps(proto), "step": raw_ids.dumps([response, tokens])}
    except (*MALFORMED, IndexError) as exc:
        return {"refused": type(exc).__name__}
    finally:
        monkeypatch.undo()


@pytest.mark.parametrize("adapter", [MESSAGES, RESPONSES], ids=lambda a: a.protocol)
@pytest.mark.parametrize("name, raw", answers(), ids=[n for n, _ in answers()])
def test_translated_answers_read_typed_as_the_general_way(monkeypatch, adapter, name, raw):
    """A chat upstream's unary answer translated to Messages or Responses: the typed reading
    gives the agent the same answer, byte for byte, and the step the same response."""
    got = translated(monkeypatch, adapter, raw, typed=True)
    assert got == translated(monkeypatch, adapter, raw, typed=False)
