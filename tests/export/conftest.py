"""Fixtures for export tests: a pool holding two groups of linear tool-using trajectories."""

from __future__ import annotations

import pytest

from agentworld.pool import Pool
from tests.export.trajectories import standard


@pytest.fixture
def filled(pool: Pool) -> Pool:
    standard(pool)
    return pool
