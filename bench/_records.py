"""Synthetic agent records for the pool benchmarks: multi-turn chats whose prompts repeat the history."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from agentworld import records

_WORDS = [
    "the",
    "a",
    "file",
    "function",
    "returns",
    "value",
    "error",
    "test",
    "list",
    "python",
    "import",
    "def",
    "class",
    "self",
    "print",
    "result",
    "path",
    "open",
    "read",
    "write",
    "data",
    "json",
    "index",
    "step",
    "agent",
    "tool",
    "call",
    "user",
    "assistant",
    "answer",
    "because",
    "then",
    "with",
    "for",
    "while",
    "if",
    "else",
    "return",
    "none",
    "true",
    "false",
]


def _text(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n_words))


def interleaved_steps(
    n_trajectories: int,
    turns: int,
    *,
    concurrent: int = 64,
    seed: int = 0,
    words: int = 60,
    tokens: bool = True,
) -> Iterator[dict[str, Any]]:
    """Steps (and end records) of ``n_trajectories`` chats of ``turns`` turns, ``concurrent``
    of them interleaved round-robin as a busy proxy would write them."""
    rng = random.Random(seed)
    for start in range(0, n_trajectories, concurrent):
        batch = []
        for _ in range(min(concurrent, n_trajectories - start)):
            tid = records.new_id("tr")
            msgs = [
                {"role": "system", "content": "You are a careful coding agent. " + _text(rng, 40)},
                {"role": "user", "content": _text(rng, words)},
            ]
            batch.append((tid, msgs))
        for turn in range(turns):
            for tid, msgs in batch:
                answer = _text(rng, words)
                n_prompt = sum(len(str(m.get("content") or "")) for m in msgs) // 4
                yield records.make_step(
                    trajectory=tid,
                    index=turn,
                    agent="coder",
                    dataset="swe",
                    task=f"task-{start}",
                    request={
                        "model": "policy",
                        "messages": list(msgs),
                        "params": {"temperature": 1.0},
                    },
                    response={
                        "message": {"role": "assistant", "content": answer},
                        "finish_reason": "stop",
                        "usage": {"prompt_tokens": n_prompt, "completion_tokens": words},
                    },
                    tokens={
                        "source": "engine",
                        "prompt_ids": [rng.randrange(50000) for _ in range(min(n_prompt, 64))],
                        "completion_ids": [rng.randrange(50000) for _ in range(words)],
                        "completion_logprobs": [-rng.random() for _ in range(words)],
                    }
                    if tokens
                    else None,
                )
                msgs.append({"role": "assistant", "content": answer})
                msgs.append(
                    {"role": "tool", "content": _text(rng, words // 2), "tool_call_id": "c"}
                )
        for tid, _ in batch:
            yield records.make_end(
                trajectory=tid, agent="coder", status="done", steps=turns, reward=1.0
            )
