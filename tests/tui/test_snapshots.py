"""Snapshot tests of each screen at 100×30 (update with --snapshot-update after a real change)."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.pilot import Pilot

from agentworld.tui import queries
from agentworld.tui.diff import DiffScreen
from agentworld.tui.group import GroupScreen
from agentworld.tui.inspector import InspectorScreen
from agentworld.tui.monitor import MonitorScreen
from agentworld.tui.trajectories import TrajectoriesScreen

from .conftest import app_for

SIZE = (100, 30)


@pytest.fixture(autouse=True)
def fixed_disk_use(monkeypatch: pytest.MonkeyPatch) -> None:
    # SQLite's file sizes vary run to run; everything else on screen is deterministic.
    monkeypatch.setattr(
        queries,
        "disk_use",
        lambda root: {"objects": 2048, "journals": 0, "labels": 0, ".cache": 65536},
    )


async def settle(pilot: Pilot, cond) -> None:
    for _ in range(300):
        if cond(pilot.app):
            break
        await pilot.pause(0.02)
    await pilot.pause(0.1)


def test_monitor_snapshot(pool_path: Path, snap_compare) -> None:
    async def ready(pilot: Pilot) -> None:
        await settle(pilot, lambda a: isinstance(a.screen, MonitorScreen) and a.screen.ready)

    assert snap_compare(
        app_for(pool_path, start="monitor", refresh_s=0), terminal_size=SIZE, run_before=ready
    )


def test_trajectories_snapshot(pool_path: Path, snap_compare) -> None:
    async def ready(pilot: Pilot) -> None:
        await settle(pilot, lambda a: isinstance(a.screen, TrajectoriesScreen) and a.screen.page)

    assert snap_compare(app_for(pool_path, refresh_s=0), terminal_size=SIZE, run_before=ready)


def test_inspector_snapshot(pool_path: Path, snap_compare) -> None:
    async def ready(pilot: Pilot) -> None:
        pilot.app.inspect("tr_grp-a_0")  # the one whose answer is full of markup
        await settle(pilot, lambda a: isinstance(a.screen, InspectorScreen) and a.screen.trajectory)

    assert snap_compare(app_for(pool_path, refresh_s=0), terminal_size=SIZE, run_before=ready)


def test_token_view_snapshot(pool_path: Path, snap_compare) -> None:
    async def ready(pilot: Pilot) -> None:
        pilot.app.inspect("tr_grp-b_1")
        await settle(pilot, lambda a: isinstance(a.screen, InspectorScreen) and a.screen.trajectory)
        await pilot.press("j", "t")
        await pilot.pause(0.1)

    assert snap_compare(app_for(pool_path, refresh_s=0), terminal_size=SIZE, run_before=ready)


def test_group_snapshot(pool_path: Path, snap_compare) -> None:
    async def ready(pilot: Pilot) -> None:
        pilot.app.show_group("grp-b")
        await settle(pilot, lambda a: isinstance(a.screen, GroupScreen) and a.screen.members)

    assert snap_compare(app_for(pool_path, refresh_s=0), terminal_size=SIZE, run_before=ready)


def test_help_snapshot(pool_path: Path, snap_compare) -> None:
    async def ready(pilot: Pilot) -> None:
        await settle(pilot, lambda a: isinstance(a.screen, TrajectoriesScreen) and a.screen.page)
        await pilot.press("question_mark")
        await pilot.pause(0.1)

    assert snap_compare(app_for(pool_path, refresh_s=0), terminal_size=SIZE, run_before=ready)


def test_runs_snapshot(pool_path: Path, snap_compare) -> None:
    from agentworld.tui.runs import RunsScreen

    from .conftest import run_rows, write_run

    write_run(pool_path.parent / "runs" / "train", run_rows(6))

    async def ready(pilot: Pilot) -> None:
        await settle(
            pilot,
            lambda a: isinstance(a.screen, RunsScreen) and a.screen.charts and a.screen.by_version,
        )

    assert snap_compare(
        app_for(pool_path, start="runs", refresh_s=0), terminal_size=SIZE, run_before=ready
    )


def test_diff_snapshot(pool_path: Path, snap_compare) -> None:
    async def ready(pilot: Pilot) -> None:
        pilot.app.push_screen(DiffScreen("tr_grp-a_0", "tr_grp-a_1"))
        await settle(pilot, lambda a: isinstance(a.screen, DiffScreen) and a.screen.model)

    assert snap_compare(app_for(pool_path, refresh_s=0), terminal_size=SIZE, run_before=ready)
