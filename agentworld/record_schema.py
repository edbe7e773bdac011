"""The record schema as data: fields, limits and allowed values, defined once.

``records`` (the full check, which names the bad field) and ``record_fast`` (the
hot-path check, which only says "certainly valid" or "look at this field") are both
built from these tables, so a schema change is made here, once, and both follow.
A top-level field's ``rule`` names the check each of them applies; the rules of the
nested objects (request, response, tokens, timings, error) share these key sets
and limits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

SCHEMA_VERSION: Final = 1

STEP: Final = "step"
END: Final = "end"

PROTOCOLS: Final = frozenset(
    {
        "openai.chat",
        "openai.completions",
        "openai.responses",
        "anthropic.messages",
        "whitebox",
        "import",
    }
)
STEP_STATUSES: Final = frozenset({"ok", "error", "cancelled"})
END_STATUSES: Final = frozenset({"done", "failed", "timeout", "cancelled"})
TOKEN_SOURCES: Final = frozenset({"engine", "rendered", "none"})
ROLES: Final = frozenset({"system", "developer", "user", "assistant", "tool"})

MAX_ID_CHARS: Final = 200
MAX_STRING_BYTES: Final = 16 * 1024 * 1024
MAX_TOKENS: Final = 2_000_000
MAX_RECORD_BYTES: Final = 64 * 1024 * 1024
MAX_TOOL_NAME_BYTES: Final = 1024  # a tool call's id or name
MAX_TASK_BYTES: Final = 1024
MAX_KEY_BYTES: Final = 4096  # a free-form JSON object's key
MAX_JSON_DEPTH: Final = 64
MAX_FINISH_REASON_BYTES: Final = 256
MAX_ERROR_TYPE_BYTES: Final = 256
MAX_ERROR_MESSAGE_BYTES: Final = 64 * 1024
TOKEN_ID_MAX: Final = 2**31 - 1
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1

TOOL_CALL_KEYS: Final = frozenset({"id", "name", "arguments", "type"})
MESSAGE_KEYS: Final = frozenset(
    {"role", "content", "name", "tool_calls", "tool_call_id", "reasoning"}
)
TOKENS_KEYS: Final = frozenset({"source", "prompt_ids", "completion_ids", "completion_logprobs"})
REQUEST_KEYS: Final = frozenset({"model", "messages", "prompt", "tools", "params"})
RESPONSE_KEYS: Final = frozenset({"message", "text", "finish_reason", "usage", "id"})
# The usage entries that are counts (readers sum them): never objects, unlike the details.
USAGE_COUNTS: Final = frozenset({"prompt_tokens", "completion_tokens", "total_tokens"})
TIMING_KEYS: Final = frozenset({"started_at", "ended_at", "first_token_s", "upstream_s"})
ERROR_KEYS: Final = frozenset({"type", "message", "status"})


@dataclass(frozen=True, slots=True)
class Field:
    """One top-level field: whether it must be present (not null) and the rule its value
    follows. Rules: ``kind`` (checked before the table), ``schema``, ``ident``, ``count``
    (an int64 >= 0), ``number`` (finite, 64-bit), ``text`` (``arg``: max UTF-8 bytes),
    ``enum`` (``arg``: the allowed strings), ``object`` (free-form JSON object), and the
    nested objects ``timings``, ``request``, ``response``, ``tokens``, ``error``."""

    required: bool
    rule: str
    arg: Any = None


_COMMON: Final = {
    "kind": Field(True, "kind"),
    "schema": Field(True, "schema"),
    "id": Field(True, "ident"),
    "trajectory": Field(True, "ident"),
    "group": Field(False, "ident"),
    "agent": Field(True, "ident"),
    "dataset": Field(False, "ident"),
    "split": Field(False, "ident"),
    "task": Field(False, "text", MAX_TASK_BYTES),
    "policy_version": Field(True, "count"),
    "metadata": Field(False, "object"),
    "error": Field(False, "error"),
    "reward": Field(False, "number"),
}

# Field order is check order: both checks name the first bad field in this order.
STEP_FIELDS: Final[dict[str, Field]] = {
    **_COMMON,
    "index": Field(True, "count"),
    "choice": Field(False, "count"),
    "protocol": Field(True, "enum", PROTOCOLS),
    "status": Field(True, "enum", STEP_STATUSES),
    "timings": Field(True, "timings"),
    "request": Field(True, "request"),
    "response": Field(False, "response"),
    "tokens": Field(True, "tokens"),
    "raw": Field(False, "object"),
}

END_FIELDS: Final[dict[str, Field]] = {
    **_COMMON,
    "status": Field(True, "enum", END_STATUSES),
    "steps": Field(True, "count"),
    "ended_at": Field(True, "number"),
}

FIELDS: Final[dict[str, dict[str, Field]]] = {STEP: STEP_FIELDS, END: END_FIELDS}

# A step's fields required by its status, checked after the table: (status, field).
STEP_REQUIRED_BY_STATUS: Final = (("ok", "response"), ("error", "error"))
