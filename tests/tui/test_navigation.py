"""Getting around: `l` and `m` always reach their screen, footers fit 80 columns."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Static

from agentworld.tui.group import GroupScreen
from agentworld.tui.help import HelpScreen, bindings_of, key_name, what_it_does
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


async def footer_and_help_fit(pilot, cls: type) -> None:
    """The footer ends ``? Help`` at the screen's width, and ``?`` lists every key of
    ``cls``, those the footer leaves out included."""
    app = pilot.app
    await until(pilot, lambda: footer_fits(app))
    assert "u Undo" in screen_text(app)[-1]
    screen = app.screen
    await pilot.press("question_mark")
    await until(pilot, lambda: isinstance(app.screen, HelpScreen))
    text = str(app.screen.query_one("#help", Static).render())
    for b in bindings_of(cls):
        assert f"{key_name(b)}  {what_it_does(b)}" in text, (cls.__name__, b.key)
    await pilot.press("escape")
    await until(pilot, lambda: app.screen is screen)


async def test_footers_fit_80_columns_and_help_lists_the_keys_they_leave_out(
    pool_path: Path,
) -> None:
    """At 80 columns the list's and the inspector's footers lost ``u Undo ? Help``: a new
    user could not see how to get help. The keys a footer leaves out are in the ``?`` help."""
    async with app_for(pool_path).run_test(size=(80, 24)) as pilot:
        app = pilot.app
        await loaded_list(pilot)
        await footer_and_help_fit(pilot, TrajectoriesScreen)
        await pilot.press("enter")
        await shown_inspector(pilot)
        await footer_and_help_fit(pilot, InspectorScreen)
        assert screen_text(app)[-1].startswith("esc Back t Tokens")
        await pilot.press("g")
        await until(pilot, lambda: isinstance(app.screen, GroupScreen) and app.screen.members)
        await footer_and_help_fit(pilot, GroupScreen)
