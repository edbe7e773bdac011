"""What free-text search searches: one definition for the index and for ``Selection.matches``.

The index stores each step's search text and matches it with SQLite's ``LIKE``; a
selection applied without an index (training, export, ``Pool.iter_trajectories``)
matches the same text in Python, with ``LIKE``'s rules: case folded for ASCII letters
only, the words taken literally.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

PREVIEW_CHARS = 240
SEARCH_CHARS = 1_000  # of each message a step's search text takes
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _content_str(c: Any) -> str:
    return c if isinstance(c, str) else orjson.dumps(c).decode() if c else ""


def step_search_text(step: dict[str, Any]) -> str:
    """A step's searchable text, every role: it leads with the last prompt message and
    the response (the list's preview is its start), then the other messages: all of
    them on a trajectory's first step (the system prompt, the task, any history it
    came with), later only those since the last assistant turn (tool results). The
    earlier ones were taken with the step that answered them; taking them again
    would grow the index with the square of the turns."""
    parts = []
    req = step.get("request") or {}
    msgs = [m for m in req.get("messages") or () if isinstance(m, dict)]
    if msgs:
        parts.append(_content_str(msgs[-1].get("content"))[:SEARCH_CHARS])
    elif req.get("prompt"):
        parts.append(req["prompt"][-PREVIEW_CHARS:])
    resp = step.get("response") or {}
    msg = resp.get("message") or {}
    c = msg.get("content")
    parts.append((c if isinstance(c, str) else resp.get("text") or "")[:SEARCH_CHARS])
    for call in msg.get("tool_calls") or ():
        parts.append(f"{call.get('name')}({call.get('arguments', '')[:80]})")
    turns = [i for i, m in enumerate(msgs) if m.get("role") == "assistant"]
    start = turns[-1] + 1 if turns and step.get("index") != 0 else 0
    for m in msgs[start:-1]:
        parts.append(_content_str(m.get("content"))[:SEARCH_CHARS])
    return " | ".join(p for p in parts if p)[: SEARCH_CHARS * 3]


def like_escape(s: str) -> str:
    """``s`` for a ``LIKE ? ESCAPE '\\'`` pattern, taken literally (a ``%`` or ``_`` in
    it is no wildcard)."""
    return s.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def like_pattern(words: str) -> str:
    """``words`` as a ``LIKE ? ESCAPE '\\'`` pattern matching them anywhere, literally."""
    return f"%{like_escape(words)}%"


def text_matches(words: str, texts: Iterable[str]) -> bool:
    """Whether any step's search text contains ``words`` as the index's ``LIKE`` would
    find them (ASCII letters in either case; other characters as they are)."""
    needle = words.translate(_ASCII_LOWER)
    return any(needle in t.translate(_ASCII_LOWER) for t in texts)
