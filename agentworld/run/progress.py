"""`aw run`'s progress: a live bar on a terminal, a plain line every few seconds off one.

Off a terminal (a log file, CI, `nohup`, a pipe) rich draws nothing, so a run
of slow episodes was silent for many minutes: a user could not tell a working
run from a hung one. There a thread prints one line every ``interval_s``,
whether or not an episode finished since (so a stalled run shows as one).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from agentworld.run.rollout import EpisodeResult

PROGRESS_S = 10.0


class RunProgress:
    """Counts finished episodes; shows them as a bar (terminal) or as timed lines."""

    def __init__(
        self,
        stream: TextIO,
        *,
        interval_s: float = PROGRESS_S,
        terminal: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream
        self.interval_s = interval_s
        self.terminal = stream.isatty() if terminal is None else terminal
        self.clock = clock
        self.total: int | None = None
        self.done = 0
        self.errors = 0
        self.rewards: list[float] = []
        self._started = clock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._bar: Progress | None = None
        self._task = None

    # -- what the session reports ----------------------------------------------------------

    def on_start(self, total: int) -> None:
        """The number of episodes the run will roll out."""
        self.total = total
        if self._bar is not None:
            self._bar.update(self._task, total=total)

    def on_result(self, result: EpisodeResult) -> None:
        """One episode finished (any status)."""
        self.done += 1
        if result.reward is not None:
            self.rewards.append(result.reward)
        if result.status != "done":
            self.errors += 1
        if self._bar is not None:
            self._bar.update(self._task, advance=1, reward=self.mean(), errors=self.errors)

    def mean(self) -> str:
        return f"{sum(self.rewards) / len(self.rewards):.3f}" if self.rewards else "-"

    def line(self) -> str:
        """The plain progress line: ``rollouts 3/32 · reward 0.333 · errors 0 · 45 s``."""
        total = "?" if self.total is None else str(self.total)
        elapsed = self.clock() - self._started
        return (
            f"aw run: rollouts {self.done}/{total} · reward {self.mean()} · "
            f"errors {self.errors} · {elapsed:.0f} s"
        )

    # -- showing it -----------------------------------------------------------------------

    def __enter__(self) -> RunProgress:
        self._started = self.clock()
        if self.terminal:
            self._bar = Progress(
                TextColumn("rollouts"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("reward {task.fields[reward]}  errors {task.fields[errors]}"),
                TimeElapsedColumn(),
                console=Console(file=self.stream),
                transient=True,
            )
            self._task = self._bar.add_task("rollouts", total=self.total, reward="-", errors=0)
            self._bar.start()
        else:
            self._thread = threading.Thread(target=self._tick, name="aw-run-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            self._bar.stop()
        if self._thread is not None:
            self._stop.set()
            self._thread.join()

    def _tick(self) -> None:
        # A thread, not a task on the run's loop: a loop busy with many episodes (or
        # blocked by one) must not stop the lines that say how the run is doing.
        while not self._stop.wait(self.interval_s):
            print(self.line(), file=self.stream, flush=True)
