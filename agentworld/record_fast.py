"""The hot-path record check: says quickly whether a record is certainly valid.

``records.validate`` runs ``doubt`` first and falls back to the field-by-field
checks (which name the bad field) only when it names a field, so this must never
be looser than those checks. Both read the one schema in ``record_schema`` (field
tables, key sets, limits); tests/test_record_agreement.py holds them to the same
verdict and the same field on mutations of every field of valid records. It avoids building field paths, closures and per-element Python
loops, which made validation cost more than encoding and compressing a record.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import orjson

from agentworld.raw_ids import RawIds
from agentworld.record_schema import (
    ERROR_KEYS,
    FIELDS,
    INT64_MAX,
    INT64_MIN,
    MAX_ERROR_MESSAGE_BYTES,
    MAX_ERROR_TYPE_BYTES,
    MAX_FINISH_REASON_BYTES,
    MAX_ID_CHARS,
    MAX_JSON_DEPTH,
    MAX_KEY_BYTES,
    MAX_STRING_BYTES,
    MAX_TOKENS,
    MAX_TOOL_NAME_BYTES,
    MESSAGE_KEYS,
    REQUEST_KEYS,
    RESPONSE_KEYS,
    ROLES,
    SCHEMA_VERSION,
    STEP,
    STEP_REQUIRED_BY_STATUS,
    TIMING_KEYS,
    TOKEN_ID_MAX,
    TOKEN_SOURCES,
    TOKENS_KEYS,
    TOOL_CALL_KEYS,
    USAGE_COUNTS,
    Field,
)

_isfinite = math.isfinite
_BAD_ID = re.compile(r"[/\\\n\r\t\x00]")
_ALL_NINES = bytes.maketrans(b"0123456789", b"9" * 10)
_ZEROS = frozenset({b"0", b"0.0"})  # how orjson writes 0 and 0.0
_E = ord("e")  # a byte as an int: ``int in bytes`` is a plain scan, ``bytes in bytes`` is not


def _text(v: Any, max_bytes: int = MAX_STRING_BYTES) -> bool:
    """A str of at most ``max_bytes`` in UTF-8, and encodable (no lone surrogates)."""
    if type(v) is not str:
        return False
    if v.isascii():  # O(1) in CPython: the string's kind is known
        return len(v) <= max_bytes
    if len(v) > max_bytes:
        return False
    try:
        return len(v.encode("utf-8")) <= max_bytes
    except UnicodeEncodeError:
        return False


def _opt_text(v: Any, max_bytes: int = MAX_STRING_BYTES) -> bool:
    return v is None or _text(v, max_bytes)


# Identifiers seen valid: trajectory, agent and dataset names recur on every step, and
# a str cannot change after it was checked. Bounded; cleared when full.
_GOOD_IDS: set[str] = set()
_GOOD_IDS_MAX = 4096


def _ident(v: Any, _arg: Any = None, _seen: Any = None) -> bool:
    """Non-empty, at most MAX_ID_CHARS UTF-8 bytes, no slashes, control chars or outer spaces."""
    if type(v) is not str:
        return False
    if v in _GOOD_IDS:
        return True
    if not (v and v.strip() == v and _BAD_ID.search(v) is None and _text(v, MAX_ID_CHARS)):
        return False
    if len(_GOOD_IDS) >= _GOOD_IDS_MAX:
        _GOOD_IDS.clear()
    _GOOD_IDS.add(v)
    return True


def _member(v: Any, values: frozenset[str]) -> bool:
    return type(v) is str and v in values


def _count(v: Any) -> bool:
    """A non-negative 64-bit integer (bool excluded)."""
    return type(v) is int and 0 <= v <= INT64_MAX


def _number(v: Any) -> bool:
    t = type(v)
    if t is float:
        return _isfinite(v)
    return t is int and INT64_MIN <= v <= INT64_MAX


def _json(v: Any, depth: int = 0, seen: dict[int, int] | None = None) -> bool:
    """Free-form JSON: finite numbers, 64-bit ints, UTF-8 strings, str keys, depth <= 64.

    One loop over a container's elements with the common scalars checked inline, not
    ``all(genexpr)`` with a call per element: the proxy runs this on every step's params
    and metadata (twice as fast on those).

    ``seen`` (container id -> the depth it passed at) skips a container met again in the
    same record no deeper: a translated step holds the agent's tools three times (the
    chat tools given to the model share their schemas, and the raw answer echoes the
    request's list), tens of kilobytes each for a coding agent."""
    t = type(v)
    if t is str:
        return (v.isascii() and len(v) <= MAX_STRING_BYTES) or _text(v)
    if v is None or t is bool:
        return True
    if t is int:
        return INT64_MIN <= v <= INT64_MAX
    if t is float:
        return _isfinite(v)
    if depth >= MAX_JSON_DEPTH:
        return False
    if seen is not None:
        passed = seen.get(id(v))
        if passed is not None and depth <= passed:  # it passed as deep or deeper
            return True
    if t is dict:
        for k in v:
            if type(k) is not str or not (
                (k.isascii() and len(k) <= MAX_KEY_BYTES) or _text(k, MAX_KEY_BYTES)
            ):
                return False
        elements: Any = v.values()
    elif t is list:
        elements = v
    else:
        return False
    inner = depth + 1
    for x in elements:
        tx = type(x)
        if tx is str:
            if not ((x.isascii() and len(x) <= MAX_STRING_BYTES) or _text(x)):
                return False
        elif tx is int:
            if not INT64_MIN <= x <= INT64_MAX:
                return False
        elif x is not None and tx is not bool and not _json(x, inner, seen):
            return False
    if seen is not None:
        seen[id(v)] = depth
    return True


