"""Step and trajectory-end records: the one schema every part of AgentWorld reads and writes.

Records are plain dicts (what orjson reads and writes fastest) checked by
``validate_step`` / ``validate_end`` on the way into the pool. Validation is
hand-written rather than a schema library because it sits on the proxy's hot
path and must name the exact field that is wrong.
"""

from __future__ import annotations

import hashlib
import math
import os
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Final

import orjson

from agentworld import raw_ids
from agentworld.errors import RecordError
from agentworld.raw_ids import RawIds
from agentworld.record_fast import doubt
from agentworld.record_schema import (
    END,
    END_STATUSES,
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
    MAX_RECORD_BYTES,
    MAX_STRING_BYTES,
    MAX_TOKENS,
    MAX_TOOL_NAME_BYTES,
    MESSAGE_KEYS,
    PROTOCOLS,
    REQUEST_KEYS,
    RESPONSE_KEYS,
    ROLES,
    SCHEMA_VERSION,
    STEP,
    STEP_REQUIRED_BY_STATUS,
    STEP_STATUSES,
    TIMING_KEYS,
    TOKEN_ID_MAX,
    TOKEN_SOURCES,
    TOKENS_KEYS,
    TOOL_CALL_KEYS,
    USAGE_COUNTS,
    Field,
)

# Re-exported: the schema's names are part of this module's public face.
__all__ = [
    "END",
    "END_STATUSES",
    "MAX_RECORD_BYTES",
    "MAX_STRING_BYTES",
    "MAX_TOKENS",
    "MAX_TOOL_NAME_BYTES",
    "PROTOCOLS",
    "SCHEMA_VERSION",
    "STEP",
    "STEP_STATUSES",
    "USAGE_COUNTS",
    "check_fields",
    "check_metadata",
    "completion_text",
    "content_hash",
    "dumps",
    "encode",
    "loads",
    "make_end",
    "make_step",
    "new_id",
    "parse",
    "parse_stored",
    "validate",
]

_ID_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32: sortable, no look-alikes


# Two base32 digits per lookup (ids are minted per call): the time part is ten digits,
# worked out once per millisecond; the random part is sixteen digits, one per random byte's
# low five bits (80 bits, through one ``bytes.translate``).
_ID_PAIRS: Final = tuple(a + b for a in _ID_ALPHABET for b in _ID_ALPHABET)
_ID_RANDOM: Final = bytes(ord(_ID_ALPHABET[b & 31]) for b in range(256))
_id_ms: tuple[int, str] = (-1, "")  # (ms, its ten digits): one tuple, swapped whole
# Random tails drawn from the OS in bulk: one ``os.urandom`` (a getrandom syscall, which
# also lets the writer threads take the GIL) per 256 ids instead of per id; ids are minted
# on every proxied call. Each tail is still 80 bits straight from the OS's CSPRNG, used
# once. ``deque.popleft`` is atomic, so threads never share a tail, and a forked child
# starts empty (it must not mint the parent's ids).
_ID_TAILS_PER_DRAW: Final = 256
_id_tails: deque[str] = deque()
os.register_at_fork(after_in_child=_id_tails.clear)


def _ms_digits(ms: int) -> str:
    p = _ID_PAIRS
    return (
        p[ms >> 40 & 1023]
        + p[ms >> 30 & 1023]
        + p[ms >> 20 & 1023]
        + p[ms >> 10 & 1023]
        + p[ms & 1023]
    )


def new_id(prefix: str) -> str:
    """A sortable unique id: ``<prefix>_`` + 48-bit ms time + 80 random bits, base32.

    The 26 digits are the 128-bit number ``ms << 80 | random`` in Crockford base32
    (the first digit is 0 until the year 10889), so ids sort by the millisecond
    they were minted in.
    """
    global _id_ms
    ms = time.time_ns() // 1_000_000
    cached = _id_ms
    if cached[0] != ms:
        cached = _id_ms = (ms, _ms_digits(ms))
    try:
        tail = _id_tails.popleft()
    except IndexError:
        tail = _draw_id_tails()
    return prefix + "_" + cached[1] + tail


