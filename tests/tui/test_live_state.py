"""What the TUI says while it works: a cold index building, labels from another
process, readable counts, bins and proxy stats."""

from __future__ import annotations

import threading
from pathlib import Path

from textual.widgets import Static

from agentworld.pool import Pool
from agentworld.tui import data as tui_data
from agentworld.tui.data import MonitorSnapshot
from agentworld.tui.monitor import MonitorScreen, rewards_text, summary_text
from agentworld.tui.proxy_panel import proxy_panel

from .conftest import app_for
from .test_screens import loaded_list, until


async def test_the_monitor_says_indexing_while_a_cold_index_builds(
    pool_path: Path, monkeypatch
) -> None:
    gate = threading.Event()
    original = tui_data.PoolData.refresh

    def slow_refresh(self, progress=None):
        gate.wait(30)  # the first build of a big pool takes seconds
        return original(self, progress)

    monkeypatch.setattr(tui_data.PoolData, "refresh", slow_refresh)
    app = app_for(pool_path, start="monitor", refresh_s=0.2)
    async with app.run_test(size=(100, 30)) as pilot:
        summary = lambda: str(app.screen.query_one("#summary", Static).render())  # noqa: E731
        await until(pilot, lambda: isinstance(app.screen, MonitorScreen) and app.screen.snapshot)
        await until(pilot, lambda: "indexing the pool" in summary())
        gate.set()
        await until(pilot, lambda: "indexing" not in summary())
        assert "steps 12" in summary()


async def test_a_label_from_the_cli_shows_in_an_open_list(pool_path: Path) -> None:
    async with app_for(pool_path, refresh_s=0.2).run_test(size=(100, 30)) as pilot:
        screen = await loaded_list(pilot)
        tid = screen.page.rows[0]["id"]
        assert not screen.page.rows[0].get("label_quality")
        other = Pool.open(pool_path)  # as `aw pool label` does, from another process
        other.labels.set([f"trajectory:{tid}"], {"quality": "bad"}, author="cli")
        other.close()
        await until(pilot, lambda: screen.page.rows[0].get("label_quality") == "bad", 10)


def test_counts_bins_and_proxy_stats_read_as_words() -> None:
    snap = MonitorSnapshot(
        at=0.0, steps=3, by_status={"done": 1}, rate=[0.0], errors=[],
        heavy={
            "stats": {"labelled_trajectories": 1},
            "histogram": [(0.008 + i * 0.0004, 0.0084 + i * 0.0004, i) for i in range(10)],
            "disk": {},
        },
    )  # fmt: skip
    assert "labelled 1 trajectory " in summary_text(snap).plain
    bins = [line.split()[0] for line in rewards_text(snap).plain.splitlines()[1:11]]
    assert len(set(bins)) == 10, bins  # no "0.01…0.01" ten times
    stats = {
        "steps": {"ok": 3, "error": 0, "total": 3},
        "uptime_s": 125.0,
        "rates": {"steps_per_s": 0.5},
    }
    panel = proxy_panel(stats).plain
    assert "steps total 3 · ok 3 · error 0" in panel and "uptime 2 min 5 s" in panel
    assert "steps per s 0.5" in panel and "{" not in panel
