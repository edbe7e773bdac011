"""Record validation: every bad record is refused with the offending field named."""

from __future__ import annotations

import copy
import math
import os
from typing import Any

import pytest

from agentworld import records
from agentworld.errors import RecordError
from agentworld.record_fast import accepts


def step() -> dict[str, Any]:
    return records.make_step(
        trajectory="tr_1",
        index=0,
        agent="a",
        request={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        response={"message": {"role": "assistant", "content": "yo"}, "usage": {"prompt_tokens": 1}},
        tokens={
            "source": "engine",
            "prompt_ids": [1, 2],
            "completion_ids": [3],
            "completion_logprobs": [-0.1],
        },
    )


def end() -> dict[str, Any]:
    return records.make_end(trajectory="tr_1", agent="a", status="done", steps=1, reward=1.0)


def _set(rec: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """Set (or with ``...`` delete) a dotted path like request.messages.0.content."""
    rec = copy.deepcopy(rec)
    *parents, last = path.split(".")
    obj: Any = rec
    for p in parents:
        obj = obj[int(p)] if isinstance(obj, list) else obj[p]
    key: Any = int(last) if isinstance(obj, list) else last
    if value is ...:
        del obj[key]
    else:
        obj[key] = value
    return rec


BAD_STEPS = [
    # (dotted path to change, new value or ... to delete, field the error must name, problem text)
    ("id", ..., "id", "required"),
    ("trajectory", ..., "trajectory", "required"),
    ("timings", ..., "timings", "required"),
    ("request", ..., "request", "required"),
    ("request.messages", ..., "request.messages", "required"),
    ("index", "0", "index", "expected an integer"),
    ("index", True, "index", "expected an integer"),
    ("index", -1, "index", "out of range"),
    ("index", 2**63, "index", "out of range"),
    ("policy_version", 1.5, "policy_version", "expected an integer"),
    ("reward", math.nan, "reward", "not a finite number"),
    ("reward", math.inf, "reward", "not a finite number"),
    ("reward", "1", "reward", "expected a number"),
    ("reward", 2**64, "reward", "outside 64 bits"),
    ("timings.started_at", math.nan, "timings.started_at", "not a finite"),
    ("metadata", {"x": math.nan}, "metadata.x", "not a finite"),
    ("metadata", {"x": 2**63}, "metadata.x", "outside 64 bits"),
    ("metadata", {"x": {1, 2}}, "metadata.x", "not a JSON value"),
    ("metadata", [], "metadata", "expected an object"),
    ("agent", "a\ud800", "agent", "lone surrogate"),
    (
        "request.messages.0.content",
        "bad \udcff text",
        "request.messages[0].content",
        "lone surrogate",
    ),
    ("agent", "a/b", "agent", "slashes"),
    ("agent", "", "agent", "non-empty"),
    ("agent", "x" * 201, "agent", "longer than"),
    ("task", "t" * 2000, "task", "longer than"),
    ("response.text", "x" * (records.MAX_STRING_BYTES + 1), "response.text", "longer than"),
    ("surprise", 1, "surprise", "unknown field"),
    ("request.messages.0.surprise", 1, "request.messages[0].surprise", "unknown field"),
    ("tokens.extra", 1, "tokens.extra", "unknown field"),
    ("request.messages.0.role", "robot", "request.messages[0].role", "must be one of"),
    ("response.message.role", "user", "response.message.role", "must be 'assistant'"),
    ("protocol", "grpc", "protocol", "must be one of"),
    ("status", "fine", "status", "must be one of"),
    ("schema", 2, "schema", "unknown record schema"),
    ("schema", True, "schema", "unknown record schema"),  # True == 1 in Python
    ("schema", 1.0, "schema", "unknown record schema"),
    ("kind", "other", "kind", "must be 'step' or 'end'"),
    ("tokens.completion_logprobs", [-0.1, -0.2], "tokens.completion_logprobs", "2 log-probs for 1"),
    ("tokens.completion_logprobs", [math.nan], "tokens.completion_logprobs[0]", "finite"),
    ("tokens.completion_logprobs", [-math.inf], "tokens.completion_logprobs[0]", "finite"),
    ("tokens.completion_logprobs", [0.5], "tokens.completion_logprobs[0]", "<= 0"),
    ("tokens.completion_ids", [-1], "tokens.completion_ids[0]", "token ids"),
    ("tokens.completion_ids", [2**31], "tokens.completion_ids[0]", "token ids"),
    ("tokens.prompt_ids", "1 2", "tokens.prompt_ids", "expected a list"),
    ("tokens.prompt_ids", [1, True], "tokens.prompt_ids[1]", "token ids"),
    ("tokens.prompt_ids", [1, 2.0], "tokens.prompt_ids[1]", "token ids"),
    ("tokens.prompt_ids", [1, [2]], "tokens.prompt_ids[1]", "token ids"),
    ("tokens.prompt_ids", [1, None], "tokens.prompt_ids[1]", "token ids"),
    ("tokens.prompt_ids", [9999999999], "tokens.prompt_ids[0]", "token ids"),
    ("tokens.completion_logprobs", [True], "tokens.completion_logprobs[0]", "expected a number"),
    ("tokens.completion_logprobs", ["-1"], "tokens.completion_logprobs[0]", "expected a number"),
    ("tokens.completion_logprobs", [None], "tokens.completion_logprobs[0]", "expected a number"),
    ("tokens.completion_logprobs", [1e-300], "tokens.completion_logprobs[0]", "<= 0"),
    ("tokens.completion_logprobs", [-(2**63) - 1], "tokens.completion_logprobs[0]", "64 bits"),
    ("tokens.completion_ids", ..., "tokens.completion_logprobs", "0 completion ids"),
    ("tokens.source", "none", "tokens.source", "source is 'none'"),
    ("response.usage.prompt_tokens", -3, "response.usage.prompt_tokens", "out of range"),
    # counts readers sum (the pool's index once failed on one): never objects
    ("response.usage.completion_tokens", {}, "response.usage.completion_tokens", "integer"),
    ("response.usage.total_tokens", {"n": 1}, "response.usage.total_tokens", "integer"),
    (
        "request.messages.0.tool_calls",
        [{"name": "x"}],
        "request.messages[0].tool_calls[0].arguments",
        "expected a string",
    ),
    (  # spec 3.2: a tool call's type is a string (it was not checked at all)
        "request.messages.0.tool_calls",
        [{"name": "x", "arguments": "{}", "type": {"a": 1}}],
        "request.messages[0].tool_calls[0].type",
        "expected a string",
    ),
    ("response", ..., "response", "required when status is 'ok'"),
    ("status", "error", "error", "required when status is 'error'"),
]


@pytest.mark.parametrize(("path", "value", "field", "problem"), BAD_STEPS)
def test_bad_step_refused_naming_the_field(path: str, value: Any, field: str, problem: str) -> None:
    rec = _set(step(), path, value)
    with pytest.raises(RecordError) as info:
        records.encode(rec)
    assert info.value.field == field
    assert problem in info.value.problem


BAD_ENDS = [
    ("status", "ok", "status", "must be one of"),
    ("steps", -1, "steps", "out of range"),
    ("steps", ..., "steps", "required"),
    ("ended_at", math.inf, "ended_at", "not a finite"),
    ("index", 0, "index", "unknown field"),
]


@pytest.mark.parametrize(("path", "value", "field", "problem"), BAD_ENDS)
def test_bad_end_refused_naming_the_field(path: str, value: Any, field: str, problem: str) -> None:
    with pytest.raises(RecordError) as info:
        records.encode(_set(end(), path, value))
    assert info.value.field == field
    assert problem in info.value.problem


@pytest.mark.parametrize(
    ("path", "value", "field", "problem"), [*BAD_STEPS, ("kind", "end", "", "")]
)
def test_fast_check_never_accepts_what_the_full_check_refuses(
    path: str, value: Any, field: str, problem: str
) -> None:
    assert not accepts(_set(step(), path, value))


def test_fast_check_accepts_ordinary_records() -> None:
    from tests.pool.conftest import end_record, full_step

    for rec in (step(), end(), full_step("tr_1", 0), end_record("tr_1", 1)):
        assert accepts(rec), rec
    # Exotic but valid: the fast check says "look closer" and the full check accepts.
    odd = _set(step(), "metadata", {"deep": [[[[1]]]], "é": "ü"})
    assert records.validate(odd) is odd
    details = _set(step(), "response.usage.prompt_tokens_details", {"cached_tokens": 3})
    assert accepts(details) and records.validate(details) is details


@pytest.mark.parametrize(
    ("prompt", "ids", "logprobs"),
    [
        ([1, -2], [3], [-0.1]),
        ([1, 2], [3.0], [-0.1]),
        ([[1], 2], [3], [-0.1]),
        ([1, 2], [2**31], [-0.1]),
        ([1, 2], [3], [2e-05]),
        ([1, 2], [3, 4], [-1e-05, 1e-05]),
        ([1, 2], [3, 4], [-0.5, 0.5]),
        ([1, 2], [3], [math.nan]),
        ([1, 2], [3], [-math.inf]),
        ([1, 2], [3], ["-1"]),
        ([1, 2], [3, 4], [-0.5]),
        ([1, 2], [True], [-0.5]),
    ],
)
def test_engine_token_lists_checked_in_one_rendering_refuse_what_the_full_check_does(
    prompt: list[Any], ids: list[Any], logprobs: list[Any]
) -> None:
    tokens = {"source": "engine", "prompt_ids": prompt, "completion_ids": ids}
    rec = _set(step(), "tokens", {**tokens, "completion_logprobs": logprobs})
    assert not accepts(rec)
    with pytest.raises(RecordError) as info:
        records.validate(rec)
    assert info.value.field.startswith("tokens.")


def test_engine_token_lists_with_exponents_and_empty_lists_pass_the_fast_check() -> None:
    for tokens in (
        {"prompt_ids": [1, 2], "completion_ids": [3, 4], "completion_logprobs": [-1e-07, -2.5]},
        {"prompt_ids": [], "completion_ids": [], "completion_logprobs": []},
        {"prompt_ids": [2**31 - 1], "completion_ids": [0], "completion_logprobs": [-0.0]},
        # log 1 (greedy decoding): zero, as a float or as the int JSON may hold
        {"prompt_ids": [1], "completion_ids": [2, 3, 4], "completion_logprobs": [0.0, -0.5, 0]},
        {"prompt_ids": [1], "completion_ids": [2, 3], "completion_logprobs": [0.0, -1e-05]},
    ):
        assert accepts(_set(step(), "tokens", {"source": "engine", **tokens})), tokens


_TOOL = {"role": "tool", "content": "done", "tool_call_id": "call_1"}


@pytest.mark.parametrize(
    ("message", "field"),
    [
        ({**_TOOL, "tool_call_id": 5}, "request.messages[0].tool_call_id"),
        ({**_TOOL, "tool_call_id": "c\udcff"}, "request.messages[0].tool_call_id"),
        (
            {**_TOOL, "tool_call_id": "c" * (records.MAX_STRING_BYTES + 1)},
            "request.messages[0].tool_call_id",
        ),
        ({"role": "tool", "content": "done", "surprise": "x"}, "request.messages[0].surprise"),
        ({**_TOOL, "role": "robot"}, "request.messages[0].role"),
        ({**_TOOL, "content": 7}, "request.messages[0].content"),
    ],
)
def test_tool_results_checked_like_any_message(message: dict[str, Any], field: str) -> None:
    rec = _set(step(), "request.messages.0", message)
    assert not accepts(rec)
    with pytest.raises(RecordError) as info:
        records.validate(rec)
    assert info.value.field == field


def test_tool_results_and_named_messages_accepted() -> None:
    for message in (
        _TOOL,
        {"role": "user", "content": "hi", "name": "bob"},
        {**_TOOL, "name": "t"},
    ):
        rec = _set(step(), "request.messages", [{"role": "user", "content": "q"}, message])
        assert accepts(rec), message


def test_a_tool_call_key_that_is_null_is_absent() -> None:
    """Spec 3.1: a field whose value is null is treated as absent; a tool call's null id
    was refused ("expected a string") by both checks."""
    call = {"id": None, "name": "ls", "arguments": "{}", "type": None}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    rec = _set(step(), "request.messages", [{"role": "user", "content": "q"}, message])
    assert accepts(rec)
    records.encode(rec)


def test_not_an_object() -> None:
    with pytest.raises(RecordError, match="JSON object"):
        records.validate([1])


def test_oversized_record_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(records, "MAX_RECORD_BYTES", 1000)
    rec = _set(step(), "response.text", "x" * 2000)
    with pytest.raises(RecordError, match="over the 1000 limit"):
        records.encode(rec)


def test_good_records_encode_canonically() -> None:
    s = step()
    data = records.encode(s)
    assert records.loads(data) == s
    assert data == records.dumps(dict(reversed(list(s.items()))))  # key order never matters
    assert b'": ' not in data and b", " not in data  # no whitespace between tokens
    assert list(records.loads(data)) == sorted(s)  # keys sorted
    e = end()
    assert records.loads(records.encode(e)) == e


def _id_number(rid: str) -> int:
    alphabet = "0123456789abcdefghjkmnpqrstvwxyz"
    n = 0
    for ch in rid.split("_", 1)[1]:
        n = n * 32 + alphabet.index(ch)
    return n


def test_ids_sort_by_time(monkeypatch: pytest.MonkeyPatch) -> None:
    a = records.new_id("tr")
    b = records.new_id("tr")
    assert a.startswith("tr_") and len(a) == 29
    assert a != b
    # The number behind the digits is ms << 80 | 80 random bits, whatever the clock says.
    minted = []
    for ms in (0, 1, 1_764_600_000_000, 1_764_600_000_001, 2**48 - 1):
        monkeypatch.setattr(records.time, "time_ns", lambda ms=ms: ms * 1_000_000 + 999_999)
        rid = records.new_id("st")
        assert len(rid) == 29 and _id_number(rid) >> 80 == ms, (ms, rid)
        minted.append(rid)
    assert minted == sorted(minted)  # later milliseconds sort later, as text


def test_id_random_part_is_uniform_base32() -> None:
    ids = [records.new_id("st") for _ in range(4000)]
    assert len(set(ids)) == len(ids)
    tails = [rid[-16:] for rid in ids]  # the 80 random bits
    counts = {ch: 0 for ch in "0123456789abcdefghjkmnpqrstvwxyz"}
    for t in tails:
        for ch in t:
            counts[ch] += 1  # a KeyError: a digit outside Crockford's alphabet
    expected = 16 * len(ids) / 32  # 2,000 a digit
    assert all(abs(c - expected) < 0.15 * expected for c in counts.values()), counts


def test_non_utf8_json_refused_on_parse() -> None:
    with pytest.raises(ValueError):
        records.loads(b'{"agent": "\xff"}')


def test_a_container_a_record_holds_twice_is_judged_again_where_it_stands_deeper() -> None:
    """The fast check passes a container once per record (a translated step holds the
    agent's tools three times: its chat tools share their schemas); met again deeper than
    where it passed, it is judged again against the depth limit."""
    shared: Any = 1
    for _ in range(59):  # its innermost list at depth 63 where it stands at 5: the most allowed
        shared = [shared]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"s": shared}}}]
    rec = _set(step(), "request.tools", tools)  # tools 1, tool 2, function 3, parameters 4
    rec["raw"] = {"request": {"tools": [{"parameters": {"s": shared}}]}}
    assert accepts(rec)  # at depth 5 both times: judged once
    records.validate(rec)
    deeper = {"response": {"a": {"b": {"c": {"d": {"e": shared}}}}}}  # at depth 6
    rec["raw"] = {"request": {"s": shared}, **deeper}  # passed at depth 2, met again at 6
    with pytest.raises(RecordError):
        records.validate(rec)
    assert not accepts(rec)
    rec["raw"] = {**deeper, "request": {"s": shared}}  # the deep place first
    assert not accepts(rec)


