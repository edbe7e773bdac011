"""The chaos suite's short runs (bench/chaos.py): a real `aw proxy` process SIGKILLed under
load, and its pool's file system filled up and freed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "chaos.py"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def _chaos() -> ModuleType:
    spec = importlib.util.spec_from_file_location("aw_bench_chaos", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


chaos = _chaos()


async def test_sigkill_strict_loses_and_duplicates_nothing_acknowledged() -> None:
    out = await chaos.sigkill("strict", kills=2, agents=6, acks_per_kill=40)
    assert out["acknowledged"] >= 80
    assert out["lost"] == 0 and out["duplicated"] == 0, out
    assert not out["other"], out


async def test_sigkill_batched_loses_only_within_its_commit_window() -> None:
    out = await chaos.sigkill("batched", kills=2, agents=6, acks_per_kill=40)
    assert out["duplicated"] == 0, out
    # Answered within the 50 ms group-commit window before the kill of the proxy that
    # answered (plus a slow fsync and scheduling slack on a loaded machine), never older.
    assert out["loss_window_ms"] < 1000, out


@pytest.mark.parametrize("durability", ["strict", "batched"])
async def test_disk_full_then_freed(durability: str) -> None:
    try:
        out = await chaos.diskfull(durability, agents=6, acks=30)
    except chaos.Skipped as exc:
        pytest.skip(str(exc))
    assert out["ok"], out
    assert out["refused_with_retry_after"] > 0 and out["health_statuses"] == [200, 503], out
    if durability == "strict":
        assert out["lost"] == 0
    else:
        assert out["lost"] == out["counted_lost"]  # every lost step is counted as lost
    assert out["duplicated"] == 0 and not out["recovery_problems"]
