"""Find the final answer in a model's reply: 'Final answer: X', '#### X', \\boxed{X}, else the last line."""

from __future__ import annotations

import re

_MARKERS = (
    re.compile(r"\\boxed\{([^{}]*)\}"),
    re.compile(r"(?im)^\s*#{4}\s*(.+?)\s*$"),
    re.compile(r"(?i)final answer\s*(?:is)?\s*[:=]?\s*(.+)"),
    re.compile(r"(?i)\banswer\s*(?:is)?\s*[:=]\s*(.+)"),
)


def extract_final_answer(text: str | None) -> str | None:
    """The answer the reply commits to, stripped of markup and a trailing period."""
    if not text or not text.strip():
        return None
    for pattern in _MARKERS:
        found = pattern.findall(text)
        if found:
            return _clean(found[-1])
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return _clean(lines[-1])


def _clean(answer: str) -> str:
    answer = answer.strip().strip("*`").strip()
    return answer[:-1].rstrip() if answer.endswith(".") else answer
