"""A worker's late result for a screen that was popped (or whose app is closing) is dropped,
not shown into widgets that are gone, which would fail the worker and end the app."""

from __future__ import annotations

import asyncio
import threading

from textual.app import App, ComposeResult
from textual.screen import Screen
from textual.widgets import Static

from agentworld.tui.delivery import deliver, taken_down


class Loading(Screen[None]):
    def __init__(self) -> None:
        super().__init__()
        self.shown: list[str] = []

    def compose(self) -> ComposeResult:
        yield Static("loading", id="body")

    def show(self, text: str) -> None:
        self.query_one("#body", Static).update(text)  # NoMatches once its widgets are gone
        self.shown.append(text)


class Host(App[None]):
    pass


async def from_a_thread(app: App, screen: Loading, text: str) -> None:
    """``deliver`` from a worker thread of the app's (as the screens' loads run)."""
    done = threading.Event()

    def work() -> None:
        try:
            deliver(screen, screen.show, text)
        finally:
            done.set()

    app.run_worker(work, thread=True)
    while not done.is_set():
        await asyncio.sleep(0.01)


async def test_a_result_reaches_a_shown_screen_and_not_a_popped_one():
    app = Host()
    async with app.run_test() as pilot:
        screen = Loading()
        await app.push_screen(screen)
        assert not taken_down(screen)
        await from_a_thread(app, screen, "first")
        await pilot.pause()
        assert screen.shown == ["first"]
        await app.pop_screen()
        await pilot.pause()
        assert taken_down(screen)
        await from_a_thread(app, screen, "late")  # would raise NoMatches on the UI thread
        await pilot.pause()
        assert screen.shown == ["first"] and app.is_running
    assert app.return_code in (0, None)


async def test_a_screen_of_an_app_that_closed_is_taken_down():
    app = Host()
    async with app.run_test() as pilot:
        screen = Loading()
        await app.push_screen(screen)
        await pilot.pause()
    assert taken_down(screen)


async def test_a_superseded_workers_late_result_is_dropped():
    """An exclusive worker's thread runs on after a newer one of its group replaced it; its
    result, arriving after the newer one's, must not put back what the user moved away from
    (the runs screen showed the previous run after a key press picked another, under load)."""
    app = Host()
    async with app.run_test() as pilot:
        screen = Loading()
        await app.push_screen(screen)
        old_started, release_old, old_done = threading.Event(), threading.Event(), threading.Event()

        def load_old() -> None:
            old_started.set()
            release_old.wait(5)
            try:
                deliver(screen, screen.show, "old")
            finally:
                old_done.set()

        old = screen.run_worker(load_old, thread=True, exclusive=True, group="g")
        while not old_started.is_set():
            await asyncio.sleep(0.01)
        new = screen.run_worker(
            lambda: deliver(screen, screen.show, "new"), thread=True, exclusive=True, group="g"
        )
        await new.wait()
        assert old.is_cancelled and screen.shown == ["new"]
        release_old.set()  # the old thread finishes now, after the new one showed its result
        while not old_done.is_set():
            await asyncio.sleep(0.01)
        await pilot.pause()
        assert screen.shown == ["new"]
        assert str(screen.query_one("#body", Static).render()) == "new"
        # A worker that was never superseded still shows its result.
        await from_a_thread(app, screen, "later")
        await pilot.pause()
        assert screen.shown == ["new", "later"]
