"""verl's RL dataset Parquet: one row per task, for re-rolling the pool's tasks in verl.

verl's trainer reads ``data_source``, ``prompt`` (a chat list), ``ability``,
``reward_model`` ``{style, ground_truth}`` and ``extra_info``; the reward
function is picked by ``data_source``. The prompt is the first call's
messages (the task as the agent saw it); the ground truth is the dataset's
reference answer that ``aw run`` records as ``metadata.ground_truth`` (never the
agent's own ``metadata.answer``); tasks without one get ``""`` and are counted
as ``tasks_without_ground_truth``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

import orjson

from agentworld.export.conversation import content_text
from agentworld.export.select import ground_truth
from agentworld.export.tabular import import_pyarrow
from agentworld.pool import Trajectory


def schema() -> Any:
    pa = import_pyarrow()
    return pa.schema(
        [
            ("data_source", pa.string()),
            ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
            ("ability", pa.string()),
            (
                "reward_model",
                pa.struct([("style", pa.string()), ("ground_truth", pa.string())]),
            ),
            (
                "extra_info",
                pa.struct(
                    [
                        ("split", pa.string()),
                        ("index", pa.int64()),
                        ("task", pa.string()),
                        ("agent", pa.string()),
                        ("trajectories", pa.int64()),
                        ("mean_reward", pa.float64()),
                    ]
                ),
            ),
        ]
    )


def rows(
    trajs: Iterable[Trajectory],
    counts: Counter[str],
    *,
    ability: str | None = None,
    data_source: str | None = None,
) -> Iterator[dict[str, Any]]:
    """One row per (dataset, split, task); trajectories of the same task are folded into it."""
    tasks: dict[tuple[Any, ...], dict[str, Any]] = {}
    rewards: dict[tuple[Any, ...], list[float]] = {}
    for t in trajs:
        counts["trajectories"] += 1
        first = next((s for s in t.steps if (s.get("request") or {}).get("messages")), None)
        if first is None:
            counts["skipped_no_chat_prompt"] += 1
            continue
        key = (t.first("dataset"), t.first("split"), t.first("task") or t.id)
        if t.reward is not None:
            rewards.setdefault(key, []).append(float(t.reward))
        if key in tasks:
            if tasks[key]["reward_model"]["ground_truth"] == "":
                tasks[key]["reward_model"]["ground_truth"] = _gt(t)
            continue
        prompt = [
            {"role": m["role"], "content": content_text(m.get("content"))}
            for m in first["request"]["messages"]
        ]
        tasks[key] = {
            "data_source": data_source or t.first("dataset") or t.first("agent"),
            "prompt": prompt,
            "ability": ability or t.first("agent"),
            "reward_model": {"style": "rule", "ground_truth": _gt(t)},
            "extra_info": {
                "split": t.first("split"),
                "index": len(tasks),
                "task": key[2],
                "agent": t.first("agent"),
            },
        }
    for key, row in tasks.items():
        rs = rewards.get(key, [])
        row["extra_info"]["trajectories"] = len(rs)
        row["extra_info"]["mean_reward"] = sum(rs) / len(rs) if rs else None
        if row["reward_model"]["ground_truth"] == "":
            counts["tasks_without_ground_truth"] += 1
        counts["tasks"] += 1
        yield row


def _gt(t: Trajectory) -> str:
    gt = ground_truth(t)
    if gt is None:
        return ""
    return gt if isinstance(gt, str) else orjson.dumps(gt).decode()