def _message(m: Any) -> bool:
    if type(m) is not dict:
        return False
    role = m.get("role")
    if type(role) is not str or role not in ROLES:
        return False
    content = m.get("content")
    if type(content) is str:
        if not (content.isascii() and len(content) <= MAX_STRING_BYTES) and not _text(content):
            return False
    elif content is not None and (type(content) is not list or not _json(content, 0)):
        return False
    if len(m) <= 2 and (len(m) == 1 or "content" in m):
        return True  # the common {role, content} message: nothing else to look at
    if not MESSAGE_KEYS.issuperset(m):
        return False
    if not (
        _opt_text(m.get("name"))
        and _opt_text(m.get("tool_call_id"))
        and _opt_text(m.get("reasoning"))
    ):
        return False
    calls = m.get("tool_calls")
    if calls is None:
        return True
    if type(calls) is not list:
        return False
    for c in calls:
        if (
            type(c) is not dict
            or not TOOL_CALL_KEYS.issuperset(c)
            or not _opt_text(c.get("id"), MAX_TOOL_NAME_BYTES)
            or not _text(c.get("name"), MAX_TOOL_NAME_BYTES)
            or not _text(c.get("arguments"))
            or not _opt_text(c.get("type"))
        ):
            return False
    return True


def _messages(ms: Any) -> bool:
    """A message list; the common {role, content: ASCII text} message is checked inline
    (a call per message costs more than the check itself)."""
    if type(ms) is not list:
        return False
    for m in ms:
        if type(m) is dict:
            n = len(m)
            c, role = m.get("content"), m.get("role")
            if (
                type(c) is str
                and c.isascii()
                and len(c) <= MAX_STRING_BYTES
                and type(role) is str
                and role in ROLES
            ):
                if n == 2:
                    continue
                if n == 3:  # a tool result: the third key can only be tool_call_id
                    call_id = m.get("tool_call_id")
                    if (
                        type(call_id) is str
                        and call_id.isascii()
                        and len(call_id) <= MAX_STRING_BYTES
                    ):
                        continue
        if not _message(m):
            return False
    return True


def _token_ids(v: Any) -> bool:
    """Integers in [0, 2^31), checked on orjson's rendering of the list (C speed, no
    per-element Python): only digits and commas may remain between the brackets,
    which rules out bools, floats, negatives, nulls, strings and nesting."""
    if type(v) is RawIds:  # checked when it was made
        return len(v) <= MAX_TOKENS
    if type(v) is not list or len(v) > MAX_TOKENS:
        return False
    try:
        data = orjson.dumps(v)
    except orjson.JSONEncodeError:
        return False
    if data.translate(None, b"0123456789,") != b"[]":
        return False
    return _below_token_max(data, v)


def _below_token_max(data: bytes, *lists: list[Any]) -> bool:
    """Every id of ``lists`` (rendered in ``data``, digits and commas) is at most 2^31 - 1.

    orjson writes no leading zeros, so without a run of ten digits every id is
    below 10^9; ``max`` (a per-element loop) runs only when there is one."""
    if data.translate(_ALL_NINES).find(b"9999999999") < 0:  # not ``in``: see proxy/sse.py
        return True
    return all(not v or max(v) <= TOKEN_ID_MAX for v in lists)


def _logprobs_data(data: bytes, n: int) -> bool:
    """orjson's rendering of ``n`` log-probs (it writes NaN and infinities as null):
    only number characters may remain, and every number is negative or zero."""
    if data.translate(None, b"0123456789-.e+,") != b"[]":
        return False
    # Every number starts with a minus sign. Without exponents that is one "-" per
    # number (a one-byte count is much cheaper than a two-byte one); with them, a
    # minus after "[" and after each of the n-1 commas.
    if _E not in data:
        if data.count(b"-") == n:
            return True
    elif data.count(b",-") + data.startswith(b"[-") == n:
        return True
    # Some number has no sign: fine only if it is zero (log 1, as greedy decoding gives).
    return n == 0 or all(x[:1] == b"-" or x in _ZEROS for x in data[1:-1].split(b","))


