"""A step's text in full, for what the inspector shows clipped.

A read-only ``TextArea`` lays out only the lines on screen, so a megabyte-long tool
result opens in a fraction of a second and scrolls freely, where the inspector's
transcript (one ``Static``) would lay all of it out on every key. Lines are not
wrapped: wrapping a line of hundreds of kilobytes is as slow as laying it out.
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Footer, Header, TextArea


class FullTextScreen(Screen[None]):
    """One text, whole and read-only: move, select and copy as in an editor."""

    DEFAULT_CSS = """
    FullTextScreen #text { height: 1fr; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "back", "Back")]

    def __init__(self, what: str, text: str) -> None:
        super().__init__()
        self.what = what
        self.text = text

    def compose(self) -> ComposeResult:
        yield Header()
        yield TextArea(
            self.text, read_only=True, soft_wrap=False, show_line_numbers=True, id="text"
        )
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self.sub_title = self.what
        self.query_one("#text", TextArea).focus()

    def action_back(self) -> None:
        self.dismiss()
