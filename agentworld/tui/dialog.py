"""Modal dialogs: a one-line prompt (tags, note, reward override, a filter's name) and a
pick from a list (a saved filter)."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList
from textual.widgets.option_list import Option


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


class ChoiceDialog(ModalScreen[str | None]):
    """Pick one of ``choices`` (id → what to show); Enter returns its id, Escape None."""

    DEFAULT_CSS = """
    ChoiceDialog { align: center middle; }
    ChoiceDialog > Vertical {
        width: 80; max-width: 95%; height: auto; max-height: 80%; padding: 1 2;
        border: thick $accent; background: $surface;
    }
    ChoiceDialog Label { width: 100%; }
    ChoiceDialog OptionList { height: auto; max-height: 16; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, prompt: str, choices: dict[str, str]) -> None:
        super().__init__()
        self.prompt = prompt
        self.choices = choices

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self.prompt, markup=False)
            yield OptionList(
                *(Option(Text(shown), id=key) for key, shown in self.choices.items()), id="choices"
            )

    def on_mount(self) -> None:
        self.query_one("#choices", OptionList).focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)