def _logprobs(v: Any) -> bool:
    if type(v) is not list or len(v) > MAX_TOKENS:
        return False
    try:
        data = orjson.dumps(v)
    except orjson.JSONEncodeError:
        return False
    return _logprobs_data(data, len(v))


def _engine_tokens(prompt: list[Any], ids: list[Any], lps: list[Any]) -> bool:
    """The usual engine triple in one rendering: ``[[prompt],[ids],[log-probs]]``.

    The ids' digits and commas are checked in one pass over both id lists, and
    the split points are the only two "],[" (numbers hold no brackets)."""
    if len(prompt) > MAX_TOKENS or len(ids) > MAX_TOKENS or len(ids) != len(lps):
        return False
    try:
        data = orjson.dumps((prompt, ids, lps))
    except orjson.JSONEncodeError:
        return False
    cut = data.rfind(b"],[")
    if cut < 0 or data[:cut].translate(None, b"0123456789,") != b"[[][":
        return False
    if not _logprobs_data(data[cut + 2 : -1], len(lps)):
        return False
    return _below_token_max(data[:cut], prompt, ids)


def _tokens(v: Any, _arg: Any = None, _seen: Any = None) -> bool:
    if type(v) is not dict or not TOKENS_KEYS.issuperset(v):
        return False
    source = v.get("source")
    if not _member(source, TOKEN_SOURCES):
        return False
    prompt, ids, lps = v.get("prompt_ids"), v.get("completion_ids"), v.get("completion_logprobs")
    if source != "none" and type(prompt) is list and type(ids) is list and type(lps) is list:
        return _engine_tokens(prompt, ids, lps)
    if prompt is not None and not _token_ids(prompt):
        return False
    if ids is not None and not _token_ids(ids):
        return False
    if lps is not None and (not _logprobs(lps) or ids is None or len(ids) != len(lps)):
        return False
    if source == "none" and (prompt or ids):
        return False
    return not (source == "engine" and ids is None)


def _request(v: Any, _arg: Any, seen: dict[int, int]) -> bool:
    if type(v) is not dict or not REQUEST_KEYS.issuperset(v):
        return False
    messages, prompt = v.get("messages"), v.get("prompt")
    if messages is None and prompt is None:
        return False
    if messages is not None and not _messages(messages):
        return False
    if not _opt_text(v.get("model")) or not _opt_text(prompt):
        return False
    tools, params = v.get("tools"), v.get("params")
    if tools is not None and (type(tools) is not list or not _json(tools, 1, seen)):
        return False
    return params is None or (type(params) is dict and _json(params, 1, seen))


def _response(v: Any, _arg: Any = None, _seen: Any = None) -> bool:
    if type(v) is not dict or not RESPONSE_KEYS.issuperset(v):
        return False
    msg = v.get("message")
    if msg is not None and (not _message(msg) or msg["role"] != "assistant"):
        return False
    if not (
        _opt_text(v.get("text"))
        and _opt_text(v.get("finish_reason"), MAX_FINISH_REASON_BYTES)
        and _opt_text(v.get("id"))
    ):
        return False
    usage = v.get("usage")
    if usage is None:
        return True
    if type(usage) is not dict:
        return False
    for k, n in usage.items():
        if n is None or _count(n):
            continue
        if type(n) is not dict or k in USAGE_COUNTS or not _json(n, 2):
            return False
    return True


def _timings(v: Any, _arg: Any = None, _seen: Any = None) -> bool:
    if type(v) is not dict or not TIMING_KEYS.issuperset(v) or "started_at" not in v:
        return False
    for x in v.values():
        if type(x) is float:
            if not _isfinite(x):
                return False
        elif x is not None and not _number(x):
            return False
    return True


def _error(v: Any, _arg: Any = None, _seen: Any = None) -> bool:
    if type(v) is not dict or not ERROR_KEYS.issuperset(v):
        return False
    status = v.get("status")
    return (
        _text(v.get("type"), MAX_ERROR_TYPE_BYTES)
        and _text(v.get("message"), MAX_ERROR_MESSAGE_BYTES)
        and (status is None or _count(status))
    )


def _schema(v: Any, _arg: Any, _seen: Any) -> bool:
    return v == SCHEMA_VERSION and type(v) is int


# The rules with a field's arguments (value, the rule's arg, the containers already
# passed): called straight from the plan, no wrapper frames (a wrapper per field cost
# ~10% of a chat step's check).
def _count_rule(v: Any, _arg: Any, _seen: Any) -> bool:
    return type(v) is int and 0 <= v <= INT64_MAX


