"""Preference pairs from grouped trajectories: the one pairing rule every DPO-style export uses.

Within a group (trajectories answering one task; the task when no group is
recorded), trajectories are ranked by reward and paired from the outside in:
best vs worst, second best vs second worst, and so on. Each trajectory is in
at most one pair, so no response is both chosen and rejected, and a group of
n gives at most n // 2 pairs; pairs whose rewards are equal are left out.
The pair's prompt is the conversation up to the first assistant turn where
the two diverge: that turn is the policy's choice the preference is about.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from agentworld.export.conversation import Segment, same_message, segments
from agentworld.pool import Trajectory


@dataclass(frozen=True)
class Pair:
    """Two responses to one prompt, the better-rewarded first (messages in normalised shape)."""

    group: str
    prompt: list[dict[str, Any]]
    chosen: dict[str, Any]
    rejected: dict[str, Any]
    chosen_tools: list[Any] | None
    rejected_tools: list[Any] | None
    chosen_reward: float
    rejected_reward: float
    chosen_trajectory: str
    rejected_trajectory: str


def group_key(t: Trajectory) -> str | None:
    """What a trajectory is compared within: its group, else its task, else nothing."""
    if t.first("group"):
        return "group:" + t.first("group")
    if t.first("task") is not None:
        return f"task:{t.first('dataset')}:{t.first('task')}"
    return None


def _diverge(better: Segment, worse: Segment) -> int | None:
    """Index of the first assistant turn both sampled where the conversations differ."""
    a, b = better.messages, worse.messages
    i = 0
    while i < min(len(a), len(b)) and same_message(a[i], b[i]):
        i += 1
    if i >= min(len(a), len(b)) or a[i]["role"] != "assistant" or b[i]["role"] != "assistant":
        return None  # diverged on an observation: not a choice of the policy
    if i not in better.sampled or i not in worse.sampled:
        return None
    return i


def preference_pairs(trajs: Iterable[Trajectory], counts: Counter[str]) -> Iterator[Pair]:
    """Pairs of every group, groups in key order; counts say what was left out and why.

    Groups are held in memory (the first conversation and reward of each
    trajectory), since a group's members arrive in no particular order.
    """
    groups: dict[str, list[tuple[float, str, Segment]]] = defaultdict(list)
    for t in trajs:
        counts["trajectories"] += 1
        key, segs = group_key(t), segments(t.steps)
        if key is None or t.reward is None or not segs:
            counts["skipped_ungrouped_or_unrewarded"] += 1
            continue
        groups[key].append((float(t.reward), t.id, segs[0]))
    counts["groups"] += len(groups)
    for key in sorted(groups):
        members = sorted(groups[key], key=lambda x: (-x[0], x[1]))
        if len(members) < 2:
            counts["groups_of_one"] += 1
        for k in range(len(members) // 2):
            (hi_r, hi_id, hi), (lo_r, lo_id, lo) = members[k], members[-1 - k]
            if hi_r <= lo_r:
                counts["pairs_equal_reward"] += 1
                continue
            i = _diverge(hi, lo)
            if i is None:
                counts["pairs_no_common_prompt"] += 1
                continue
            yield Pair(
                group=key.split(":", 1)[1],
                prompt=hi.messages[:i],
                chosen=hi.messages[i],
                rejected=lo.messages[i],
                chosen_tools=hi.tools,
                rejected_tools=lo.tools,
                chosen_reward=hi_r,
                rejected_reward=lo_r,
                chosen_trajectory=hi_id,
                rejected_trajectory=lo_id,
            )