def _draw_id_tails() -> str:
    """One random tail to use now; the queue refilled with the rest of one bulk draw."""
    digits = os.urandom(16 * _ID_TAILS_PER_DRAW).translate(_ID_RANDOM).decode("ascii")
    _id_tails.extend(digits[i : i + 16] for i in range(16, len(digits), 16))
    return digits[:16]


def dumps(record: Mapping[str, Any]) -> bytes:
    """Canonical JSON: sorted keys, no whitespace, UTF-8. Refuses >64-bit ints.

    orjson writes NaN and infinities as null; ``validate`` refuses them first.
    """
    try:
        return orjson.dumps(record, default=raw_ids.default, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError as exc:
        raise RecordError("", f"not serialisable as JSON: {exc}") from None


def loads(data: bytes | str) -> Any:
    """Parse JSON (orjson refuses invalid UTF-8 and lone surrogates)."""
    return orjson.loads(data)


def content_hash(data: bytes) -> str:
    """Tagged content hash, ``sha256:<hex>``."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


# -- field checks -----------------------------------------------------------------


def _fail(path: str, problem: str) -> RecordError:
    return RecordError(path, problem)


def _check_str(v: Any, path: str, *, max_bytes: int = MAX_STRING_BYTES) -> None:
    if not isinstance(v, str):
        raise _fail(path, f"expected a string, got {type(v).__name__}")
    if len(v) > max_bytes // 4 and len(v.encode("utf-8", "surrogatepass")) > max_bytes:
        raise _fail(path, f"longer than {max_bytes} bytes")
    # A lone surrogate cannot be encoded as UTF-8; catch it here with the field name.
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        raise _fail(path, "not valid UTF-8 text (lone surrogate)") from None


def _check_id(v: Any, path: str) -> None:
    _check_str(v, path, max_bytes=MAX_ID_CHARS)
    if not v or any(c in v for c in "/\\\n\r\t\0") or v.strip() != v:
        raise _fail(path, "ids must be non-empty, without slashes, whitespace or control chars")


def _check_int(v: Any, path: str, *, minimum: int = INT64_MIN) -> None:
    if isinstance(v, bool) or not isinstance(v, int):
        raise _fail(path, f"expected an integer, got {type(v).__name__}")
    if v < minimum or v > INT64_MAX:
        raise _fail(path, f"integer {v} out of range [{minimum}, 2^63-1]")


def _check_num(v: Any, path: str) -> None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise _fail(path, f"expected a number, got {type(v).__name__}")
    if isinstance(v, float) and not math.isfinite(v):
        raise _fail(path, f"{v} is not a finite number")
    if isinstance(v, int) and not INT64_MIN <= v <= INT64_MAX:
        raise _fail(path, "integer outside 64 bits")


def _check_json(v: Any, path: str, depth: int = 0) -> None:
    """Free-form JSON (metadata, tool schemas, raw payloads): finite, 64-bit, UTF-8, not too deep."""
    if depth > MAX_JSON_DEPTH:
        raise _fail(path, f"nested more than {MAX_JSON_DEPTH} levels")
    if v is None or isinstance(v, bool):
        return
    if isinstance(v, str):
        _check_str(v, path)
    elif isinstance(v, int | float):
        _check_num(v, path)
    elif isinstance(v, list):
        for i, item in enumerate(v):
            _check_json(item, f"{path}[{i}]", depth + 1)
    elif isinstance(v, dict):
        for k, item in v.items():
            if not isinstance(k, str):
                raise _fail(path, "object keys must be strings")
            _check_str(k, f"{path}.<key>", max_bytes=MAX_KEY_BYTES)
            _check_json(item, f"{path}.{k}", depth + 1)
    else:
        raise _fail(path, f"{type(v).__name__} is not a JSON value")


def check_metadata(v: Any, path: str = "metadata") -> None:
    """Raise RecordError unless ``v`` is what a record's ``metadata`` may hold (an object of
    finite, 64-bit, UTF-8 JSON, not too deep): for fields taken long before their record."""
    _check_dict(v, path)
    _check_json(v, path)


def _opt(check: Callable[[Any, str], None]) -> Callable[[Any, str], None]:
    def inner(v: Any, path: str) -> None:
        if v is not None:
            check(v, path)

    return inner


def _check_dict(v: Any, path: str) -> None:
    if not isinstance(v, dict):
        raise _fail(path, f"expected an object, got {type(v).__name__}")


def _check_keys(obj: Mapping[str, Any], allowed: frozenset[str], path: str) -> None:
    extra = obj.keys() - allowed
    if extra:
        raise _fail(f"{path}.{sorted(extra)[0]}" if path else sorted(extra)[0], "unknown field")


def _check_tool_calls(v: Any, path: str) -> None:
    if not isinstance(v, list):
        raise _fail(path, "expected a list of tool calls")
    for i, call in enumerate(v):
        p = f"{path}[{i}]"
        _check_dict(call, p)
        _check_keys(call, TOOL_CALL_KEYS, p)
        if call.get("id") is not None:  # null is absent, as for every optional key
            _check_str(call["id"], f"{p}.id", max_bytes=MAX_TOOL_NAME_BYTES)
        _check_str(call.get("name"), f"{p}.name", max_bytes=MAX_TOOL_NAME_BYTES)
        _check_str(call.get("arguments"), f"{p}.arguments")
        _opt(_check_str)(call.get("type"), f"{p}.type")


def _check_message(m: Any, path: str) -> None:
    """Normalised message: role, content (str, or list of content parts), tool calls, reasoning."""
    _check_dict(m, path)
    _check_keys(m, MESSAGE_KEYS, path)
    role = m.get("role")
    if not isinstance(role, str) or role not in ROLES:
        raise _fail(f"{path}.role", f"must be one of {sorted(ROLES)}, got {role!r}")
    content = m.get("content")
    if content is not None and not isinstance(content, str):
        if not isinstance(content, list):
            raise _fail(f"{path}.content", "expected a string, a list of parts, or null")
        _check_json(content, f"{path}.content")
    elif content is not None:
        _check_str(content, f"{path}.content")
    for key in ("name", "tool_call_id", "reasoning"):
        _opt(_check_str)(m.get(key), f"{path}.{key}")
    if m.get("tool_calls") is not None:
        _check_tool_calls(m["tool_calls"], f"{path}.tool_calls")


def _check_messages(v: Any, path: str) -> None:
    if not isinstance(v, list):
        raise _fail(path, "expected a list of messages")
    for i, m in enumerate(v):
        _check_message(m, f"{path}[{i}]")


def _check_int_list(v: Any, path: str) -> None:
    if v.__class__ is RawIds:  # checked when it was made
        if len(v) > MAX_TOKENS:
            raise _fail(path, f"more than {MAX_TOKENS} tokens")
        return
    if not isinstance(v, list):
        raise _fail(path, "expected a list of token ids")
    if len(v) > MAX_TOKENS:
        raise _fail(path, f"more than {MAX_TOKENS} tokens")
    for i, t in enumerate(v):
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t <= TOKEN_ID_MAX:
            raise _fail(f"{path}[{i}]", f"token ids are integers in [0, 2^31), got {t!r}")


def _check_float_list(v: Any, path: str) -> None:
    if not isinstance(v, list):
        raise _fail(path, "expected a list of log-probs")
    if len(v) > MAX_TOKENS:
        raise _fail(path, f"more than {MAX_TOKENS} values")
    for i, x in enumerate(v):
        if isinstance(x, bool) or not isinstance(x, int | float):
            raise _fail(f"{path}[{i}]", f"expected a number, got {x!r}")
        if isinstance(x, int) and x < INT64_MIN:
            raise _fail(f"{path}[{i}]", "integer outside 64 bits")
        # JSON has no infinities (orjson would silently write null), so even
        # -inf, the log-prob of an impossible token, is refused: store a floor.
        if x != x or x == math.inf or x == -math.inf:
            raise _fail(
                f"{path}[{i}]", f"{x} is not a finite log-probability (JSON cannot hold it)"
            )
        if x > 0:
            raise _fail(f"{path}[{i}]", f"{x} is not a log-probability (must be <= 0)")


def _check_tokens(v: Any, path: str) -> None:
    _check_dict(v, path)
    _check_keys(v, TOKENS_KEYS, path)
    source = v.get("source")
    if not isinstance(source, str) or source not in TOKEN_SOURCES:
        raise _fail(f"{path}.source", f"must be one of {sorted(TOKEN_SOURCES)}, got {source!r}")
    for key in ("prompt_ids", "completion_ids"):
        _opt(_check_int_list)(v.get(key), f"{path}.{key}")
    _opt(_check_float_list)(v.get("completion_logprobs"), f"{path}.completion_logprobs")
    ids, lps = v.get("completion_ids"), v.get("completion_logprobs")
    if lps is not None and (ids is None or len(ids) != len(lps)):
        raise _fail(
            f"{path}.completion_logprobs",
            f"{len(lps)} log-probs for {0 if ids is None else len(ids)} completion ids",
        )
    if source == "none" and (v.get("prompt_ids") or ids):
        raise _fail(f"{path}.source", "token ids are present but source is 'none'")
    if source == "engine" and ids is None:
        raise _fail(f"{path}.completion_ids", "required when source is 'engine'")


def _check_request(v: Any, path: str) -> None:
    _check_dict(v, path)
    _check_keys(v, REQUEST_KEYS, path)
    _opt(_check_str)(v.get("model"), f"{path}.model")
    if v.get("messages") is None and v.get("prompt") is None:
        raise _fail(f"{path}.messages", "required (or request.prompt for completions)")
    _opt(_check_messages)(v.get("messages"), f"{path}.messages")
    _opt(_check_str)(v.get("prompt"), f"{path}.prompt")
    if v.get("tools") is not None:
        if not isinstance(v["tools"], list):
            raise _fail(f"{path}.tools", "expected a list of tool definitions")
        _check_json(v["tools"], f"{path}.tools")
    if v.get("params") is not None:
        _check_dict(v["params"], f"{path}.params")
        _check_json(v["params"], f"{path}.params")


def _check_response(v: Any, path: str) -> None:
    _check_dict(v, path)
    _check_keys(v, RESPONSE_KEYS, path)
    if v.get("message") is not None:
        _check_message(v["message"], f"{path}.message")
        if v["message"]["role"] != "assistant":
            raise _fail(f"{path}.message.role", "the response message must be 'assistant'")
    _opt(_check_str)(v.get("text"), f"{path}.text")
    _opt(lambda x, p: _check_str(x, p, max_bytes=MAX_FINISH_REASON_BYTES))(
        v.get("finish_reason"), f"{path}.finish_reason"
    )
    _opt(_check_str)(v.get("id"), f"{path}.id")
    if v.get("usage") is not None:
        _check_dict(v["usage"], f"{path}.usage")
        for k, n in v["usage"].items():
            if isinstance(n, dict) and k not in USAGE_COUNTS:  # details, e.g. cached tokens
                _check_json(n, f"{path}.usage.{k}")
            elif n is not None:
                _check_int(n, f"{path}.usage.{k}", minimum=0)


def _check_timings(v: Any, path: str) -> None:
    _check_dict(v, path)
    _check_keys(v, TIMING_KEYS, path)
    if "started_at" not in v:
        raise _fail(f"{path}.started_at", "required (unix seconds)")
    for k, x in v.items():
        _opt(_check_num)(x, f"{path}.{k}")


def _check_error(v: Any, path: str) -> None:
    _check_dict(v, path)
    _check_keys(v, ERROR_KEYS, path)
    _check_str(v.get("type"), f"{path}.type", max_bytes=MAX_ERROR_TYPE_BYTES)
    _check_str(v.get("message"), f"{path}.message", max_bytes=MAX_ERROR_MESSAGE_BYTES)
    _opt(lambda x, p: _check_int(x, p, minimum=0))(v.get("status"), f"{path}.status")


def _check_enum(values: frozenset[str]) -> Callable[[Any, str], None]:
    def inner(v: Any, path: str) -> None:
        if not isinstance(v, str) or v not in values:
            raise _fail(path, f"must be one of {sorted(values)}, got {v!r}")

    return inner


def _check_schema(v: Any, path: str) -> None:
    if type(v) is not int or v != SCHEMA_VERSION:  # true == 1 in Python, not in the schema
        raise _fail(path, f"unknown record schema {v!r}; this build reads schema {SCHEMA_VERSION}")


def _check_object(v: Any, path: str) -> None:
    _check_dict(v, path)
    _check_json(v, path)


# What each rule of the schema's field tables means here (record_fast has its own
# reading of the same rules, tested to agree with this one).
_RULES: dict[str, Callable[[Any], Callable[[Any, str], None]]] = {
    "kind": lambda arg: lambda v, p: None,  # checked before the table
    "schema": lambda arg: _check_schema,
    "ident": lambda arg: _check_id,
    "count": lambda arg: lambda v, p: _check_int(v, p, minimum=0),
    "number": lambda arg: _check_num,
    "text": lambda arg: lambda v, p: _check_str(v, p, max_bytes=arg),
    "enum": _check_enum,
    "object": lambda arg: _check_object,
    "timings": lambda arg: _check_timings,
    "request": lambda arg: _check_request,
    "response": lambda arg: _check_response,
    "tokens": lambda arg: _check_tokens,
    "error": lambda arg: _check_error,
}


def _plan(fields: dict[str, Field]) -> dict[str, tuple[bool, Callable[[Any, str], None]]]:
    return {key: (f.required, _RULES[f.rule](f.arg)) for key, f in fields.items()}


_PLANS = {kind: _plan(fields) for kind, fields in FIELDS.items()}


def _validate(record: Any, plan: dict[str, tuple[bool, Callable[[Any, str], None]]]) -> None:
    for key in record:
        if key not in plan:
            raise _fail(key, "unknown field")
    for key, (required, check) in plan.items():
        value = record.get(key)
        if value is None:
            if required:
                raise _fail(key, "required")
            continue
        check(value, key)


def validate(record: Any) -> dict[str, Any]:
    """Check a step or end record; raise RecordError naming the first bad field."""
    if doubt(record) is None:
        return record
    check_fields(record)  # not certainly valid: name what is wrong, if anything
    return record


def check_fields(record: Any) -> None:
    """The full field-by-field check (``validate`` without its fast path): raise
    RecordError naming the first bad field, in the schema's field order."""
    if not isinstance(record, dict):
        raise _fail("", f"a record is a JSON object, got {type(record).__name__}")
    kind = record.get("kind")
    plan = _PLANS.get(kind) if isinstance(kind, str) else None
    if plan is None:
        raise _fail("kind", f"must be 'step' or 'end', got {kind!r}")
    _validate(record, plan)
    if kind == STEP:
        for status, key in STEP_REQUIRED_BY_STATUS:
            if record["status"] == status and record.get(key) is None:
                raise _fail(key, f"required when status is {status!r}")


