"""Rewards: turn an agent's final answer and its task into a number.

Built-in scorers are exact, numeric (with tolerance), regex, and the task's
own verifier (reasoning-gym's score_answer); any ``module:function`` taking
``(answer, task)`` and returning a number (or awaitable of one) works too.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Awaitable, Callable
from typing import Any

from agentworld.config import DatasetConfig, ScorerConfig, resolve_callable
from agentworld.run.tasks import Task

Scorer = Callable[[str | None, Task], Awaitable[float]]

# Numbers as people write them in answers: -1,234.5 / 3.0e-2 / $12 / 45%.
_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+")


def last_number(text: str) -> float | None:
    """The last number written in ``text`` (commas as thousands separators), or None."""
    found = _NUMBER.findall(text)
    if not found:
        return None
    try:
        return float(found[-1].replace(",", ""))
    except ValueError:
        return None


def score_exact(answer: str | None, expected: Any, *, ignore_case: bool = False) -> float:
    """1.0 when the stripped answer equals the expected answer, else 0.0."""
    if answer is None or expected is None:
        return 0.0
    a, e = answer.strip(), str(expected).strip()
    if ignore_case:
        a, e = a.casefold(), e.casefold()
    return 1.0 if a == e else 0.0


def score_numeric(
    answer: str | None, expected: Any, *, tolerance: float = 1e-6, relative_tolerance: float = 0.0
) -> float:
    """1.0 when the last number in the answer is within tolerance of the expected number."""
    if answer is None or expected is None:
        return 0.0
    want = float(expected) if isinstance(expected, (int, float)) else last_number(str(expected))
    got = last_number(answer)
    if want is None or got is None or not math.isfinite(got):
        return 0.0
    return 1.0 if math.isclose(got, want, rel_tol=relative_tolerance, abs_tol=tolerance) else 0.0


def score_regex(
    answer: str | None, expected: Any, *, pattern: str, ignore_case: bool = False
) -> float:
    """Extract with ``pattern`` (group 1 if it has groups, else the match) and compare exactly.

    With no expected answer, a match alone scores 1.0.
    """
    if answer is None:
        return 0.0
    m = re.search(pattern, answer, re.IGNORECASE if ignore_case else 0)
    if m is None:
        return 0.0
    if expected is None:
        return 1.0
    got = m.group(1) if m.re.groups else m.group(0)
    return score_exact(got or "", expected, ignore_case=ignore_case)


def make_scorer(dataset: DatasetConfig) -> Scorer:
    """The dataset's scorer as one async callable; user functions are resolved now."""
    cfg: ScorerConfig = dataset.scorer
    if cfg.type == "python":
        fn = resolve_callable(cfg.function or "", dataset.where, "scorer.function")

        async def user(answer: str | None, task: Task) -> float:
            value = fn(answer, task)
            if inspect.isawaitable(value):
                value = await value
            return _as_reward(value, cfg.function or "")

        return user

    def builtin(answer: str | None, task: Task) -> float:
        if cfg.type == "exact":
            return score_exact(answer, task.answer, ignore_case=cfg.ignore_case)
        if cfg.type == "numeric":
            return score_numeric(
                answer,
                task.answer,
                tolerance=cfg.tolerance,
                relative_tolerance=cfg.relative_tolerance,
            )
        if cfg.type == "regex":
            return score_regex(
                answer, task.answer, pattern=cfg.pattern or "", ignore_case=cfg.ignore_case
            )
        if task.verify is None:
            raise ValueError(
                f"task {task.id!r} has no verifier (scorer 'verifier' needs reasoning-gym)"
            )
        return _as_reward(
            task.verify(answer.strip() if answer else answer, task.entry), "score_answer"
        )

    async def scorer(answer: str | None, task: Task) -> float:
        return builtin(answer, task)

    return scorer


def _as_reward(value: Any, what: str) -> float:
    if isinstance(value, bool):
        return float(value)
    if not isinstance(value, (int, float)):
        raise TypeError(f"{what} returned {type(value).__name__}, not a number")
    if not math.isfinite(value):
        raise ValueError(f"{what} returned {value}")
    return float(value)
