"""A shard damaged after it was indexed: readers that use the index notice (its size or
mtime moved), name it and leave its rows out; fsck names it once, not once per row."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentworld.pool import Pool
from agentworld.pool.fsck import fsck

from .conftest import write_trajectories

ROOT = Path(__file__).resolve().parents[2]


def _two_shards(pool: Pool) -> tuple[Path, Path]:
    write_trajectories(pool, 2, 3)
    write_trajectories(pool, 2, 3)
    bad, good = pool.layout.shard_paths()
    return bad, good


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 7])


def test_refresh_rereads_a_changed_shard_and_leaves_out_a_damaged_one(
    pool: Pool, caplog: pytest.LogCaptureFixture
) -> None:
    bad, _ = _two_shards(pool)
    assert pool.index().stats()["steps"] == 12
    _truncate(bad)
    rel = str(bad.relative_to(pool.root))
    with caplog.at_level(logging.WARNING):
        report = pool.index(refresh=False).refresh()
    assert report.changed == [rel] and report.corrupt and rel in report.corrupt[0]
    assert f"shard {rel} changed since it was indexed" in caplog.text
    assert pool.index().stats()["steps"] == 6
    assert pool.index().count_trajectories() == 2


def test_same_size_damage_with_a_new_mtime_is_noticed(pool: Pool) -> None:
    bad, _ = _two_shards(pool)
    assert pool.index().stats()["steps"] == 12
    data = bytearray(bad.read_bytes())
    data[len(data) // 2] ^= 0x01
    st = bad.stat()
    bad.write_bytes(bytes(data))
    os.utime(bad, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert pool.index().stats()["steps"] == 6


def test_cli_stats_and_ls_name_the_damaged_shard(pool: Pool) -> None:
    bad, _ = _two_shards(pool)
    pool.index()
    _truncate(bad)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for args in (["stats", "--json"], ["ls", "--json"]):
        out = subprocess.run(
            [sys.executable, "-m", "agentworld.cli", "pool", *args, "--pool", str(pool.root)],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        assert bad.name in out.stderr
        data = json.loads(out.stdout)
        if args[0] == "stats":
            assert data["steps"] == 6
        else:
            assert len(data) == 2


def test_fsck_reports_one_problem_per_damaged_shard(pool: Pool) -> None:
    bad, _ = _two_shards(pool)
    pool.index()
    _truncate(bad)
    report = fsck(pool)
    assert len(report.problems) == 1, [p.problem for p in report.problems]
    (problem,) = report.problems
    assert problem.path == str(bad.relative_to(pool.root))
    assert "does not match its name" in problem.problem and "truncated" in problem.problem
