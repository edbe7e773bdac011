"""RawIds: token-id arrays kept as JSON bytes, taken only when they are certainly valid ids."""

from __future__ import annotations

import random

import orjson
import pytest

from agentworld import raw_ids, records
from agentworld.errors import RecordError
from agentworld.raw_ids import RawIds


@pytest.mark.parametrize(
    "ids",
    [[0], [0, 0, 0], [10, 0, 100], [999_999_999], [7] * 5000, list(range(0, 3000, 7))],
)
def test_canonical_arrays_are_taken_with_their_count_and_values(ids):
    data = orjson.dumps(ids)
    got = RawIds.from_json(data, 10**6)
    assert got is not None
    assert len(got) == len(ids) and got.tolist() == ids and got == ids
    assert raw_ids.dumps({"a": got}) == orjson.dumps({"a": ids})


def test_empty_array():
    got = RawIds.from_json(b"[]", 10)
    assert got is not None and len(got) == 0 and not got and got.tolist() == []


@pytest.mark.parametrize(
    "data",
    [
        b"[01]",  # leading zeros: not JSON
        b"[1,01]",
        b"[0,00]",
        b"[5,0,007]",
        b"[1,,2]",  # empty elements
        b"[,1]",
        b"[1,]",
        b"[1, 2]",  # not canonical: the parser judges these
        b"[-1]",
        b"[1.0]",
        b"[1e3]",
        b"[true]",
        b"[null]",
        b'["1"]',
        b"[[1]]",
        b"[1000000000]",  # 10^9 and up: the parser (and the range check) judge those
        b"[2147483648]",
        b"1,2",
        b"[1,2",
        b"",
    ],
)
def test_anything_else_is_left_to_the_parser(data):
    assert RawIds.from_json(data, 10**6) is None


def test_more_than_the_limit_is_refused():
    assert RawIds.from_json(b"[1,2,3]", 2) is None
    assert RawIds.from_json(b"[1,2,3]", 3) is not None
    # Refused by length before any pass over it: two ids cannot take 21 bytes.
    assert RawIds.from_json(b"[123456789,123456789]", 1) is None
    assert RawIds.from_json(b"[123456789,123456789]", 2) is not None


def test_never_takes_bytes_the_json_parser_would_read_otherwise():
    """Fuzz: mutate valid arrays byte by byte; whatever is taken must parse to the same ids."""
    rng = random.Random(7)
    alphabet = b"0123456789,,,-.e []x"
    taken = 0
    for _ in range(3000):
        ids = [rng.choice((0, rng.randrange(10), rng.randrange(10**6))) for _ in range(12)]
        data = bytearray(orjson.dumps(ids))
        for _ in range(rng.randrange(1, 3)):
            i = rng.randrange(len(data))
            op = rng.randrange(3)
            if op == 0:
                data[i] = rng.choice(alphabet)
            elif op == 1:
                data.insert(i, rng.choice(alphabet))
            elif len(data) > 2:
                del data[i]
        got = RawIds.from_json(bytes(data), 10**6)
        if got is None:
            continue
        taken += 1
        parsed = orjson.loads(bytes(data))  # must not raise
        assert parsed == got.tolist() and len(parsed) == len(got)
        assert all(type(x) is int and 0 <= x < 2**31 for x in parsed)
    assert taken > 100  # the fuzzing did reach the accepting side


def test_only_dumps_with_default_writes_them():
    ids = RawIds.from_json(b"[1,2]", 10)
    with pytest.raises(TypeError):
        orjson.dumps({"ids": ids})  # never silently written as something else
    assert orjson.dumps({"ids": ids}, default=raw_ids.default) == b'{"ids":[1,2]}'


def _step(prompt_ids) -> dict:
    return records.make_step(
        trajectory="tr_1",
        index=0,
        agent="a",
        request={"messages": [{"role": "user", "content": "hi"}]},
        response={"message": {"role": "assistant", "content": "yo"}},
        tokens={
            "source": "engine",
            "prompt_ids": prompt_ids,
            "completion_ids": [5, 6],
            "completion_logprobs": [-0.1, -0.2],
        },
    )


def test_records_take_raw_ids_and_write_the_same_bytes_as_the_list():
    ids = list(range(2000))
    raw = RawIds.from_json(orjson.dumps(ids), records.MAX_TOKENS)
    as_list, as_raw = _step(ids), _step(raw)
    as_raw["id"] = as_list["id"]
    as_raw["timings"] = as_list["timings"]
    assert records.encode(as_raw) == records.encode(as_list)
    # The field-by-field checks (the path that names a bad field) take them too.
    records._check_tokens(as_raw["tokens"], "tokens")


def test_records_refuse_raw_ids_over_the_token_limit():
    too_many = RawIds(b"[1]", records.MAX_TOKENS + 1)  # the trusted constructor, lying
    with pytest.raises(RecordError, match=r"tokens\.prompt_ids"):
        records.validate(_step(too_many))


def test_the_fast_check_still_finds_ids_out_of_range_in_lists():
    """Lists go on being checked on their rendering; an id of 2^31 is refused, 2^31-1 kept."""
    ok = _step([2**31 - 1, 3])
    records.validate(ok)
    with pytest.raises(RecordError, match=r"tokens.prompt_ids\[0\]"):
        records.validate(_step([2**31, 3]))
    bad_completion = _step([1])
    bad_completion["tokens"]["completion_ids"] = [2**31, 1]
    with pytest.raises(RecordError, match=r"tokens.completion_ids\[0\]"):
        records.validate(bad_completion)
