"""answer_json.loads: vLLM's prompt ids cut out as RawIds, everything else exactly as parsed."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from agentworld.proxy.upstream import answer_json
from agentworld.raw_ids import RawIds

LONG = list(range(5, 30_005, 7))  # well over MIN_RAW_BYTES once rendered


def plain(obj: Any) -> Any:
    """The value with every RawIds turned back into its list (what orjson.loads gives)."""
    if isinstance(obj, RawIds):
        return obj.tolist()
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [plain(v) for v in obj]
    return obj


def raw_places(obj: Any, path: str = "") -> list[str]:
    if isinstance(obj, RawIds):
        return [path]
    if isinstance(obj, dict):
        return [p for k, v in obj.items() for p in raw_places(v, f"{path}.{k}")]
    if isinstance(obj, list):
        return [p for i, v in enumerate(obj) for p in raw_places(v, f"{path}[{i}]")]
    return []


def check(raw: bytes, expect_raw: list[str]) -> Any:
    got = answer_json.loads(raw)
    assert plain(got) == orjson.loads(raw)
    assert raw_places(got) == expect_raw
    return got


def chat_body(**extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "hi"},
                "token_ids": [1, 2],
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": len(LONG), "completion_tokens": 2},
        **extra,
    }


def test_chat_body_prompt_ids_become_raw():
    got = check(orjson.dumps(chat_body(prompt_token_ids=LONG)), [".prompt_token_ids"])
    assert len(got["prompt_token_ids"]) == len(LONG)
    assert got["choices"][0]["token_ids"] == [1, 2]  # short lists stay lists


def test_completions_choices_each_keep_their_own_ids():
    other = LONG[::-1]
    body = {
        "choices": [
            {"index": 0, "text": "a", "prompt_token_ids": LONG},
            {"index": 1, "text": "b", "prompt_token_ids": other},
        ]
    }
    got = check(
        orjson.dumps(body), [".choices[0].prompt_token_ids", ".choices[1].prompt_token_ids"]
    )
    assert got["choices"][1]["prompt_token_ids"].tolist() == other


def test_a_stream_event_with_ids():
    event = {"id": "c", "choices": [{"index": 0, "delta": {"role": "assistant"}}]}
    check(orjson.dumps({**event, "prompt_token_ids": LONG}), [".prompt_token_ids"])


def test_short_prompt_ids_are_parsed():
    check(orjson.dumps(chat_body(prompt_token_ids=[1, 2, 3])), [])


def test_the_key_inside_strings_is_not_a_key():
    text = '"prompt_token_ids": [' + ",".join(map(str, LONG)) + "]"
    body = chat_body(prompt_token_ids=LONG)
    body["choices"][0]["message"]["content"] = text
    body["note"] = 'x"prompt_token_ids'
    check(orjson.dumps(body), [".prompt_token_ids"])


@pytest.mark.parametrize(
    "body",
    [
        # ids somewhere vLLM does not put them: parsed the ordinary way
        {"usage": {"prompt_token_ids": LONG}},
        {"choices": [{"index": 0, "message": {"prompt_token_ids": LONG}}]},
        # a key that ends in the same bytes
        {'x"prompt_token_ids': LONG},
        # not ids
        {"prompt_token_ids": [float(x) for x in LONG]},
        {"prompt_token_ids": [*LONG, -1]},
        {"prompt_token_ids": "x" * 20_000},
        {"prompt_token_ids": None, "choices": []},
    ],
)
def test_anything_unexpected_is_parsed_whole(body):
    check(orjson.dumps(body), [])


def test_whitespace_and_duplicate_keys_fall_back_to_the_parser():
    spaced = b'{"prompt_token_ids" : [' + b", ".join(b"%d" % x for x in LONG) + b"]}"
    check(spaced, [])
    ids = orjson.dumps(LONG)
    twice = b'{"prompt_token_ids":' + ids + b',"prompt_token_ids":' + ids + b"}"
    check(twice, [])  # the second wins in orjson; the cut one would be lost: parse whole


def test_spaces_around_the_colon_are_fine():
    ids = orjson.dumps(LONG)
    check(b'{"a":1,"prompt_token_ids" :\n ' + ids + b"}", [".prompt_token_ids"])


def test_invalid_json_still_raises():
    ids = orjson.dumps(LONG)
    with pytest.raises(orjson.JSONDecodeError):
        answer_json.loads(b'{"prompt_token_ids":' + ids + b",}")
    with pytest.raises(orjson.JSONDecodeError):
        answer_json.loads(b'{"prompt_token_ids":' + ids)
