"""Parsing an upstream's JSON answer (a body or one SSE event) with its prompt ids left as bytes.

vLLM returns ``prompt_token_ids`` on the body (chat), or on each choice
(completions); for an agent deep into a long conversation that is tens of
thousands of ids per call, which would cost more to parse, check and render
again than the rest of the call. ``loads`` cuts each such array out of the
bytes before parsing, puts a unique placeholder string in its place, parses
the rest, and then puts a ``RawIds`` (the array's bytes) where each
placeholder landed. Only the two places vLLM uses are taken: an array not in
canonical form is left to the parser, and one that lands anywhere else
sends the whole body through the ordinary parser, so the result always
equals ``orjson.loads``'s (with RawIds standing for the lists).
"""

from __future__ import annotations

import os
from typing import Any

# raw_ids imports numpy lazily (every `aw` command imports raw_ids); the proxy loads it here,
# at start-up, rather than on its first long call (a ~0.1 s stall of the event loop).
import numpy  # noqa: F401
import orjson

from agentworld.raw_ids import RawIds
from agentworld.records import MAX_TOKENS

_KEY = b'"prompt_token_ids"'
_SPACE = b" \t\r\n"
# A string no upstream sends: a per-process random tag, then the array's number.
_TAG = f"aw-raw-ids:{os.urandom(8).hex()}:"
_TAG_BYTES = _TAG.encode()
# Arrays shorter than this (about 1,300 ids) are parsed: below it the checks cost more.
MIN_RAW_BYTES = 8192


def loads(raw: bytes) -> Any:
    """``orjson.loads(raw)``, with vLLM's ``prompt_token_ids`` arrays as RawIds."""
    data, ids = cut_ids(raw)
    if not ids:  # a streamed token's event, say
        return orjson.loads(raw)
    obj = orjson.loads(data)
    if not _place(obj, ids):
        return orjson.loads(raw)
    return obj


def loads_object(raw: bytes) -> dict[str, Any]:
    """``loads`` of an answer that must be a JSON object (ValueError if it is not)."""
    obj = loads(raw)
    if obj.__class__ is not dict:
        raise ValueError("not a JSON object")
    return obj


def cut_ids(raw: bytes) -> tuple[bytes, list[RawIds]]:
    """``raw`` with each of vLLM's long ``prompt_token_ids`` arrays replaced by a tag
    string (``tagged``), and those arrays: for a reader other than ``loads`` (the typed
    one of ``adapters/openai_answer``), which puts each back where its tag landed."""
    if len(raw) < MIN_RAW_BYTES or raw.find(_KEY) < 0:
        return raw, []
    parts, ids = _cut(raw)
    return (b"".join(parts) if ids else raw), ids


def tagged(v: Any) -> int | None:
    """The number of the array whose tag ``v`` is (``cut_ids``), or None."""
    if v.__class__ is str and v.startswith(_TAG):
        return int(v[len(_TAG) :])
    return None


def _cut(raw: bytes) -> tuple[list[bytes], list[RawIds]]:
    """The body's bytes with each ids array replaced by a tagged string, and the arrays."""
    parts: list[bytes] = []
    ids: list[RawIds] = []
    pos, n = 0, len(raw)
    k = raw.find(_KEY)
    while k >= 0:
        j = k + len(_KEY)
        while j < n and raw[j] in _SPACE:
            j += 1
        if j >= n or raw[j] != 0x3A:  # ":" -- not a key after all (the end of a string value)
            k = raw.find(_KEY, j)
            continue
        j += 1
        while j < n and raw[j] in _SPACE:
            j += 1
        end = raw.find(b"]", j)
        # Not an array, or a short one (parsing it costs less than checking it): leave it.
        if j >= n or raw[j] != 0x5B or end < 0 or end - j < MIN_RAW_BYTES:
            k = raw.find(_KEY, j)
            continue
        got = RawIds.from_json(raw[j : end + 1], MAX_TOKENS)
        if got is None:  # not canonical ids: the parser judges them
            k = raw.find(_KEY, end)
            continue
        parts += (raw[pos:j], b'"' + _TAG_BYTES + str(len(ids)).encode() + b'"')
        ids.append(got)
        pos = end + 1
        k = raw.find(_KEY, pos)
    parts.append(raw[pos:])
    return parts, ids


def _place(obj: Any, ids: list[RawIds]) -> bool:
    """Put each array where its tag landed; False if any landed elsewhere."""
    if obj.__class__ is not dict:
        return False
    holders = [obj]
    choices = obj.get("choices")
    if choices.__class__ is list:
        holders += [c for c in choices if c.__class__ is dict]
    placed: set[int] = set()
    for h in holders:
        i = tagged(h.get("prompt_token_ids"))
        if i is not None:
            if i in placed:
                return False
            placed.add(i)
            h["prompt_token_ids"] = ids[i]
    return len(placed) == len(ids)
