"""The monitor on a small terminal: every per-agent column, rewards of one value, the
proxy's stats whole, and keys that scroll to what is below the fold."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.containers import VerticalScroll
from textual.pilot import Pilot
from textual.widgets import DataTable

from agentworld import records
from agentworld.tui import data as tui_data
from agentworld.tui.help import HelpScreen
from agentworld.tui.monitor import MonitorScreen

from .conftest import app_for, step, write_pool
from .test_inspector_layout import screen_text
from .test_screens import until

SIZES = [(80, 24), (100, 30), (120, 40)]
# What `aw proxy` answers on GET /aw/stats (agentworld/proxy/stats.py), long lines and all.
PROXY_STATS = {
    "uptime_s": 95.0,
    "requests": 1,
    "steps": {"ok": 1, "error": 0, "cancelled": 0, "lost": 0, "total": 1},
    "trajectories": {"open": 4, "done": 1},
    "tokens": {"prompt": 330, "completion": 31, "total": 361},
    "errors": {"bad_request": 0, "upstream": 0, "record": 0, "upstream_timeout": 0, "total": 0},
    "rates": {"steps_per_s": 0.017, "completion_tokens_per_s": 0.517, "window_s": 60.0},
    "event_loop": {"lag_ms_p50": 1, "lag_ms_max": 8, "checks": 120},
    "writer": {"appended": 1, "committed": 1, "lost": 0},
    "upstreams_down": [{"agent": "math", "url": "http://127.0.0.1:8000", "seconds_left": 12.5}],
}
# Pairs that must each be on screen whole, on one line: "upstream …" hid the last two.
PROXY_PAIRS = [
    "steps total 1",
    "lost 0",
    "errors total 0",
    "upstream timeout 0",
    "completion tokens per s 0.517",
    "window 1 min 0 s",
    "lag ms max 8",
    "url http://127.0.0.1:8000",
    "seconds left 12.5",
]


async def shown_monitor(pilot: Pilot) -> MonitorScreen:
    app = pilot.app
    await until(pilot, lambda: isinstance(app.screen, MonitorScreen) and app.screen.ready)
    return app.screen


def flat_rewards(path: Path) -> Path:
    """Three trajectories that all scored 0 (a fresh run before any task is solved)."""
    recs = []
    for k in range(3):
        tid = f"tr_flat_{k}"
        recs.append(step(tid, 0, group="grp-flat"))
        recs.append(
            records.make_end(
                id=f"en_{tid}", trajectory=tid, agent="coder", group="grp-flat",
                status="done", steps=1, reward=0.0,
            )
        )  # fmt: skip
    return write_pool(path, recs)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_rewards_of_one_value_are_one_bin_not_a_made_up_range(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    async with app_for(flat_rewards(tmp_path / "pool"), start="monitor").run_test(size=size) as p:
        await shown_monitor(p)
        await p.press("end")  # at 80×24 the bins end below the fold
        await until(p, lambda: "disk" in "".join(screen_text(p.app)))
        lines = screen_text(p.app)
        top = next(i for i, line in enumerate(lines) if "reward distribution" in line)
        assert lines[top + 1].split()[:4] == ["all", "0", "█" * 20, "3"], lines[top + 1]
        assert not any("…" in line or "10.00" in line for line in lines), lines  # no ranges


@pytest.mark.parametrize("size", SIZES)
async def test_every_per_agent_column_is_on_screen(pool_path: Path, size: tuple[int, int]) -> None:
    async with app_for(pool_path, start="monitor").run_test(size=size) as pilot:
        monitor = await shown_monitor(pilot)
        solver_rows = lambda: [ln for ln in screen_text(pilot.app) if ln.split()[:1] == ["solver"]]  # noqa: E731
        await until(pilot, solver_rows)  # the per-agent table, drawn (late on a loaded host)
        lines = screen_text(pilot.app)
        header = next(line for line in lines if " dataset " in line)
        assert header.split()[:8] == [
            "agent", "dataset", "traj", "steps", "open", "done", "failed", "reward",
        ]  # fmt: skip
        solver = next(line for line in lines if line.split()[:1] == ["solver"])
        assert solver.split()[:8] == ["solver", "gsm8k", "3", "6", "0", "2", "1", "0.500"]
        table = monitor.query_one("#per-agent", DataTable)
        assert table.virtual_size.width <= table.scrollable_content_region.width  # no scrollbar


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_proxy_stats_are_whole_and_reachable_with_keys(
    pool_path: Path, monkeypatch: pytest.MonkeyPatch, size: tuple[int, int]
) -> None:
    monkeypatch.setattr(tui_data, "proxy_stats", lambda url, timeout_s=0.5: PROXY_STATS)
    app = app_for(pool_path, start="monitor", proxy_url="http://127.0.0.1:9")
    async with app.run_test(size=size) as pilot:
        monitor = await shown_monitor(pilot)
        body = monitor.query_one(VerticalScroll)
        await pilot.press("end")  # the page's end, though nothing was focused by hand
        await until(pilot, lambda: "upstreams down" in "".join(screen_text(app)))
        lines = screen_text(app)
        for pair in PROXY_PAIRS:
            assert any(pair in line for line in lines), (pair, lines)
        # Nothing in the panel is cut (the reward bins, left of it or above, have "…").
        row = next(i for i, line in enumerate(lines) if "proxy" in line.split())
        col = lines[row].index("proxy")
        assert not any("…" in line[col:] for line in lines[row:]), lines[row:]
        await pilot.press("home")
        await until(pilot, lambda: body.scroll_y == 0 and "steps 12" in screen_text(app)[1])


async def test_page_and_arrow_keys_scroll_the_monitor_at_80x24(pool_path: Path) -> None:
    async with app_for(pool_path, start="monitor").run_test(size=(80, 24)) as pilot:
        monitor = await shown_monitor(pilot)
        body = monitor.query_one(VerticalScroll)
        await until(pilot, lambda: body.max_scroll_y > 0)  # laid out, taller than the screen
        assert body.scroll_y == 0
        await pilot.press("down")
        await until(pilot, lambda: body.scroll_y == 1)
        await pilot.press("pagedown")
        await until(pilot, lambda: body.scroll_y > 1)
        await until(pilot, lambda: any("errors (latest)" in ln for ln in screen_text(pilot.app)))
        await pilot.press("pageup", "up")
        await until(pilot, lambda: body.scroll_y == 0)
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(pilot.app.screen, HelpScreen))
        text = str(pilot.app.screen.query_one("#help").render())
        assert "PgDn  Scroll the monitor a page down" in text


async def test_policy_versions_say_they_count_steps(pool_path: Path) -> None:
    async with app_for(pool_path, start="monitor").run_test(size=(80, 24)) as pilot:
        await shown_monitor(pilot)
        await until(
            pilot,
            lambda: any("steps per policy version v1:12" in ln for ln in screen_text(pilot.app)),
        )
