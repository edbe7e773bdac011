"""Token-id arrays kept as the JSON bytes they arrived in, never turned into Python ints.

An agent with a long context sends the whole conversation on every call, and
an engine that returns ``prompt_token_ids`` sends tens of thousands of ids
back each time. Parsing them into Python ints, checking them and rendering
them again for the pool cost more CPU than everything else the proxy does
for that call. ``RawIds`` carries such an array through as bytes: it is
checked once, with a few C-speed passes over the bytes, when it is made;
record validation takes it as a valid id list; ``dumps`` (and ``default``
for any ``orjson.dumps``) writes the bytes back unchanged. Anything that
needs the numbers calls ``tolist()``.

Only the canonical form is taken (``[1,2,3]``: no whitespace, no leading
zeros, every id below 10^9, so in [0, 2^31)); anything else is not made into
a RawIds, and the caller parses it the ordinary way.
"""

from __future__ import annotations

from typing import Any

import orjson


class RawIds:
    """A JSON array of token ids as bytes (``json``), with its length."""

    __slots__ = ("_fragment", "count", "json")

    def __init__(self, json: bytes, count: int) -> None:
        """Trusted constructor: use ``from_json`` for bytes that were not checked."""
        self.json = json
        self.count = count
        self._fragment = orjson.Fragment(json)

    @classmethod
    def from_json(cls, data: bytes, max_count: int) -> RawIds | None:
        """The ids of ``data`` if it is a canonical JSON array of at most ``max_count``
        ids below 10^9, else None (the caller parses it as JSON instead)."""
        if len(data) < 2 or data[0] != 0x5B or data[-1] != 0x5D:  # [ ... ]
            return None
        if len(data) == 2:
            return cls(b"[]", 0)
        if len(data) > 10 * max_count + 1:  # over max_count ids for sure (each takes <= 10 bytes)
            return None
        count = _count_canonical(data[1:-1])
        if count is None or count > max_count:
            return None
        return cls(bytes(data), count)

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return self.count > 0

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RawIds):
            return self.json == other.json
        if isinstance(other, list):
            return self.tolist() == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # like the list it stands for

    def __repr__(self) -> str:
        return f"RawIds({self.count} ids)"

    def tolist(self) -> list[int]:
        return orjson.loads(self.json)


def _count_canonical(inner: bytes) -> int | None:
    """How many ids ``inner`` (an array's bytes between the brackets) holds, or None
    unless it is ids below 10^9 in canonical form: ``1,22,0,333``.

    A dozen vectorised passes over the bytes (numpy): a byte loop in Python, or even
    ``bytes`` methods, cost as much as parsing the ids would.
    """
    import numpy as np  # here: records (and so every `aw` command) import this module

    a = np.frombuffer(inner, dtype=np.uint8)
    digit = (a - 48) < 10  # uint8 wraps: every byte below "0" becomes large
    comma = a == 44
    if not (digit | comma).all():  # no bools, floats, signs, nulls, strings, nesting, spaces
        return None
    if comma[0] or comma[-1] or (comma[1:] & comma[:-1]).any():  # an empty element
        return None
    start = np.empty_like(comma)  # where each element starts
    start[0] = True
    start[1:] = comma[:-1]
    if (start[:-1] & (a[:-1] == 48) & digit[1:]).any():  # a leading zero
        return None
    run = digit[:-1] & digit[1:]  # two digits in a row start here
    run = run[:-2] & run[2:]  # four
    run = run[:-4] & run[4:]  # eight
    run = run[:-2] & run[2:]  # ten: an id of 10^9 or more (the parser judges those)
    if run.any():
        return None
    return int(np.count_nonzero(comma)) + 1


def default(obj: Any) -> Any:
    """``orjson.dumps(..., default=default)``: writes a RawIds as its bytes."""
    if obj.__class__ is RawIds:
        return obj._fragment
    raise TypeError(f"Type is not JSON serializable: {type(obj).__name__}")


def dumps(obj: Any, option: int = 0) -> bytes:
    """``orjson.dumps`` that writes RawIds back as the bytes they came in."""
    return orjson.dumps(obj, default=default, option=option)
