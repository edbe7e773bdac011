"""`aw demo` runs the whole loop (serve, proxy, agent, pool, trainer) on a tiny model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from agentworld import demo
from agentworld.cli import app
from agentworld.pool import Pool
from agentworld.serve import engine as engine_module
from agentworld.serve.engine import resolve_device, resolve_dtype
from agentworld.serve.tiny import make_tiny_model


@pytest.mark.timeout(600)
def test_demo_collects_grouped_engine_token_trajectories(tmp_path: Path) -> None:
    model = make_tiny_model(tmp_path / "tiny")
    res = CliRunner().invoke(
        app,
        [
            "demo",
            "--dir",
            str(tmp_path / "demo"),
            "--model",
            str(model),
            "--tasks",
            "2",
            "-n",
            "2",
            "--max-tokens",
            "12",
            "--train-steps",
            "1",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "aw tui --pool" in res.output
    device = "cuda" if torch.cuda.is_available() else "cpu"
    assert f"engine on {device} (float32)" in res.output
    pool = Pool.open(tmp_path / "demo" / "pool")
    idx = pool.index()
    trajectories = idx.trajectories(limit=None)
    assert len(trajectories) == 4
    assert {t["status"] for t in trajectories} == {"done"}
    assert len({t["group"] for t in trajectories}) == 2  # one group per task
    stats = idx.stats()
    assert stats["engine_token_steps"] == stats["steps"] > 0
    assert (tmp_path / "demo" / "agents.toml").exists()


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
    loop = demo._loop(
        Console(),
        tmp_path,
        tmp_path,
        tasks=1,
        n=2,
        max_turns=1,
        max_tokens=8,
        train_steps=0,
        seed=0,
    )
    with pytest.raises(Stop):
        asyncio.run(loop)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    device = resolve_device(asked["device"])
    assert device == "cuda"
    assert resolve_dtype(asked["dtype"], device) == torch.float32  # not the GPU default, bf16


def test_demo_trains_in_float32_like_its_engine(monkeypatch, tmp_path: Path) -> None:
    from rich.console import Console

    import agentworld.train.loop as loop

    seen = []
    monkeypatch.setattr(loop, "train", lambda cfg, console: seen.append(cfg) or {})
    assert demo._train(Console(), tmp_path, tmp_path / "pool", tmp_path / "out", 1) is None
    assert seen[0].mixed_precision == "no"
