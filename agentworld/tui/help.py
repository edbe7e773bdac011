"""The help screen: every key of every screen, generated from the bindings themselves."""

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


def bindings_of(cls: type) -> list[Binding]:
    """The bindings a class declares (its own, then inherited ones not overridden)."""
    seen: set[str] = set()
    out: list[Binding] = []
    for klass in cls.__mro__:
        for b in klass.__dict__.get("BINDINGS", ()):
            b = b if isinstance(b, Binding) else Binding(*b)
            if b.key not in seen:
                seen.add(b.key)
                out.append(b)
    return out


def key_name(b: Binding) -> str:
    return b.key_display or b.key


def help_text(sections: Iterable[tuple[str, type]]) -> Text:
    out = Text()
    for title, cls in sections:
        out.append(f"{title}\n", style="bold underline")
        for b in bindings_of(cls):
            out.append(f"  {key_name(b):>10}  ", style="bold cyan")
            out.append(f"{b.description or b.action}\n")
        out.append("\n")
    out.append("filter line\n", style="bold underline")
    out.append(f"  {FILTER_HELP}\n")
    return out


class HelpScreen(ModalScreen[None]):
    """Lists every key; any of escape, q or ? closes it."""

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 90; max-width: 100%; height: 90%; border: thick $accent; background: $surface;
        padding: 0 1;
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Close"),
        Binding("q", "close", "Close", show=False),
        Binding("question_mark", "close", "Close", show=False),
    ]

    def __init__(self, sections: list[tuple[str, type]]) -> None:
        super().__init__()
        self.sections = sections

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(help_text(self.sections), id="help")

    def action_close(self) -> None:
        self.dismiss()
