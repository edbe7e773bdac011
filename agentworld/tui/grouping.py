"""Group arithmetic for the group view: GRPO advantages and shared prefixes, pure functions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentworld import records
from agentworld.group_advantage import group_relative


def grpo_advantages(rewards: Sequence[float | None]) -> list[float | None]:
    """Each member's advantage as ``aw train`` computes it (GRPO: over the sample std).

    Members without a reward get ``None`` and do not count towards the mean.
    """
    present = iter(group_relative([r for r in rewards if r is not None]))
    return [None if r is None else next(present) for r in rewards]


def common_prefix_len(seqs: Sequence[Sequence[Any]]) -> int:
    """Length of the longest prefix every sequence shares."""
    if not seqs:
        return 0
    n = min(len(s) for s in seqs)
    first = seqs[0]
    for i in range(n):
        x = first[i]
        if any(s[i] != x for s in seqs[1:]):
            return i
    return n


def final_sequence(steps: Sequence[dict[str, Any]]) -> tuple[list[Any] | str, str]:
    """What a trajectory finally fed the model: last step's token ids, else its text.

    Returns (sequence, unit) where unit is "tokens" or "chars".
    """
    if not steps:
        return "", "chars"
    last = steps[-1]
    tokens = last.get("tokens") or {}
    if tokens.get("prompt_ids") or tokens.get("completion_ids"):
        return list(tokens.get("prompt_ids") or []) + list(
            tokens.get("completion_ids") or []
        ), "tokens"
    req = last.get("request") or {}
    parts = []
    for m in req.get("messages") or []:
        c = m.get("content")
        parts.append(
            f"{m.get('role')}:{c if isinstance(c, str) else records.dumps({'c': c}).decode()}"
        )
    if req.get("prompt"):
        parts.append(req["prompt"])
    parts.append(records.completion_text(last))
    return "\n".join(parts), "chars"


def shared_prefix(seqs: Sequence[Sequence[Any]]) -> tuple[int, list[float]]:
    """(shared prefix length, each member's shared fraction)."""
    n = common_prefix_len(seqs)
    return n, [n / len(s) if len(s) else 0.0 for s in seqs]
