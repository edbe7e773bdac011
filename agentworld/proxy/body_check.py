"""What a request body must be for its step to be recordable, checked before the upstream is called.

A record refuses JSON the wire accepts: integers outside 64 bits, containers nested
deeper than 64 levels, strings over ``records.MAX_STRING_BYTES``. Found only when the
step is written (batched durability: after the agent got its 200), such a body cost
the step. So the body is checked as it arrives, and refused with a 400 naming the
field (``BadRequest.param``, a JSON path such as ``metadata.a.a``).

Cheap on the common body: big integers are looked for only when the raw bytes hold
a run of 19 digits, long strings only in a body over the string limit; the depth
walk visits containers only (tens of microseconds on an agent's 40-message call).
"""

from __future__ import annotations

import re
from typing import Any

from agentworld.proxy.protocols import BadRequest
from agentworld.records import MAX_STRING_BYTES

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# A body's containers end up one level down in the record (``raw.request``, ``params``),
# where containers deeper than 64 levels are refused: so at most 62 below the body.
MAX_BODY_DEPTH = 62
_LONG_NUMBER = re.compile(rb"\d{19}")  # 2**63 has 19 digits: nothing shorter is out of range


def check_body(body: dict[str, Any], raw: bytes) -> None:
    """Raise BadRequest (400, naming the field) when ``body`` (parsed from ``raw``) holds
    what no record can keep."""
    deep = _too_deep(body, 0)
    if deep is not None:
        deep = field_path(deep)
        raise BadRequest(
            f"{deep}: nested deeper than {MAX_BODY_DEPTH} levels (a step cannot record it)", deep
        )
    if _LONG_NUMBER.search(raw) is not None:
        big = _find(body, lambda v: type(v) is int and not _INT64_MIN <= v <= _INT64_MAX)
        if big is not None:
            big = field_path(big)
            raise BadRequest(f"{big}: integer outside 64 bits (a step cannot record it)", big)
    if len(raw) > MAX_STRING_BYTES:
        long = _find(
            body,
            lambda v: (
                type(v) is str and len(v) * 4 > MAX_STRING_BYTES and _utf8_len(v) > MAX_STRING_BYTES
            ),
        )
        if long is not None:
            long = field_path(long)
            raise BadRequest(
                f"{long}: string over {MAX_STRING_BYTES} bytes (a step cannot record it)", long
            )


def _utf8_len(s: str) -> int:
    return len(s) if s.isascii() else len(s.encode("utf-8", "surrogatepass"))


def _too_deep(v: Any, depth: int) -> str | None:
    """The path of a container nested deeper than MAX_BODY_DEPTH below ``v`` (at ``depth``)."""
    items = v.items() if v.__class__ is dict else enumerate(v)
    for k, x in items:
        if x.__class__ is dict or x.__class__ is list:
            if depth == MAX_BODY_DEPTH:
                return _part(k)
            below = _too_deep(x, depth + 1)
            if below is not None:
                return _part(k) + below
    return None


def _find(v: Any, bad: Any) -> str | None:
    """The path of the first value within ``v`` (a container) that ``bad`` picks, if any."""
    items = v.items() if v.__class__ is dict else enumerate(v)
    for k, x in items:
        if x.__class__ is dict or x.__class__ is list:
            below = _find(x, bad)
            if below is not None:
                return _part(k) + below
        elif bad(x):
            return _part(k)
    return None


def _part(key: Any) -> str:
    return f"[{key}]" if key.__class__ is int else f".{key}"


def field_path(path: str) -> str:
    """A path from ``_too_deep``/``_find`` as a field name (no leading dot)."""
    return path[1:] if path.startswith(".") else path