def parse(line: bytes) -> dict[str, Any]:
    """One stored line (a shard or journal record) as a valid record, checked whole.

    For what must not carry a bad record further (merge, compaction, gc): RecordError
    says why a line is not a record (not JSON, or which field is missing or wrong).
    """
    return validate(_loads(line))


def parse_stored(line: bytes) -> dict[str, Any]:
    """One stored line as a record a reader can file: a JSON object, a step or an end,
    with its ``id`` and ``trajectory`` (a step its ``index``), of no record schema but ours.

    What readers key on, at a fraction of ``parse``'s cost: the writer validated every
    record it wrote, and a line of another tool's is checked whole where it enters a
    pool (merge) and by fsck. A line that fails says why (RecordError), so a reader
    can name it and skip it rather than fail later on a missing key.
    """
    record = _loads(line)
    if record.__class__ is not dict:
        raise _fail("", f"a record is a JSON object, got {type(record).__name__}")
    kind = record.get("kind")
    if kind != STEP and kind != END:
        raise _fail("kind", f"must be 'step' or 'end', got {kind!r}")
    for key in ("id", "trajectory"):
        value = record.get(key)
        if value.__class__ is not str or not value:
            raise _fail(key, "required (a non-empty string)")
    if kind == STEP:
        index = record.get("index")
        if index.__class__ is not int or index < 0:
            raise _fail("index", "required (an integer >= 0)")
    schema = record.get("schema")
    if schema is not None and (schema.__class__ is not int or schema != SCHEMA_VERSION):
        # A newer writer's record: its fields may mean something else (spec 3.1, 10).
        raise _fail(
            "schema", f"unknown record schema {schema!r}; this build reads {SCHEMA_VERSION}"
        )
    return record


