"""Handing what a worker thread loaded to the screen that asked for it.

A screen's loads run on worker threads and may finish after the screen was
popped or while the app is closing. By then its widgets may be gone: showing
the result would raise ``NoMatches`` and the failed worker would end the app
(a user who presses escape while a large trajectory loads, or quits while the
monitor refreshes). Such a late result is dropped: nobody would see it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from textual._context import NoActiveAppError  # what a node with no app raises
from textual.screen import Screen


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
    """From a worker thread: ``show(*result)`` on the UI thread, unless the screen is taken down."""
    try:
        app = screen.app
    except NoActiveAppError:
        return

    def run() -> None:
        if not taken_down(screen):
            show(*result)

    if app.is_running:
        app.call_from_thread(run)
