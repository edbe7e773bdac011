"""`aw run` on a real tiny model: `aw serve`'s engine, the real in-process proxy, real agents."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from aw_run_fakes import CLI_AGENT, PYTHON, tasks_jsonl, write

from agentworld.pool import Pool
from agentworld.run.session import RunOptions, run_session
from agentworld.serve.engine import Engine
from agentworld.serve.server import make_app
from agentworld.serve.tiny import make_tiny_model


@pytest.fixture
async def tiny_server(tmp_path: Path) -> AsyncIterator[str]:
    engine = Engine(make_tiny_model(tmp_path / "tiny"), device="cpu", max_batch_size=8)
    runner = web.AppRunner(make_app(engine), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    finally:
        await runner.cleanup()
        engine.close()


@pytest.mark.timeout(300)
async def test_command_and_python_agents_on_a_tiny_model(tmp_path: Path, tiny_server: str) -> None:
    tasks_jsonl(tmp_path / "tasks.jsonl", [("Compute 2 + 3?", "5"), ("Compute 4 * 5?", "20")])
    datasets = write(
        tmp_path / "datasets.toml",
        '[datasets.arith]\nsource = { type = "jsonl" }\nsplits = { test = "tasks.jsonl" }\n'
        'scorer = "numeric"\n',
    )
    upstream = f'upstream = "{tiny_server}"\nmodel = "default"\nengine = "vllm"\n'
    params = "params = { temperature = 1.0, max_tokens = 8 }\n"
    agents = write(
        tmp_path / "agents.toml",
        f'[agents.cli]\nkind = "command"\ncommand = ["{PYTHON}", "{CLI_AGENT}"]\n'
        + upstream
        + params
        + '[agents.math]\nkind = "python"\nfunction = "agentworld.run.agents.math_agent:solve"\n'
        + "max_turns = 2\n"
        + upstream
        + params
        + f'[agents.crash]\nkind = "command"\ncommand = ["{PYTHON}", "-c", "raise SystemExit(2)"]\n'
        + upstream,
    )
    pool = tmp_path / "pool"
    results = {}
    for agent in ("cli", "math", "crash"):
        report, summary = await run_session(
            RunOptions(
                agent=agent,
                dataset="arith",
                agents_path=agents,
                datasets_path=datasets,
                n=2,
                pool=pool,
                environ={"PATH": os.environ.get("PATH", "")},
            )
        )
        results[agent] = report
        assert summary["trajectories"] == 4
    assert {r.status for r in results["cli"].results} == {"done"}
    assert {r.status for r in results["math"].results} == {"done"}
    assert {r.status for r in results["crash"].results} == {"failed"}

    idx = Pool.open(pool).index()
    for agent in ("cli", "math"):
        rows = [t for t in idx.trajectories(limit=None) if t["agent"] == agent]
        assert len(rows) == 4 and len({t["group"] for t in rows}) == 2  # a group per task
        for t in rows:
            steps = idx.steps(t["id"])
            assert steps, t["id"]
            # Every call went through the proxy to the real engine: exact token ids.
            assert {s["token_source"] for s in steps} == {"engine"}
            assert all(s["completion_tokens"] for s in steps)
    crashed = [t for t in idx.trajectories(limit=None) if t["agent"] == "crash"]
    assert {t["status"] for t in crashed} == {"failed"}


@pytest.mark.timeout(300)
async def test_a_seeded_run_samples_the_same_rollouts_again(
    tmp_path: Path, tiny_server: str
) -> None:
    """`aw run --seed`: at temperature 1 on the real engine, a rerun with the seed samples
    every rollout's tokens again, though the episodes run concurrently (batched in whatever
    order they come); a group's rollouts still differ, and so does another seed's run."""
    tasks_jsonl(tmp_path / "tasks.jsonl", [("Compute 2 + 3?", "5"), ("Compute 4 * 5?", "20")])
    datasets = write(
        tmp_path / "datasets.toml",
        '[datasets.arith]\nsource = { type = "jsonl" }\nsplits = { test = "tasks.jsonl" }\n'
        'scorer = "numeric"\n',
    )
    agents = write(
        tmp_path / "agents.toml",
        '[agents.math]\nkind = "python"\nfunction = "agentworld.run.agents.math_agent:solve"\n'
        f'max_turns = 2\nupstream = "{tiny_server}"\nmodel = "default"\nengine = "vllm"\n'
        "params = { temperature = 1.0, max_tokens = 12 }\n",
    )

    async def sampled(seed: int | None, name: str) -> dict[tuple[str, int, int], tuple[int, ...]]:
        pool = tmp_path / name
        opts = RunOptions(
            agent="math", dataset="arith", agents_path=agents, datasets_path=datasets, n=4,
            pool=pool, seed=seed,
        )  # fmt: skip
        report, _ = await run_session(opts)
        assert {r.status for r in report.results} == {"done"}
        records = list(Pool.open(pool).iter_records())
        episode = {
            r["trajectory"]: (r["task"], r["metadata"]["rollout"])
            for r in records
            if r["kind"] == "end"
        }
        return {
            (*episode[r["trajectory"]], r["index"]): tuple(r["tokens"]["completion_ids"])
            for r in records
            if r["kind"] == "step"
        }

    first, again = await sampled(3, "a"), await sampled(3, "b")
    assert len(first) >= 8 and first == again
    groups: dict[str, set[tuple[int, ...]]] = {}
    for (task, _rollout, index), ids in first.items():
        if index == 0:
            groups.setdefault(task, set()).add(ids)
    assert all(len(samples) > 1 for samples in groups.values()), groups
    assert await sampled(4, "c") != first
    assert await sampled(None, "d") != first
