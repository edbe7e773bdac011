"""Fixtures for pool tests: a fresh pool per test and records that use every field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentworld import records
from agentworld.pool import Pool


@pytest.fixture
def pool(tmp_path: Path) -> Pool:
    p = Pool.create(tmp_path / "pool")
    yield p
    p.close()


def full_step(trajectory: str, index: int, **over: Any) -> dict[str, Any]:
    """A step with every optional field set, including unicode, tools, tokens and raw payloads."""
    rec = records.make_step(
        trajectory=trajectory,
        index=index,
        agent="coder",
        protocol="openai.chat",
        status="ok",
        policy_version=3,
        started_at=1_700_000_000.25 + index,
        request={
            "model": "tiny",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": f'turn {index}: héllo ✓ \u2028 "quoted"'},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "c1", "name": "ls", "arguments": '{"path": "/"}'}],
                    "reasoning": "think",
                },
                {
                    "role": "tool",
                    "content": [{"type": "text", "text": "a b"}],
                    "tool_call_id": "c1",
                },
            ],
            "tools": [{"type": "function", "function": {"name": "ls", "parameters": {}}}],
            "params": {"temperature": 0.7, "max_tokens": 64, "stop": ["\n\n"]},
        },
        response={
            "message": {"role": "assistant", "content": f"answer {index}", "reasoning": "r"},
            "finish_reason": "stop",
            "usage": {"prompt_tokens": 5, "completion_tokens": 3, "details": {"cached": 1}},
            "id": "resp-1",
        },
        tokens={
            "source": "engine",
            "prompt_ids": [1, 2, 3, 4, 5],
            "completion_ids": [7, 8, 2**31 - 1],
            "completion_logprobs": [-0.5, -1e-9, -1e30],
        },
        group="g1",
        dataset="math",
        split="train",
        task="t-17",
        choice=0,
        reward=0.5,
        metadata={"k": [1, 2.5, None, True, {"x": "y"}], "big": 2**63 - 1},
        raw={"request": {"anything": [1, 2]}, "response": {"id": "x"}},
        timings={"started_at": 1.5, "ended_at": 2.5, "first_token_s": 0.1, "upstream_s": 0.9},
    )
    rec.update(over)
    return rec


def end_record(trajectory: str, steps: int, **over: Any) -> dict[str, Any]:
    rec = records.make_end(
        trajectory=trajectory,
        agent="coder",
        status="done",
        steps=steps,
        reward=1.0,
        policy_version=3,
        group="g1",
        dataset="math",
        split="train",
        task="t-17",
        metadata={"why": "solved"},
        ended_at=1_700_000_100.0,
    )
    rec.update(over)
    return rec


def small_step(trajectory: str, index: int) -> dict[str, Any]:
    return records.make_step(
        trajectory=trajectory,
        index=index,
        agent="a",
        request={"messages": [{"role": "user", "content": f"q{index}"}]},
        response={"message": {"role": "assistant", "content": f"a{index}"}},
    )


def write_trajectories(pool: Pool, n: int, steps: int, **writer: Any) -> list[str]:
    """Write ``n`` closed trajectories of ``steps`` small steps; return their ids."""
    ids = []
    with pool.writer(**writer) as w:
        for _ in range(n):
            t = records.new_id("tr")
            ids.append(t)
            for i in range(steps):
                w.append(small_step(t, i))
            w.append(records.make_end(trajectory=t, agent="a", status="done", steps=steps))
    return ids


def close_keeping_sealed_journal(writer: Any, journal: Path) -> bytes:
    """Close ``writer`` and return its journal's bytes as they were once the shard was
    installed, before the journal left ``journals/`` (the state a crash there leaves)."""
    from agentworld.pool import journal as journal_mod

    saved: list[bytes] = []

    def keep(point: str) -> None:
        if point == "shard-installed":
            saved.append(journal.read_bytes())

    journal_mod.fault_hook = keep
    try:
        writer.close()
    finally:
        journal_mod.fault_hook = None
    (data,) = saved
    return data


def run_pool_command(pool: Pool, *args: str) -> Any:
    """`aw pool ARGS --pool POOL` in-process; ``code``: the exit code `aw` gives (an error's,
    as cli.main), ``error``: its message."""
    from typer.testing import CliRunner

    from agentworld.cli import app
    from agentworld.errors import AgentWorldError

    res = CliRunner().invoke(app, ["pool", *args, "--pool", str(pool.root)])
    exc = res.exception
    res.code = exc.exit_code if isinstance(exc, AgentWorldError) else res.exit_code
    res.error = str(exc) if isinstance(exc, AgentWorldError) else ""
    return res
