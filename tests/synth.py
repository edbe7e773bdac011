"""Synthetic multi-turn trajectories in the shape the proxy records, for the tests."""

from __future__ import annotations

from typing import Any

from agentworld import records
from agentworld.pool import Pool


def conversation_step(
    trajectory: str, index: int, *, agent: str = "math", turns: int | None = None, **kw: Any
) -> dict[str, Any]:
    """A realistic tool-using step whose prompt repeats the conversation so far."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You solve arithmetic with the calc tool."},
        {"role": "user", "content": f"What is {index} + 40 in trajectory {trajectory}?"},
    ]
    for i in range(index if turns is None else turns):
        msgs.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": f"call_{i}", "name": "calc", "arguments": f'{{"e": "{i}+40"}}'}
                ],
            }
        )
        msgs.append({"role": "tool", "tool_call_id": f"call_{i}", "content": str(i + 40)})
    return records.make_step(
        trajectory=trajectory,
        index=index,
        agent=agent,
        request={"model": "m", "messages": msgs, "params": {"temperature": 1.0}},
        response={
            "message": {"role": "assistant", "content": f"The answer is {index + 40}."},
            "finish_reason": "stop",
            "usage": {"prompt_tokens": 20 + 4 * index, "completion_tokens": 6},
        },
        tokens={
            "source": "engine",
            "prompt_ids": list(range(20 + 4 * index)),
            "completion_ids": [5, 6, 7, 8, 9, 10],
            "completion_logprobs": [-0.5, -0.25, -0.125, -1.0, -2.0, -0.01],
        },
        **kw,
    )


def fill_pool(pool: Pool, trajectories: int = 4, steps: int = 3, **kw: Any) -> list[str]:
    """Write complete trajectories (steps + end) and seal them; return trajectory ids."""
    ids = []
    with pool.writer() as w:
        for t in range(trajectories):
            tid = f"tr_{t:04d}"
            ids.append(tid)
            for i in range(steps):
                w.append(conversation_step(tid, i, dataset="arith", group=f"g{t // 2}", **kw))
            w.append(
                records.make_end(
                    trajectory=tid,
                    agent="math",
                    status="done",
                    steps=steps,
                    reward=float(t % 2),
                    dataset="arith",
                    group=f"g{t // 2}",
                )
            )
    return ids
