"""Fixtures for the rollout tests: a fake proxy per test, the test agents module importable."""

from __future__ import annotations

from pathlib import Path

import pytest
from aw_run_fakes import HERE, FakeProxy


@pytest.fixture
def fake_proxy(tmp_path: Path):
    proxy = FakeProxy(tmp_path / "pool").start()
    yield proxy
    proxy.stop()


@pytest.fixture
def test_agents(monkeypatch: pytest.MonkeyPatch) -> str:
    """Make tests/run/aw_run_test_agents.py importable; returns its module name."""
    monkeypatch.syspath_prepend(str(HERE))
    return "aw_run_test_agents"
