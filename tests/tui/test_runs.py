"""The runs screen: pick a run, see its curves (plotext), reward by policy version from the pool."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from textual.widgets import DataTable, OptionList, Static
from textual_plotext import PlotextPlot

from agentworld import records
from agentworld.tui import queries
from agentworld.tui.runs import RunsScreen

from .conftest import T0, app_for, run_rows, step, write_pool, write_run
from .test_screens import until

SIZE = (100, 30)


async def test_runs_screen_shows_the_newest_runs_curves_and_switches_runs(pool_path: Path) -> None:
    import os

    runs = pool_path.parent / "runs"
    old = write_run(runs / "old", run_rows(2))
    os.utime(old / "metrics.jsonl", (1000, 1000))
    new = write_run(runs / "train", run_rows(4, ess=0.9, tis_weight_mean=0.95))
    app = app_for(pool_path, start="runs", refresh_s=0)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        assert isinstance(screen, RunsScreen)
        await until(pilot, lambda: screen.run == new and screen.by_version is not None)
        titles = [c.title for c in screen.charts]
        assert titles == ["reward", "loss", "KL / mismatch", "clipping", "ratios / TIS", "tokens/s"]
        assert len(screen.query(PlotextPlot)) == 6
        latest = str(screen.query_one("#latest", Static).render())
        assert "update 4" in latest and "reward_mean=0.6" in latest  # a pair never wraps
        assert screen.sub_title == "training runs"
        # The pool's ended trajectories are all at version 1: 5 scored (one failed, no reward).
        table = screen.query_one("#by-version", DataTable)
        assert [str(c) for c in table.get_row_at(0)] == ["1", "6", "6", "0.500", "1"]

        screen.query_one("#runs", OptionList).focus()
        await pilot.press("down")
        await until(pilot, lambda: screen.run == old)
        assert len(screen.query(PlotextPlot)) == 5 and screen.rows[-1]["step"] == 2

        # A live run: a new update lands, the screen redraws on its own.
        with open(old / "metrics.jsonl", "a") as f:
            f.write(json.dumps(run_rows(3)[-1]) + "\n")
        await until(pilot, lambda: screen.rows[-1]["step"] == 3, wait_s=10)
        assert app.screen.active_bindings["ctrl+r"].binding.action == "reload"  # g: group
        assert "g" not in app.screen.active_bindings


async def test_no_runs_says_where_it_looked(pool_path: Path, tmp_path: Path) -> None:
    app = app_for(pool_path, start="runs", refresh_s=0, runs_path=tmp_path / "nothing")
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        await until(pilot, lambda: "no training runs" in str(screen.query_one("#latest").render()))
        assert str(tmp_path / "nothing") in str(screen.query_one("#latest", Static).render())
        await pilot.press("m")  # the app's modes are still a key away
        assert app.current_mode == "monitor"
        await pilot.press("c")
        assert app.current_mode == "runs"


def test_reward_by_version_counts_ended_trajectories_and_label_overrides(tmp_path: Path) -> None:
    recs = []
    for i, (pv, reward) in enumerate([(0, 0.0), (0, 1.0), (2, 1.0), (2, None)]):
        tid = f"tr_{i}"
        recs.append(step(tid, 0, group="g", t=T0, pv=pv))
        recs.append(
            records.make_end(
                id=f"en_{i}", trajectory=tid, agent="coder", dataset="gsm8k", group="g",
                task="g", status="done", steps=1, reward=reward, policy_version=pv, ended_at=T0,
            )
        )  # fmt: skip
    recs.append(step("tr_open", 0, group="g", t=T0, pv=3))  # not ended: not counted
    from agentworld.pool import Pool

    pool = Pool.open(write_pool(tmp_path / "pool", recs))
    pool.labels.set(["trajectory:tr_0"], {"reward": 0.5}, author="t")
    idx = pool.index()
    got = queries.reward_by_version(idx.db)
    pool.close()
    assert got == [
        {"version": 0, "trajectories": 2, "scored": 2, "reward_mean": 0.75, "failed": 0},
        {"version": 2, "trajectories": 2, "scored": 1, "reward_mean": 1.0, "failed": 0},
    ]


def test_the_runs_screen_does_not_import_torch(pool_path: Path) -> None:
    code = (
        "import sys; from agentworld.tui.app import make_app; from agentworld.tui import runs; "
        "import textual_plotext, agentworld.curves; "
        "print(any(m in sys.modules for m in ('torch', 'transformers', 'matplotlib')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_headline_shows_the_last_updates_entropy() -> None:
    from agentworld.tui.runs import latest_text

    text = latest_text([{"step": 1, "loss": 0.5}, {"step": 2, "loss": 0.25, "entropy": 1.5}])
    assert text.plain == "update 2   loss=0.25   entropy=1.5"


def test_the_headline_shows_how_far_the_rollouts_lag_the_trainer() -> None:
    from agentworld.tui.runs import latest_text

    row = {"step": 3, "policy_version": 3, "policy_lag": 2, "reward_mean": 0.5}
    assert (
        latest_text([row]).plain == "update 3   policy_version=3   policy_lag=2   reward_mean=0.5"
    )
