"""Handing what a worker thread loaded to the screen that asked for it.

A screen's loads run on worker threads and may finish after the screen was
popped or while the app is closing. By then its widgets may be gone: showing
the result would raise ``NoMatches`` and the failed worker would end the app
(a user who presses escape while a large trajectory loads, or quits while the
monitor refreshes). Such a late result is dropped: nobody would see it.

So is the result of a worker cancelled by the time it would be shown: an exclusive
worker superseded by a newer one of its group. Its thread ran on (a thread cannot be
stopped), and shown after the newer one's result it would put back what the user
moved away from (the runs screen's previous run, after a key press picked another).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from textual._context import NoActiveAppError  # what a node with no app raises
from textual.screen import Screen
from textual.worker import NoActiveWorker, get_current_worker


def taken_down(screen: Screen) -> bool:
    """Whether ``screen`` is gone or going: popped, being removed, or its app closing."""
    try:
        app = screen.app
    except NoActiveAppError:  # off the DOM already, and not on the app's own thread
        return True
    # Textual marks a screen and all its widgets as pruning, at once, before it
    # removes any of them; there is no public flag for it.
    return not app.is_running or not screen.is_attached or bool(getattr(screen, "_pruning", False))


def deliver(screen: Screen, show: Callable[..., object], *result: Any) -> None:
    """From a worker thread: ``show(*result)`` on the UI thread, unless the screen is taken
    down or the worker was cancelled (checked there, where workers are cancelled)."""
    try:
        app = screen.app
    except NoActiveAppError:
        return
    try:
        worker = get_current_worker()
    except NoActiveWorker:  # a plain thread: nothing can supersede it
        worker = None

    def run() -> None:
        if (worker is None or not worker.is_cancelled) and not taken_down(screen):
            show(*result)

    if app.is_running:
        app.call_from_thread(run)
