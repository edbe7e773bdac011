"""The run's curves as a picture in its folder (``curves.png``), drawn with matplotlib.

Drawn after each checkpoint of a run (every update of an online one) and at its
end. A draw is not free: importing matplotlib and rendering six panels took
1.2-2.5 s on the shared 2-core CI host (``layout="constrained"`` alone cost
another second, so the layout is set by hand), so during the run it happens in
a child process, at most once per ``min_interval_s`` with requests in between
coalesced, and the final picture is drawn in-process when the run ends. Not a
thread: matplotlib held the GIL against the training loop, and the update after
each checkpoint logged 30-50x fewer tokens/s (tiny model, 12 updates, save_every=4:
136 and 53 tok/s after the first checkpoint against ~3,000 with no redraw).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from agentworld.curves import METRICS, PNG, charts, read_rows


def draw_curves(run_dir: Path) -> Path | None:
    """Draw ``run_dir``'s metrics.jsonl to ``run_dir/curves.png``; None when there is nothing
    to draw. Written atomically: a viewer never opens half a picture."""
    found = charts(read_rows(run_dir / METRICS))
    if not found:
        return None
    # A bare Figure renders with Agg and leaves pyplot's global state (and any GUI) alone.
    from matplotlib.figure import Figure

    cols = 2 if len(found) > 1 else 1
    rows = math.ceil(len(found) / cols)
    fig = Figure(figsize=(6 * cols, 2.6 * rows + 0.4))
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.08, top=0.9, hspace=0.55, wspace=0.2)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, chart in zip(axes, found, strict=False):
        for s in chart.series:
            ax.plot(s.steps, s.values, marker="." if len(s.values) < 50 else None, label=s.key)
        ax.set_title(chart.title, fontsize="medium")
        ax.grid(alpha=0.3)
        if len(chart.series) > 1:
            ax.legend(fontsize="x-small")
    for ax in axes[len(found) :]:
        ax.set_visible(False)
    fig.suptitle(f"{run_dir.name}: by update")
    out = run_dir / PNG
    tmp = run_dir / f".{PNG}.{os.getpid()}.tmp.png"
    fig.savefig(tmp, dpi=80)
    tmp.replace(out)
    return out


class CurvePainter:
    """Redraws ``curves.png`` in a child process; ``close`` draws the final picture."""

    def __init__(self, run_dir: Path, *, min_interval_s: float = 30.0) -> None:
        self.run_dir = run_dir
        self.min_interval_s = min_interval_s
        self.error: Exception | None = None  # matplotlib missing, or a draw that failed
        self._wanted = threading.Event()
        self._closing = False
        self._drawn_size = -1  # metrics.jsonl's size at the last draw
        self._thread: threading.Thread | None = None

    def request(self) -> None:
        """Ask for a redraw soon (coalesced with the ones before it)."""
        if self._thread is None:
            # The thread only waits: on the interval, and on the child that draws.
            self._thread = threading.Thread(target=self._run, name="aw-curves", daemon=True)
            self._thread.start()
        self._wanted.set()

    def close(self, *, draw: bool = True) -> Path | None:
        """Stop the thread; draw the final picture (when ``draw`` and metrics changed since)."""
        self._closing = True
        self._wanted.set()
        if self._thread is not None:
            self._thread.join()
        return self._draw() if draw else None

    def _run(self) -> None:
        while not self._closing:
            self._wanted.wait()
            self._wanted.clear()
            if self._closing:
                return
            started = time.monotonic()
            self._draw_elsewhere()
            # Requests arriving meanwhile wait out the interval, then make one draw.
            while not self._closing and time.monotonic() - started < self.min_interval_s:
                time.sleep(min(0.2, self.min_interval_s))

    def _draw_elsewhere(self) -> None:
        """One draw in a child Python (the package from where this one has it); a failed
        one is left to the final, in-process draw to report."""
        size = self._metrics_size()
        if size is None or size == self._drawn_size or self.error is not None:
            return
        root = str(Path(__file__).resolve().parents[2])
        code = (
            f"import sys; sys.path.insert(0, {root!r}); "
            "from agentworld.train.plots import draw_curves; "
            f"draw_curves(__import__('pathlib').Path({str(self.run_dir)!r}))"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, check=False, stdin=subprocess.DEVNULL
        )
        if done.returncode == 0:
            self._drawn_size = size

    def _metrics_size(self) -> int | None:
        try:
            return (self.run_dir / METRICS).stat().st_size
        except FileNotFoundError:
            return None

    def _draw(self) -> Path | None:
        if self.error is not None:
            return None
        size = self._metrics_size()
        if size is None:
            return None
        if size == self._drawn_size:
            return self.run_dir / PNG if (self.run_dir / PNG).exists() else None
        try:
            out = draw_curves(self.run_dir)
        except Exception as exc:  # a picture is never worth a training run
            self.error = exc
            return None
        self._drawn_size = size
        return out
