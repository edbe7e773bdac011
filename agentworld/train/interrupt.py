"""Ctrl-C in a training run: finish the update under way, save it, stop.

A run saves at its end (and every ``save_every`` updates): an interrupt that ended the
process lost every update since, by default the whole run. The first SIGINT now asks the
loop to stop at the next update boundary, where the end-of-run checkpoint (weights and
optimizer state) is written as for a run that reached ``max_steps``; a second SIGINT
stops at once, as before. With several processes, each update the processes agree on
whether any was asked to stop, so all of them stop after the same update (a collective
one process skips would hang the others).
"""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType
from typing import Any


class StopRequest:
    """A context in which the first SIGINT sets ``requested`` and the second interrupts."""

    def __init__(self) -> None:
        self.requested = False
        self._old: Any = None

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():  # signals go there only
            self._old = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)
            self._old = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        sys.stderr.write(
            "\naw train: stopping after the update under way, then saving it "
            "(Ctrl-C again stops at once, losing the updates since the last checkpoint)\n"
        )
        sys.stderr.flush()


def stop_everywhere(acc: Any, requested: bool) -> bool:
    """Whether any process was asked to stop (one all-reduce of one number an update)."""
    import torch

    flag = torch.tensor(int(requested), device=acc.device)
    return int(acc.reduce(flag, "sum")) > 0
