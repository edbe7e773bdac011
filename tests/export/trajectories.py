"""Linear multi-turn tool-using trajectories with chained engine token ids, as the proxy records them."""

from __future__ import annotations

import json
from typing import Any

from agentworld import records
from agentworld.pool import Pool

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calc",
            "description": "Evaluate arithmetic.",
            "parameters": {"type": "object", "properties": {"e": {"type": "string"}}},
        },
    }
]


def trajectory_records(
    tid: str,
    *,
    answer: str,
    reward: float | None,
    group: str = "g1",
    task: str = "t1",
    turns: int = 2,
    engine: bool = True,
    named_tools: bool = False,
) -> list[dict[str, Any]]:
    """A conversation of ``turns`` tool calls then a final answer; prompt ids chain exactly."""
    common = {"agent": "calc", "dataset": "arith", "split": "train", "task": task, "group": group}
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "Use the calc tool."},
        {"role": "user", "content": f"Task {task}: what is 1+2+3?"},
    ]
    seq = [1, 2, 3, 4]
    out = []
    for i in range(turns + 1):
        if i < turns:
            args = json.dumps({"e": f"{i}+1"})
            call = {"id": f"call_{i}", "name": "calc", "arguments": args}
            message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call]}
        else:
            message = {"role": "assistant", "content": f"The answer is {answer}."}
        completion = [100 + i, 200 + i, 300 + len(answer) * (i == turns)]
        tokens = (
            {
                "source": "engine",
                "prompt_ids": list(seq),
                "completion_ids": completion,
                "completion_logprobs": [-0.5, -0.25, -0.125],
            }
            if engine
            else None
        )
        out.append(
            records.make_step(
                id=f"{tid}_s{i}",
                trajectory=tid,
                index=i,
                request={"model": "tiny", "messages": list(msgs), "tools": TOOLS},
                response={
                    "message": message,
                    "finish_reason": "stop",
                    "usage": {"prompt_tokens": len(seq), "completion_tokens": 3},
                },
                tokens=tokens,
                policy_version=2,
                **common,
            )
        )
        msgs.append(message)
        seq = seq + completion
        if i < turns:
            result = {"role": "tool", "tool_call_id": f"call_{i}", "content": str(i + 1)}
            msgs.append({**result, "name": "calc"} if named_tools else result)
            seq = [*seq, 50 + i]
    out.append(
        records.make_end(
            trajectory=tid,
            status="done",
            steps=turns + 1,
            reward=reward,
            policy_version=2,
            metadata={"ground_truth": "6"},
            **common,
        )
    )
    return out


def fill(pool: Pool, specs: list[dict[str, Any]]) -> None:
    """Write trajectories (kwargs of trajectory_records, plus ``tid``) and seal them."""
    with pool.writer() as w:
        for spec in specs:
            spec = dict(spec)
            for rec in trajectory_records(spec.pop("tid"), **spec):
                w.append(rec)


def standard(pool: Pool) -> None:
    """Two groups of two: in each, one right (reward 1) and one wrong (reward 0) answer."""
    fill(
        pool,
        [
            {"tid": "tr_a1", "answer": "6", "reward": 1.0, "group": "g1", "task": "t1"},
            {"tid": "tr_a2", "answer": "7", "reward": 0.0, "group": "g1", "task": "t1"},
            {"tid": "tr_b1", "answer": "6", "reward": 1.0, "group": "g2", "task": "t2"},
            {"tid": "tr_b2", "answer": "5", "reward": 0.0, "group": "g2", "task": "t2"},
        ],
    )


def orphan_records(tid: str) -> list[dict[str, Any]]:
    """A trajectory whose first prompt holds a tool result with no call before it."""
    common = {"agent": "calc", "dataset": "arith", "split": "train", "task": "t9", "group": "g9"}
    prompt = [
        {"role": "user", "content": "What did the tool say?"},
        {"role": "tool", "tool_call_id": "orphan", "content": "42"},
    ]
    return [
        records.make_step(
            id=f"{tid}_s0",
            trajectory=tid,
            index=0,
            request={"model": "tiny", "messages": prompt, "tools": TOOLS},
            response={"message": {"role": "assistant", "content": "It said 42."}},
            **common,
        ),
        records.make_end(trajectory=tid, status="done", steps=1, reward=1.0, **common),
    ]
