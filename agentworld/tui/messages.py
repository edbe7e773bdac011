"""Messages between the app and its screens, named as events."""

from __future__ import annotations

from textual.message import Message

from agentworld.tui.curation import LabelAction


class PoolRefreshed(Message):
    """The index took in new records or labels; screens showing lists reload."""

    def __init__(self, records: int) -> None:
        super().__init__()
        self.records = records


class TrajectoryLabelled(Message):
    """A labelling action (or its undo) landed in the overlay."""

    def __init__(self, action: LabelAction, origin: object, undone: bool = False) -> None:
        super().__init__()
        self.action = action
        self.origin = origin  # the screen that labelled (it shows the label itself)
        self.undone = undone
