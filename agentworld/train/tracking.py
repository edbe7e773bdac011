"""Where a run's per-update metrics go: ``metrics.jsonl`` always, Accelerate's trackers on request.

``metrics.jsonl`` is the run's own record (the curves, `aw tui`'s runs screen
and scripts read it): one row per update, so a run resumed after a kill first
drops the rows of updates its checkpoint does not hold (they are trained again
and logged again) and a line torn by the kill. Trackers (`report_to =
tensorboard | wandb | trackio | mlflow | ...`) are Accelerate's own:
``Accelerator(log_with=...)``, ``init_trackers`` and ``log``; nothing here
re-implements one.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from agentworld.errors import ConfigError

METRICS = "metrics.jsonl"
PROJECT = "agentworld"  # the trackers' project; TensorBoard writes under <run>/agentworld/


def keep_until(path: Path, step: int) -> int:
    """Drop rows of ``path`` past ``step`` and any line that is not a whole JSON row; return
    how many lines went. The file is replaced atomically, and only when something goes."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return 0
    kept: list[str] = []
    for line in lines:
        try:
            row = json.loads(line)
            ok = isinstance(row, dict) and int(row.get("step", 0)) <= step
        except (ValueError, TypeError):
            ok = False
        if ok:
            kept.append(line)
    dropped = len(lines) - len(kept)
    if dropped:
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text("".join(x + "\n" for x in kept), encoding="utf-8")
        tmp.replace(path)
    return dropped


def tracker_config(config: dict[str, Any]) -> dict[str, Any]:
    """The run's config as trackers take it: scalars and strings only (TensorBoard's hparams
    refuse lists and None)."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if value is None:
            continue
        if isinstance(value, list | tuple):
            value = ",".join(map(str, value))
        out[key] = value
    return out


def check_trackers(wanted: tuple[str, ...]) -> None:
    """Before the Accelerator: one that is asked for a tracker whose package is missing
    drops it with only a debug line (or a warning when none is left). Say so."""
    if not wanted or "all" in wanted:
        return
    from accelerate.tracking import get_available_trackers

    got = {str(t) for t in get_available_trackers()}
    missing = [name for name in wanted if name not in got]
    if missing:
        raise ConfigError(
            f"train.report_to: {missing[0]!r} is not installed here "
            f"(pip install {missing[0]}), or set report_to = none"
        )


def scalars(row: dict[str, Any]) -> dict[str, float]:
    """The numbers of a metrics row (trackers take no lists, strings or None)."""
    return {
        k: float(v)
        for k, v in row.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
        if k not in ("step", "time")
    }


class MetricsLog:
    """One row per update to ``metrics.jsonl`` (main process) and to the trackers (all of
    them; Accelerate logs on the main process only)."""

    def __init__(self, out_dir: Path, accelerator: Any, *, start_step: int) -> None:
        self.acc = accelerator
        self.path = out_dir / METRICS
        self.dropped = 0
        self.file = None
        self.tracking = bool(accelerator.log_with)
        if accelerator.is_main_process:
            self.dropped = keep_until(self.path, start_step)
            self.file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115

    def start(self, config: dict[str, Any], run_name: str) -> None:
        """Open the trackers' run (every process calls it; Accelerate picks the main one)."""
        if self.tracking:
            self.acc.init_trackers(
                PROJECT,
                config=tracker_config(config),
                init_kwargs={"wandb": {"name": run_name}, "trackio": {"name": run_name}},
            )

    def write(self, row: dict[str, Any]) -> None:
        if self.file is not None:
            self.file.write(json.dumps(row) + "\n")
            self.file.flush()
        if self.tracking:
            self.acc.log(scalars(row), step=int(row["step"]))

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
