"""Getting around: `l` and `m` always reach their screen, footers fit 100 columns."""

from __future__ import annotations

from pathlib import Path

from agentworld.tui.group import GroupScreen
from agentworld.tui.inspector import InspectorScreen
from agentworld.tui.monitor import MonitorScreen
from agentworld.tui.trajectories import TrajectoriesScreen

from .conftest import app_for
from .test_inspector_layout import screen_text
from .test_screens import loaded_list, shown_inspector, until


def footer_fits(app) -> bool:
    """The footer's last key, ``? Help``, is on screen (a cut footer ends ``x Not▏``)."""
    return screen_text(app)[-1].rstrip().endswith("? Help")


async def test_l_goes_to_the_list_from_anywhere(pool_path: Path) -> None:
    async with app_for(pool_path, start="monitor").run_test(size=(100, 30)) as pilot:
        app = pilot.app
        await until(pilot, lambda: isinstance(app.screen, MonitorScreen) and app.screen.ready)
        await pilot.press("l")
        listing = await loaded_list(pilot)
        await until(pilot, lambda: footer_fits(app))  # the footer is not cut
        await pilot.press("enter")
        await shown_inspector(pilot)
        await until(pilot, lambda: footer_fits(app))
        await pilot.press("g")
        await until(pilot, lambda: isinstance(app.screen, GroupScreen) and app.screen.members)
        await until(pilot, lambda: footer_fits(app))
        await pilot.press("r")
        await until(pilot, lambda: isinstance(app.screen, InspectorScreen) and app.screen.review)
        await pilot.press("l")  # one key, however deep: the list, not the review queue
        await until(pilot, lambda: app.screen is listing)
        assert len(app.screen_stack) == 1
        await pilot.press("enter")
        await shown_inspector(pilot)
        await pilot.press("m")
        await until(pilot, lambda: isinstance(app.screen, MonitorScreen))
        assert screen_text(app)[-1].split() == [
            "l",
            "List",
            "r",
            "Review",
            "q",
            "Quit",
            "?",
            "Help",
        ]
        await pilot.press("l")
        await until(pilot, lambda: isinstance(app.screen, TrajectoriesScreen))


async def test_open_links_straight_to_a_trajectory(pool_path: Path) -> None:
    """`aw tui --open tr_…`: the inspector on it, the list beneath (esc goes there)."""
    app = app_for(pool_path, open_trajectory="tr_grp-b_1")
    async with app.run_test(size=(100, 30)) as pilot:
        ins = await shown_inspector(pilot)
        assert ins.trajectory.id == "tr_grp-b_1"
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(pilot.app.screen, TrajectoriesScreen))
