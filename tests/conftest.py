"""Shared fixtures: every test gets its own pool and AgentWorld home in a temp folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentworld.pool import Pool


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AW_HOME", str(tmp_path / "aw-home"))
    monkeypatch.delenv("AW_POOL", raising=False)


@pytest.fixture
def pool(tmp_path: Path) -> Pool:
    p = Pool.create(tmp_path / "pool")
    yield p
    p.close()
