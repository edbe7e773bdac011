"""A step's text in full, for what the inspector shows clipped.

A read-only ``TextArea`` lays out only the lines on screen, so a megabyte-long tool
result opens in a fraction of a second and scrolls freely, where the inspector's
transcript (one ``Static``) would lay all of it out on every key. Lines wrap unless
one is longer than ``WRAP_MAX_CHARS`` (wrapping a line of hundreds of kilobytes is as slow
as laying it out); ``w`` turns wrapping on or off.
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Footer, Header, TextArea

WRAP_MAX_CHARS = 20_000  # the longest line wrapped by default


class FullTextScreen(Screen[None]):
    """One text, whole and read-only: move, select and copy as in an editor."""

    DEFAULT_CSS = """
    FullTextScreen #text { height: 1fr; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("w", "wrap", "Wrap", tooltip="Wrap long lines, or scroll them sideways"),
    ]

    def __init__(self, what: str, text: str) -> None:
        super().__init__()
        self.what = what
        self.text = text

    def compose(self) -> ComposeResult:
        yield Header()
        longest = max(map(len, self.text.splitlines()), default=0)
        yield TextArea(
            self.text,
            read_only=True,
            soft_wrap=longest <= WRAP_MAX_CHARS,
            show_line_numbers=True,
            id="text",
        )
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self.query_one("#text", TextArea).focus()
        self._title()

    def _title(self) -> None:
        wrap = self.query_one("#text", TextArea).soft_wrap
        self.sub_title = (
            f"{self.what}  ·  {'wrapped' if wrap else 'long lines scroll sideways'} (w)"
        )

    def action_wrap(self) -> None:
        area = self.query_one("#text", TextArea)
        area.soft_wrap = not area.soft_wrap
        self._title()

    def action_back(self) -> None:
        self.dismiss()
