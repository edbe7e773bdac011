"""`aw demo` runs the whole loop (serve, evaluate, GRPO iterations through the proxy, reload,
evaluate) on a tiny model; its task split and its tables are checked on their own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from agentworld import demo
from agentworld.cli import app
from agentworld.config import load_datasets
from agentworld.demo import tasks as demo_tasks
from agentworld.pool import Pool
from agentworld.run.tasks import load_tasks
from agentworld.serve import engine as engine_module
from agentworld.serve.engine import resolve_device, resolve_dtype
from agentworld.serve.tiny import make_tiny_model


def even_length(answer: str | None, task: object) -> float:
    """A scorer a random model can vary on: 1.0 for an answer of even length."""
    return 1.0 if answer and len(answer) % 2 == 0 else 0.0


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_demo_evaluates_trains_for_iterations_and_prints_the_lift(
    monkeypatch, tmp_path: Path
) -> None:
    # The tiny random model never writes the right number: score something it varies on,
    # so GRPO's groups carry signal and the policy version moves.
    monkeypatch.setattr(
        demo_tasks, "SCORER", '{ type = "python", function = "tests.test_demo:even_length" }'
    )
    model = make_tiny_model(tmp_path / "tiny")
    folder = tmp_path / "demo"
    args = ["demo", "--dir", str(folder), "--model", str(model), "--eval-tasks", "4"]
    args += ["--iterations", "2", "--tasks", "2", "-n", "4", "--max-tokens", "8"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    device = "cuda" if torch.cuda.is_available() else "cpu"
    assert f"engine on {device} (float32)" in res.output
    # What it prints: the curve, the before/after table with standard errors, the lift.
    assert "iteration 1/2: reward " in res.output and "iteration 2/2: reward " in res.output
    assert "GRPO iterations: training reward by policy version" in res.output
    assert "held-out success" in res.output and "± SE" in res.output
    assert "before (v0)" in res.output
    assert "lift: " in res.output and "standard errors" in res.output
    assert "aw tui --pool" in res.output

    results = json.loads((folder / "results.json").read_text())
    rows = results["iterations"]
    assert [r["iteration"] for r in rows] == [1, 2]
    assert all(r["rollouts"] == 8 and r["groups"] == 2 for r in rows)
    # Versions only move forward, one per trained iteration, and the after-evaluation
    # ran on the last one.
    versions = [0] + [r["policy_version"] for r in rows]
    assert versions == sorted(versions)
    trained = sum(1 for r in rows if not r["skipped"])
    assert trained >= 1 and versions[-1] == trained
    assert results["after"]["policy_version"] == versions[-1]
    assert results["before"]["n"] == results["after"]["n"] == 4
    assert results["cpu_s"] > 0

    pool = Pool.open(folder / "pool")
    idx = pool.index()
    trajectories = idx.trajectories(limit=None)
    assert len(trajectories) == 4 + 2 * 2 * 4 + 4  # eval, 2 iterations of 2 groups of 4, eval
    assert {t["status"] for t in trajectories} == {"done"}
    assert len({t["group"] for t in trajectories if t["agent"] == demo_tasks.TRAIN_AGENT}) == 4
    stats = idx.stats()
    assert stats["engine_token_steps"] == stats["steps"] > 0
    # Superseded checkpoints are deleted: only the policy the server holds is kept.
    kept = [p for p in (folder / "runs" / "grpo").rglob("meta.json")]
    assert len(kept) <= 1
    pool.close()

    # Run again in the same folder: this run's iteration trains on its own groups only,
    # and the first run is kept aside as it was.
    args[args.index("--iterations") + 1] = "1"
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "the run before this one" in res.output
    (earlier,) = (folder / "earlier").iterdir()
    assert len(Pool.open(earlier / "pool").index().trajectories(limit=None)) == len(trajectories)
    again = Pool.open(folder / "pool").index().trajectories(limit=None)
    assert len(again) == 4 + 1 * 2 * 4 + 4
    (row,) = json.loads((folder / "results.json").read_text())["iterations"]
    assert row["skipped"] or row["trained_trajectories"] <= 2 * 4


def test_demo_tasks_hold_out_questions_never_trained_on(tmp_path: Path) -> None:
    split = demo_tasks.write_demo_files(
        tmp_path,
        upstream="http://127.0.0.1:1/v1",
        eval_tasks=100,
        iterations=8,
        tasks_per_iteration=4,
        max_tokens=24,
        temperature=1.0,
        seed=7,
    )
    assert (split.heldout, split.train_pool, split.reused) == (100, 100, False)
    ds = load_datasets(tmp_path / "datasets.toml")[demo_tasks.DATASET]
    heldout = {t.prompt for t in load_tasks(ds, "heldout")}
    trained = [t.prompt for i in range(1, 9) for t in load_tasks(ds, f"iter-{i:02d}")]
    assert len(heldout) == 100 and len(trained) == 32
    assert len(set(trained)) == 32  # each iteration gets new tasks
    assert heldout.isdisjoint(trained)
    task = load_tasks(ds, "heldout")[0]
    assert task.prompt.startswith("Calculate ") and isinstance(task.answer, int)
    assert ds.scorer.type == "numeric"  # binary: no partial credit for a wrong reply
    # More iterations than problems left: reuse is said, never silently held-out ones.
    split = demo_tasks.write_demo_files(
        tmp_path / "many",
        upstream="http://127.0.0.1:1/v1",
        eval_tasks=190,
        iterations=4,
        tasks_per_iteration=4,
        max_tokens=24,
        temperature=1.0,
        seed=7,
    )
    assert (split.train_pool, split.reused) == (10, True)


def test_demo_serves_float32_on_the_gpu_when_there_is_one(monkeypatch, tmp_path: Path) -> None:
    import asyncio

    from rich.console import Console

    class Stop(Exception):
        pass

    asked: dict = {}

    def engine(model_dir: Path, **kw: object) -> None:
        asked.update(kw)
        raise Stop

    monkeypatch.setattr(engine_module, "Engine", engine)
    loop = demo._loop(Console(), tmp_path, tmp_path, demo.DemoSettings(iterations=0))
    with pytest.raises(Stop):
        asyncio.run(loop)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    device = resolve_device(asked["device"])
    assert device == "cuda"
    assert resolve_dtype(asked["dtype"], device) == torch.float32  # not the GPU default, bf16


def test_demo_trains_each_iteration_on_policy_in_float32(monkeypatch, tmp_path: Path) -> None:
    import agentworld.train.loop as loop

    seen = []
    monkeypatch.setattr(loop, "train", lambda cfg, console: seen.append(cfg) or {})
    settings = demo.DemoSettings(tasks=4, n=8, lr=2e-5)
    ckpt, _info = demo._train_sync(tmp_path, tmp_path / "m", tmp_path / "pool", 3, 2, settings)
    assert ckpt is None
    cfg = seen[0]
    assert cfg.mixed_precision == "no"  # fp32 like the demo's engine
    assert cfg.algo == "grpo" and cfg.lr == 2e-5
    # This iteration's groups only, one pass, one update, from the current policy's version.
    assert cfg.split == "iter-03" and cfg.agent == demo_tasks.TRAIN_AGENT
    assert (cfg.epochs, cfg.max_steps, cfg.policy_version) == (1, 1, 2)
    assert cfg.model == str(tmp_path / "m")


def test_a_rerun_moves_the_earlier_runs_outputs_aside_whole(tmp_path: Path) -> None:
    """Iteration N trains on split iter-NN of the run's pool, so an earlier run's pool,
    checkpoints and results move aside (not deleted) and the files every run writes stay;
    the slow end-to-end test checks the training side."""
    folder = tmp_path / "demo"
    assert demo.keep_earlier_run(folder) is None  # a first run: nothing to keep
    folder.mkdir()
    (folder / "agents.toml").write_text("# written anew by every run\n")
    assert demo.keep_earlier_run(folder) is None
    Pool.create(folder / "pool").close()
    (folder / "runs" / "grpo" / "iter-01").mkdir(parents=True)
    (folder / "results.json").write_text("{}")
    kept = demo.keep_earlier_run(folder)
    assert kept is not None and kept.parent == folder / "earlier"
    assert sorted(p.name for p in kept.iterdir()) == ["pool", "results.json", "runs"]
    assert not any((folder / name).exists() for name in demo.RUN_OUTPUTS)
    assert (folder / "agents.toml").exists()
    Pool.open(kept / "pool").close()  # the earlier pool opens as it was
    Pool.create(folder / "pool").close()  # a second earlier run, in the same second
    again = demo.keep_earlier_run(folder)
    assert again is not None and again != kept and (again / "pool").is_dir()


async def test_training_between_iterations_leaves_the_event_loop_free(monkeypatch, tmp_path):
    """The demo's server and proxy share its event loop: starting the trainer's process
    and joining it (~0.7 s while it hands its memory back) happen off that loop."""
    import asyncio
    import time

    def slow_update(*args: object) -> tuple[None, dict[str, object]]:
        time.sleep(0.5)
        return None, {"skipped": "no signal"}

    monkeypatch.setattr(demo, "_train_in_fresh_process", slow_update)
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    ticker = asyncio.create_task(tick())
    got = await demo._train(tmp_path, tmp_path / "m", tmp_path / "pool", 1, 0, demo.DemoSettings())
    ticker.cancel()
    assert got == (None, {"skipped": "no signal"})
    assert ticks >= 10  # the loop ran on meanwhile (a blocked one: 1)
