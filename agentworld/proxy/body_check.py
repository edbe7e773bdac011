"""What a request body must be for its step to be recordable, checked before the upstream is called.

A record refuses JSON the wire accepts: integers outside 64 bits, containers nested
deeper than 64 levels, strings over ``records.MAX_STRING_BYTES``. Found only when the
step is written (batched durability: after the agent got its 200), such a body cost
the step. So the body is checked as it arrives, and refused with a 400 naming the
field (``BadRequest.param``, a JSON path such as ``metadata.a.a``).

Cheap on the common body: one walk looks at each value once (depth and integers;
tens of microseconds on an agent's 40-message call), long strings are looked for only
in a body over the string limit.
"""

from __future__ import annotations

from typing import Any

from agentworld.proxy.bad_request import BadRequest
from agentworld.records import MAX_STRING_BYTES

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# A body's containers end up one level down in the record (``raw.request``, ``params``),
# where containers deeper than 64 levels are refused: so at most 62 below the body.
MAX_BODY_DEPTH = 62


def check_body(body: dict[str, Any], raw: bytes) -> None:
    """Raise BadRequest (400, naming the field) when ``body`` (parsed from ``raw``) holds
    what no record can keep."""
    bad = _walk(body, 0)
    if bad is not None:
        path, problem = field_path(bad[0]), bad[1]
        raise BadRequest(f"{path}: {problem} (a step cannot record it)", path)
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


def _walk(v: Any, depth: int) -> tuple[str, str] | None:
    """(path, problem) of the first container nested deeper than MAX_BODY_DEPTH below
    ``v`` (at ``depth``), or integer outside 64 bits, within ``v``; None if there is none.
    One loop over each container's items (every value is looked at once)."""
    items = v.items() if v.__class__ is dict else enumerate(v)
    for k, x in items:
        cls = x.__class__
        if cls is dict or cls is list:
            if depth == MAX_BODY_DEPTH:
                return _part(k), f"nested deeper than {MAX_BODY_DEPTH} levels"
            below = _walk(x, depth + 1)
            if below is not None:
                return _part(k) + below[0], below[1]
        elif cls is int and not _INT64_MIN <= x <= _INT64_MAX:
            return _part(k), "integer outside 64 bits"
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
