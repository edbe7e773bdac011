"""`aw demo` runs the whole loop (serve, proxy, agent, pool, trainer) on a tiny model."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentworld.cli import app
from agentworld.pool import Pool
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
    pool = Pool.open(tmp_path / "demo" / "pool")
    idx = pool.index()
    trajectories = idx.trajectories(limit=None)
    assert len(trajectories) == 4
    assert {t["status"] for t in trajectories} == {"done"}
    assert len({t["group"] for t in trajectories}) == 2  # one group per task
    stats = idx.stats()
    assert stats["engine_token_steps"] == stats["steps"] > 0
    assert (tmp_path / "demo" / "agents.toml").exists()
