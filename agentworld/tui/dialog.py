"""A one-line prompt (tags, note, reward override) as a modal screen."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label


class PromptDialog(ModalScreen[str | None]):
    """Ask for one value; Enter returns it, Escape returns None."""

    DEFAULT_CSS = """
    PromptDialog { align: center middle; }
    PromptDialog > Vertical {
        width: 70; max-width: 95%; height: auto; padding: 1 2;
        border: thick $accent; background: $surface;
    }
    PromptDialog Label { width: 100%; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, prompt: str, value: str = "", *, hint: str = "") -> None:
        super().__init__()
        self.prompt = prompt
        self.value = value
        self.hint = hint

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self.prompt, markup=False)
            yield Input(self.value, id="value")
            if self.hint:
                yield Label(self.hint, markup=False, classes="hint")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)