def _loads(line: bytes) -> Any:
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise _fail("", f"not JSON: {exc}") from None


def encode(record: Mapping[str, Any]) -> bytes:
    """Validate and serialise one record to canonical JSON (no newline)."""
    validate(record)
    data = dumps(record)
    if len(data) > MAX_RECORD_BYTES:
        raise _fail("", f"record is {len(data)} bytes, over the {MAX_RECORD_BYTES} limit")
    return data


def make_step(
    *,
    trajectory: str,
    index: int,
    agent: str,
    request: dict[str, Any],
    response: dict[str, Any] | None,
    tokens: dict[str, Any] | None = None,
    protocol: str = "openai.chat",
    status: str = "ok",
    policy_version: int = 0,
    started_at: float | None = None,
    **optional: Any,
) -> dict[str, Any]:
    """Build a step record with defaults filled in; validate with ``validate`` before storing."""
    now = time.time()
    rec: dict[str, Any] = {
        "kind": STEP,
        "schema": SCHEMA_VERSION,
        "id": optional.pop("id", None) or new_id("st"),
        "trajectory": trajectory,
        "index": index,
        "agent": agent,
        "protocol": protocol,
        "status": status,
        "policy_version": policy_version,
        "timings": optional.pop("timings", None)
        or {"started_at": now if started_at is None else started_at, "ended_at": now},
        "request": request,
        "response": response,
        "tokens": tokens or {"source": "none"},
    }
    rec.update({k: v for k, v in optional.items() if v is not None})
    return {k: v for k, v in rec.items() if v is not None}


def make_end(
    *,
    trajectory: str,
    agent: str,
    status: str,
    steps: int,
    reward: float | None = None,
    policy_version: int = 0,
    **optional: Any,
) -> dict[str, Any]:
    """Build a trajectory-end record."""
    rec: dict[str, Any] = {
        "kind": END,
        "schema": SCHEMA_VERSION,
        "id": optional.pop("id", None) or new_id("en"),
        "trajectory": trajectory,
        "agent": agent,
        "status": status,
        "steps": steps,
        "reward": reward,
        "policy_version": policy_version,
        "ended_at": optional.pop("ended_at", None) or time.time(),
    }
    rec.update({k: v for k, v in optional.items() if v is not None})
    return {k: v for k, v in rec.items() if v is not None}


def completion_text(step: Mapping[str, Any]) -> str:
    """The assistant text of a step (message content, or completions text)."""
    resp = step.get("response") or {}
    msg = resp.get("message") or {}
    content = msg.get("content")
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or resp.get("text") or ""
