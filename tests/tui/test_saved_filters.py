"""Saved filters: saved by name in the pool's filters.toml, recalled after a restart."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentworld.errors import ConfigError
from agentworld.tui.dialog import ChoiceDialog, PromptDialog
from agentworld.tui.saved_filters import FILTERS_FILE, SavedFilters
from agentworld.tui.trajectories import TrajectoriesScreen

from .conftest import app_for
from .test_command import cli
from .test_screens import loaded_list, until

FILTER = "agent:solver status:done"


def shown_ids(screen: TrajectoriesScreen) -> list[str]:
    return [r["id"] for r in screen.page.rows] if screen.page else []


async def test_save_then_restart_and_recall_gives_the_same_rows(pool_path: Path) -> None:
    app = app_for(pool_path)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await loaded_list(pilot)
        await pilot.press("slash", *FILTER, "enter")
        await until(pilot, lambda: screen.page.total == 2)
        wanted = shown_ids(screen)
        await pilot.press("w")
        await until(pilot, lambda: isinstance(app.screen, PromptDialog))
        await pilot.press(*"solver-done", "enter")
        await until(pilot, lambda: (pool_path / FILTERS_FILE).exists())
    assert SavedFilters(pool_path).load() == {"solver-done": FILTER}

    # `aw tui --filter solver-done`: the list opens with it.
    app = app_for(pool_path, start="monitor", saved_filter="solver-done")
    async with app.run_test(size=(100, 30)) as pilot:
        await until(
            pilot,
            lambda: (
                isinstance(app.screen, TrajectoriesScreen)
                and app.screen.page
                and app.screen.page.total == 2
            ),
        )
        assert shown_ids(app.screen) == wanted
        assert app.screen.query_one("#filter").value == FILTER

    # The palette lists it as "Filter: NAME"; `f` recalls it from a menu.
    app = app_for(pool_path)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await loaded_list(pilot)
        assert screen.page.total == 6
        commands = {c.title: c for c in app.get_system_commands(app.screen)}
        assert commands["Filter: solver-done"].help == FILTER
        await commands["Filter: solver-done"].callback()
        await until(pilot, lambda: screen.page.total == 2)
        assert shown_ids(screen) == wanted
        screen.apply_filter("")
        await until(pilot, lambda: screen.page.total == 6)
        await pilot.press("f")
        await until(pilot, lambda: isinstance(app.screen, ChoiceDialog))
        await pilot.press("enter")
        await until(pilot, lambda: screen.page.total == 2)


async def test_a_broken_filters_file_is_a_notice_not_a_crash(pool_path: Path) -> None:
    (pool_path / FILTERS_FILE).write_text("[filters\nx = 1\n")
    app = app_for(pool_path, saved_filter="anything")
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await loaded_list(pilot)
        await until(pilot, lambda: any(FILTERS_FILE in n.message for n in app._notifications))
        notice = next(n.message for n in app._notifications if FILTERS_FILE in n.message)
        assert str(pool_path / FILTERS_FILE) in notice and "not valid TOML" in notice
        await pilot.press("f")  # the menu says so too, and the app goes on
        await pilot.press("w")
        await pilot.press("slash", *"status:done", "enter")
        await until(pilot, lambda: screen.page.total == 5)
        assert [c.title for c in app.get_system_commands(app.screen) if "Filter:" in c.title] == []
    assert (pool_path / FILTERS_FILE).read_text() == "[filters\nx = 1\n"  # left as it was


def test_store_refuses_what_it_could_not_recall(tmp_path: Path) -> None:
    store = SavedFilters(tmp_path)
    with pytest.raises(ConfigError, match="filter name"):
        store.save("has space", "status:done")
    with pytest.raises(ConfigError, match="status"):
        store.save("typo", "status:dne")
    store.save("quoted", 'agent:a "two words" ünïcode \t tab')
    assert store.get("quoted") == 'agent:a "two words" ünïcode \t tab'
    with pytest.raises(ConfigError, match=r"no saved filter 'nope' .*saved: quoted"):
        store.get("nope")
    (tmp_path / FILTERS_FILE).write_text('[filters]\nold = "status:bogus"\n')
    with pytest.raises(ConfigError, match=r"filters.toml: filters.old: filter status"):
        store.load()
    with pytest.raises(ConfigError):  # saving over it would lose what it holds
        store.save("new", "status:done")
    (tmp_path / FILTERS_FILE).write_text("other = 1\n[filters]\n")
    with pytest.raises(ConfigError, match="unknown top-level key 'other'"):
        store.load()


def test_cli_passes_the_filter_to_the_app(pool_path: Path, started_with: dict) -> None:
    result = CliRunner().invoke(cli(), ["tui", "--pool", str(pool_path), "--filter", "mine"])
    assert result.exit_code == 0, result.output
    assert started_with["saved_filter"] == "mine" and started_with["start"] == "trajectories"


def test_web_passes_the_filter_to_each_tab(pool_path: Path) -> None:
    pytest.importorskip("textual_serve")
    from agentworld.tui.command import web_server

    server = web_server(
        pool_path, None, None, "ann", "monitor", "127.0.0.1", 8566, filter_name="mine"
    )
    assert "--filter mine" in server.command
