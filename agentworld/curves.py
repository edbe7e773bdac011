"""A training run's curves: which of its ``metrics.jsonl`` keys go in which panel.

One definition for the two places that draw them: the PNG `aw train` writes
into the run folder (``train/plots.py``, matplotlib) and `aw tui`'s runs
screen (plotext in the terminal). Imports nothing heavy: `aw tui` reads it
without torch.

Panels list the keys known today and match new ones by name (a metric whose
name mentions ``kl`` joins the KL panel, ``clip`` or ``truncat`` the clipping
panel...), so a key the trainer starts logging appears without an edit here,
and a key a run never logged is simply absent.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

METRICS = "metrics.jsonl"
PNG = "curves.png"


@dataclass(frozen=True)
class Panel:
    """One plot: its title, the keys it shows first, and name fragments that bring others."""

    title: str
    keys: tuple[str, ...]
    matches: tuple[str, ...] = ()

    def takes(self, key: str) -> bool:
        return key in self.keys or any(m in key for m in self.matches)


PANELS = (
    Panel("reward", ("reward_mean",), ("reward",)),
    Panel("loss", ("loss",), ("loss",)),
    Panel("KL / mismatch", ("kl",), ("kl", "logprob", "mismatch", "delta")),
    Panel("entropy", ("entropy",), ("entropy",)),
    Panel("clipping", ("clip_frac",), ("clip", "truncat")),
    Panel("ratios / TIS", ("ratio_mean", "ess"), ("ratio", "tis", "ess_")),
    Panel("tokens/s", ("tokens_per_s",), ("per_s",)),
    Panel("grad norm", ("grad_norm",), ("grad",)),
)


@dataclass
class Series:
    key: str
    steps: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)


@dataclass
class Chart:
    title: str
    series: list[Series]


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a ``metrics.jsonl``, one per update (a later row for a step wins, as a
    resumed run's would); a torn or foreign line is skipped."""
    by_step: dict[int, dict[str, Any]] = {}
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, IsADirectoryError):
        return []
    for line in text.splitlines():
        try:
            row = json.loads(line)
            step = int(row["step"])
        except (ValueError, TypeError, KeyError):
            continue
        if isinstance(row, dict):
            by_step[step] = row
    return [by_step[s] for s in sorted(by_step)]


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v) if math.isfinite(v) else None


def charts(rows: Iterable[dict[str, Any]]) -> list[Chart]:
    """The panels that have data, each with its series by update; a key goes to the first
    panel that takes it, and only the panels' keys are drawn (counts and ids are not curves)."""
    rows = list(rows)
    keys: list[str] = []
    for row in rows:
        keys += [k for k in row if k not in keys and _number(row[k]) is not None]
    out = []
    placed: set[str] = set()
    for panel in PANELS:
        mine = [k for k in panel.keys if k in keys]
        mine += [k for k in keys if k not in mine and k not in placed and panel.takes(k)]
        series = []
        for key in mine:
            placed.add(key)
            s = Series(key)
            for row in rows:
                v = _number(row.get(key))
                if v is not None:
                    s.steps.append(int(row["step"]))
                    s.values.append(v)
            if s.values:
                series.append(s)
        if series:
            out.append(Chart(panel.title, series))
    return out


def run_folders(root: Path) -> list[Path]:
    """Training run folders under ``root`` (those with a metrics.jsonl), newest first; ``root``
    itself when it is one."""
    if (root / METRICS).is_file():
        return [root]
    if not root.is_dir():
        return []
    found = [p.parent for p in root.glob(f"*/{METRICS}")]
    found += [p.parent for p in root.glob(f"*/*/{METRICS}")]
    return sorted(set(found), key=lambda p: (p / METRICS).stat().st_mtime, reverse=True)
