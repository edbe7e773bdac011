"""The fast record check and the full one give the same verdict and name the same field.

Both are built from ``record_schema``; this holds them to it on every mutation of
valid records: each field (top-level and nested) deleted, set to a value of every
wrong type, set out of range, and joined by an unknown sibling.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any

from agentworld import records
from agentworld.errors import RecordError
from agentworld.record_fast import accepts, doubt
from agentworld.record_schema import (
    END_FIELDS,
    MAX_ID_CHARS,
    MAX_TASK_BYTES,
    STEP_FIELDS,
    TOKEN_ID_MAX,
)
from tests.pool.conftest import end_record, full_step

_DELETE = object()

# Every JSON type, the edges of each range the schema sets, and what JSON cannot hold.
_VALUES: list[Any] = [
    None,
    True,
    0,
    -1,
    TOKEN_ID_MAX + 1,
    2**63,
    -(2**63) - 1,
    1.5,
    -0.5,
    math.nan,
    math.inf,
    -math.inf,
    "",
    "x",
    " x",
    "a/b",
    "a\nb",
    "é",
    "\ud800",
    "x" * (MAX_ID_CHARS + 1),
    "é" * (MAX_ID_CHARS // 2 + 1),
    "t" * (MAX_TASK_BYTES + 1),
    "step",
    "ok",
    "error",
    "done",
    "engine",
    "none",
    "assistant",
    "robot",
    [],
    [1],
    [-0.5],
    [math.nan],
    [True],
    {},
    {"k": 1},
    {"role": "user", "content": "hi"},
    {1, 2},
]


def _paths(obj: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every place in a record: dict keys and list items, depth first."""
    items = (
        obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    )
    for key, child in items:
        yield (*path, key)
        yield from _paths(child, (*path, key))


def _mutations(rec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """``rec`` itself, then mutated in place one place at a time (put back after each
    yield: a deep copy per mutation made this test ten times slower)."""
    yield rec
    for path in list(_paths(rec)):
        parent, key = _get(rec, path[:-1]), path[-1]
        original = parent[key]
        if isinstance(parent, dict):
            del parent[key]
            yield rec
        for value in _VALUES:
            parent[key] = value
            yield rec
        parent[key] = original  # a key put back moves last: record order matters to neither
    for path in [(), *_paths(rec)]:
        obj = _get(rec, path)
        if isinstance(obj, dict):
            obj["surprise"] = 1
            yield rec
            del obj["surprise"]


def _get(rec: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        rec = rec[key]
    return rec


def _full_verdict(rec: Any) -> str | None:
    """The full check alone: None (accepted) or the top-level field its error names."""
    try:
        records.check_fields(rec)
    except RecordError as exc:
        return re.split(r"[.\[]", exc.field, maxsplit=1)[0]
    return None


_BASES = {
    "full step": full_step("tr_1", 0),
    "error step": full_step("tr_1", 1, status="error", error={"type": "t", "message": "m"}),
    "bare step": records.make_step(
        trajectory="tr_2", index=0, agent="a", request={"prompt": "p"}, response={"text": "t"}
    ),
    "end": end_record("tr_1", 2, group="g", metadata={"k": 1}),
    "failed end": end_record("tr_1", 2, status="failed", error={"type": "t", "message": "m"}),
}


def test_fast_and_full_checks_agree_on_every_mutation() -> None:
    refused: dict[str, set[str]] = {"step": set(), "end": set()}
    accepted = 0
    for name, base in _BASES.items():
        before = records.dumps(base)
        for rec in _mutations(base):
            full = _full_verdict(rec)
            assert doubt(rec) == full, (full, rec)
            assert accepts(rec) is (full is None)
            if full is None:
                accepted += 1
            else:
                refused["step" if "step" in name else "end"].add(full)
        assert records.dumps(base) == before, name  # every mutation was put back
    # The corpus had every field of both tables refused (and an unknown one), and kept some.
    for kind, fields in (("step", STEP_FIELDS), ("end", END_FIELDS)):
        assert refused[kind] >= set(fields) - {"kind"} | {"surprise"}, set(fields) - refused[kind]
    assert accepted > 50


def test_records_that_are_not_steps_or_ends() -> None:
    for rec in ([1], "step", None, {}, {"kind": "other"}, {"kind": 1}, {"kind": ["step"]}):
        assert doubt(rec) == _full_verdict(rec)
