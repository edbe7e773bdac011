"""The help screen: the keys of the screen it was opened on, then the ones that work
everywhere, generated from the bindings themselves (Textual's own are left out)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from agentworld.tui.filters import FILTER_HELP

# Keys as a keyboard labels them (Textual names them for code: ``question_mark``).
KEY_NAMES = {
    "escape": "esc",
    "enter": "Enter",
    "space": "Space",
    "pagedown": "PgDn",
    "pageup": "PgUp",
    "home": "Home",
    "end": "End",
    "question_mark": "?",
    "full_stop": ".",
    "slash": "/",
    "number_sign": "#",
    "right_square_bracket": "]",
    "left_square_bracket": "[",
}


def bindings_of(cls: type) -> list[Binding]:
    """The bindings a class of ours declares (its own, then inherited ones not
    overridden); Textual's built-in ones (``ctrl+c help_quit``, focus keys) are not ours
    to document."""
    seen: set[str] = set()
    out: list[Binding] = []
    for klass in cls.__mro__:
        if klass.__module__.split(".")[0] == "textual":
            continue
        for b in klass.__dict__.get("BINDINGS", ()):
            b = b if isinstance(b, Binding) else Binding(*b)
            if b.key not in seen:
                seen.add(b.key)
                out.append(b)
    return out


def key_name(b: Binding) -> str:
    """The key as printed on a keyboard: ``?``, ``PgDn``, ``esc``."""
    return b.key_display or KEY_NAMES.get(b.key, b.key)


def what_it_does(b: Binding) -> str:
    """A sentence on what the key does (the tooltip, else the footer's word)."""
    return b.tooltip or b.description or b.action


def help_text(sections: Iterable[tuple[str, type]], filter_line: bool = False) -> Text:
    """Each section's keys; ``filter_line`` adds the filter line's syntax."""
    out = Text()
    listed: set[str] = set()
    for title, cls in sections:
        out.append(f"{title}\n", style="bold underline")
        for b in bindings_of(cls):
            if b.key in listed:  # a screen's own key for an app-wide one: listed once
                continue
            listed.add(b.key)
            out.append(f"  {key_name(b):>10}  ", style="bold cyan")
            out.append(f"{what_it_does(b)}\n")
        out.append("\n")
    out.append("  ctrl+p  ", style="bold cyan")
    out.append("command palette: every command here by name\n\n")
    if filter_line:
        out.append("filter line\n", style="bold underline")
        out.append(f"  {FILTER_HELP}\n")
    return out


class HelpScreen(ModalScreen[None]):
    """Lists the keys; any of escape, q or ? closes it."""

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 90; max-width: 100%; height: 90%; border: thick $accent; background: $surface;
        padding: 0 1;
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Close help"),
        Binding("q", "close", "Close help", show=False),
        Binding("question_mark", "close", "Close help", show=False),
    ]

    def __init__(self, sections: list[tuple[str, type]], filter_line: bool = False) -> None:
        super().__init__()
        self.sections = sections
        self.filter_line = filter_line

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(help_text(self.sections, self.filter_line), id="help")

    def action_close(self) -> None:
        self.dismiss()