def test_fast_json_check_is_never_looser_than_the_full_one_on_generated_values() -> None:
    """Free-form JSON (params, metadata, raw) of every shape, valid or not."""
    import random

    rng = random.Random(7)
    scalars = [None, True, 0, -1, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 1.5, math.nan]
    scalars += [math.inf, "x", "é", "\ud800", "k" * 5000, 3j, (1,), b"x", {1: 2}, {"k" * 4097: 1}]

    def value(depth: int = 0) -> Any:
        r = rng.random()
        if depth > 5 or r < 0.5:
            return rng.choice(scalars)
        if r < 0.75:
            return [value(depth + 1) for _ in range(rng.randint(0, 3))]
        keys = ["a", "é", "\udc00", "k" * 4097]
        return {rng.choice(keys): value(depth + 1) for _ in range(rng.randint(0, 3))}

    agreed = {True: 0, False: 0}
    for _ in range(3000):
        rec = _set(step(), "metadata", {"v": value()})
        try:
            records.validate(rec)
            valid = True
        except RecordError:
            valid = False
        fast = accepts(rec)
        assert not fast or valid, rec["metadata"]
        agreed[valid] += fast == valid
    assert agreed[True] > 500 and agreed[False] > 500  # both kinds were generated and judged
    deep: Any = 1
    for _ in range(64):
        deep = [deep]
    assert not accepts(_set(step(), "metadata", {"v": deep}))  # depth 65 inside metadata


def test_ids_draw_randomness_in_bulk(monkeypatch: pytest.MonkeyPatch) -> None:
    """One getrandom per id cost a syscall (and a GIL hand-off) on every proxied call:
    the tails come from bulk draws, each still used once."""
    draws: list[int] = []
    real = os.urandom

    def counted(n: int) -> bytes:
        draws.append(n)
        return real(n)

    monkeypatch.setattr(records.os, "urandom", counted)
    ids = [records.new_id("st") for _ in range(1000)]
    assert len(set(ids)) == 1000 and len({rid[-16:] for rid in ids}) == 1000
    assert len(draws) <= 1000 // 200 + 1, len(draws)


def test_a_forked_child_mints_ids_of_its_own() -> None:
    records.new_id("st")  # the queue holds tails drawn by this process
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids must not be the parent's next ones
        os.close(read)
        os.write(write, "\n".join(records.new_id("st")[-16:] for _ in range(8)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        child = set(f.read().split("\n"))
    os.waitpid(pid, 0)
    mine = {records.new_id("st")[-16:] for _ in range(8)}
    assert len(child) == 8 and not child & mine
