"""Two trajectories' conversations aligned message by message, and the words that differ.

Pure functions for the diff screen: a trajectory's conversation once (each step adds
what its prompt did not repeat, then its answer), an alignment of two conversations
(difflib over each message's gist, so a resent message with reserialised tool
arguments still counts as the same), and a word-level diff inside one message pair.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from rich.text import Text

from agentworld.literal import clean
from agentworld.pool import Trajectory
from agentworld.tui.transcript import content_text, message_gist, new_from

RowKind = Literal["same", "changed", "left", "right"]
LEFT_STYLE = "bold white on dark_red"  # words only the left side has
RIGHT_STYLE = "bold white on dark_green"  # words only the right side has
# A word-level diff of two long tool results (whole files) costs seconds; past this
# the pair is compared by lines, which difflib does in milliseconds.
WORD_DIFF_CHARS = 20_000
_WORDS = re.compile(r"\s+|\w+|[^\w\s]")


@dataclass(frozen=True)
class Row:
    """One line of the alignment: a message on each side, or on one side only."""

    kind: RowKind
    left: dict[str, Any] | None
    right: dict[str, Any] | None


def conversation(t: Trajectory) -> list[dict[str, Any]]:
    """Every message of ``t`` once, in order: the first step's prompt, then what each
    later step added (what its prompt did not repeat of the step before, less the
    answer the agent sent back), and each step's answer (an error as a message)."""
    out: list[dict[str, Any]] = []
    prev: dict[str, Any] | None = None
    for step in t.steps:
        req = step.get("request") or {}
        msgs = req.get("messages")
        if isinstance(msgs, list):
            start = new_from(step, prev)
            # new_from points at the previous answer as resent: it is in ``out`` already.
            out.extend(m for m in msgs[start + 1 if start else 0 :] if isinstance(m, dict))
        elif req.get("prompt") is not None:
            out.append({"role": "prompt", "content": req["prompt"]})
        resp = step.get("response") or {}
        if isinstance(resp.get("message"), dict):
            out.append(resp["message"])
        elif resp.get("text") is not None:
            out.append({"role": "assistant", "content": resp["text"]})
        if step.get("error"):
            err = step["error"]
            out.append({"role": "error", "content": f"{err.get('type')}: {err.get('message')}"})
        prev = step
    return out


def align(left: Sequence[dict[str, Any]], right: Sequence[dict[str, Any]]) -> list[Row]:
    """The two conversations side by side: equal messages paired, a replaced run paired
    in order (its surplus on one side only), insertions on their own side."""
    a = [message_gist(m) for m in left]
    b = [message_gist(m) for m in right]
    rows: list[Row] = []
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            rows.extend(
                Row("same", left[i], right[j])
                for i, j in zip(range(i1, i2), range(j1, j2), strict=True)
            )
            continue
        n = min(i2 - i1, j2 - j1)
        rows.extend(Row("changed", left[i1 + k], right[j1 + k]) for k in range(n))
        rows.extend(Row("left", left[i], None) for i in range(i1 + n, i2))
        rows.extend(Row("right", None, right[j]) for j in range(j1 + n, j2))
    return rows


def shared_prefix_rows(rows: Sequence[Row]) -> int:
    """How many rows the two conversations share before they first differ."""
    for i, row in enumerate(rows):
        if row.kind != "same":
            return i
    return len(rows)


def difference_starts(rows: Sequence[Row]) -> list[int]:
    """The row of each difference: the first row of every run of rows that differ."""
    return [
        i
        for i, row in enumerate(rows)
        if row.kind != "same" and (i == 0 or rows[i - 1].kind == "same")
    ]


def message_body(m: dict[str, Any]) -> str:
    """What a message says, as one string: reasoning, content, then its tool calls."""
    parts = []
    if m.get("reasoning"):
        parts.append(f"reasoning: {m['reasoning']}")
    content = content_text(m.get("content"))
    if content:
        parts.append(content)
    for call in m.get("tool_calls") or ():
        if isinstance(call, dict):
            parts.append(f"→ {call.get('name')}({call.get('arguments', '')})")
    return "\n".join(parts)


def _tokens(s: str, by_lines: bool) -> list[str]:
    return s.splitlines(keepends=True) if by_lines else _WORDS.findall(s)


def highlighted_pair(left: str, right: str) -> tuple[Text, Text]:
    """``left`` and ``right`` as literal Text, each with what the other lacks highlighted
    (by words; by lines when the texts are long)."""
    by_lines = len(left) + len(right) > WORD_DIFF_CHARS
    a, b = _tokens(left, by_lines), _tokens(right, by_lines)
    out_a, out_b = Text(), Text()
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        style_a = "" if op == "equal" else LEFT_STYLE
        style_b = "" if op == "equal" else RIGHT_STYLE
        out_a.append(clean("".join(a[i1:i2])), style=style_a)
        out_b.append(clean("".join(b[j1:j2])), style=style_b)
    return out_a, out_b


def role_of(m: dict[str, Any] | None) -> str:
    """A message's role as its header shows it (``name``/``tool_call_id`` included)."""
    if m is None:
        return ""
    role = clean(m.get("role", "?"))
    if m.get("tool_call_id"):
        role += f" ← {clean(m['tool_call_id'])}"
    return role