def _number_rule(v: Any, _arg: Any, _seen: Any) -> bool:
    return _number(v)


def _text_rule(v: Any, max_bytes: int, _seen: Any) -> bool:
    if type(v) is str and v.isascii():
        return len(v) <= max_bytes
    return _text(v, max_bytes)


def _enum_rule(v: Any, values: frozenset[str], _seen: Any) -> bool:
    return type(v) is str and v in values


def _kind_rule(v: Any, _arg: Any, _seen: Any) -> bool:
    return True  # checked before the table


def _object(v: Any, _arg: Any, seen: dict[int, int]) -> bool:
    return type(v) is dict and _json(v, 0, seen)


# What each rule of the schema's field tables means here: (value, the rule's arg, the
# containers already passed in this record) -> certainly valid.
_RULES: dict[str, Callable[[Any, Any, dict[int, int]], bool]] = {
    "kind": _kind_rule,
    "schema": _schema,
    "ident": _ident,
    "count": _count_rule,
    "number": _number_rule,
    "text": _text_rule,
    "enum": _enum_rule,
    "object": _object,
    "timings": _timings,
    "request": _request,
    "response": _response,
    "tokens": _tokens,
    "error": _error,
}


# The simple rules written inline in the compiled check (a call per field cost more than
# most fields' checks): each the same test as its function in ``_RULES``, on ``v`` and
# the field's argument ``{a}``.
_INLINE = {
    "schema": "v == {version} and type(v) is int",
    "ident": "(type(v) is str and v in _GOOD_IDS) or _ident(v)",
    "count": "type(v) is int and 0 <= v <= {int64_max}",
    "enum": "type(v) is str and v in {a}",
    "text": "(type(v) is str and v.isascii() and len(v) <= {a}) or _text(v, {a})",
}


def _compile(kind: str, fields: dict[str, Field]) -> Callable[[dict[str, Any]], str | None]:
    """The table's checks as one straight-line function, as ``dataclasses`` writes an
    ``__init__``: a loop over the table (tuple unpacking, a call per field) cost ~10% of
    a step's check. Each field: absent (None) is fine unless required; present, its rule
    must pass (the simple rules inline, ``_INLINE``); the first that does not is named."""
    namespace: dict[str, Any] = {"_RULES": _RULES, "_GOOD_IDS": _GOOD_IDS, "_ident": _ident}
    namespace["_text"] = _text
    lines = [f"def _doubt_{kind}(r):", "    seen = {}"]
    for i, (key, f) in enumerate(fields.items()):
        if f.rule == "kind":
            continue
        namespace[f"_arg{i}"] = f.arg
        namespace[f"_check{i}"] = _RULES[f.rule]
        inline = _INLINE.get(f.rule)
        if inline is None:
            test = f"_check{i}(v, _arg{i}, seen)"
        else:
            test = inline.format(a=f"_arg{i}", version=SCHEMA_VERSION, int64_max=INT64_MAX)
            test = f"({test})"
        lines += [
            f"    v = r.get({key!r})",
            "    if v is None:",
            f"        {f'return {key!r}' if f.required else 'pass'}",
            f"    elif not {test}:",
            f"        return {key!r}",
        ]
    if kind == STEP:
        lines.append("    status = r['status']")
        for when, key in STEP_REQUIRED_BY_STATUS:
            lines.append(f"    if status == {when!r} and r.get({key!r}) is None: return {key!r}")
    lines.append("    return None")
    source = "\n".join(lines)
    exec(source, namespace)  # the source is built above from the schema alone
    fn = namespace[f"_doubt_{kind}"]
    fn.source = source  # what runs, for a reader: print(_PLANS["step"][1].source)
    return fn


_PLANS: dict[str, tuple[frozenset[str], Callable[[dict[str, Any]], str | None]]] = {
    kind: (frozenset(fields), _compile(kind, fields)) for kind, fields in FIELDS.items()
}


def doubt(r: Any) -> str | None:
    """None if ``records.validate`` certainly accepts ``r``; else the top-level field to
    look closer at, in the order the full check goes ("" when ``r`` is no object, and
    "kind" for a kind that is neither step nor end).

    The full check names the same field (or one inside it) when it refuses ``r``."""
    if type(r) is not dict:
        return ""
    kind = r.get("kind")
    plan = _PLANS.get(kind) if type(kind) is str else None
    if plan is None:
        return "kind"
    keys, check = plan
    if not keys.issuperset(r):
        return next(k for k in r if k not in keys)
    return check(r)


def accepts(r: Any) -> bool:
    """True only if ``records.validate`` would accept ``r``; False means "look closer"."""
    return doubt(r) is None
