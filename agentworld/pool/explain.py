"""Why a selection matched nothing, in the flags a person typed: for `aw pool ls` and `aw export`."""

from __future__ import annotations

import dataclasses
from typing import Any

from agentworld.pool.index_queries import IndexQueries
from agentworld.pool.selection import Selection


def selection_dict(selection: Selection) -> dict[str, Any]:
    """The selection's non-default filters, for the manifest."""
    default = Selection()
    out = {}
    for f in dataclasses.fields(selection):
        value = getattr(selection, f.name)
        if value != getattr(default, f.name):
            out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


def _flag(name: str, value: Any) -> str:
    """A selection field as the CLI flag that sets it."""
    if name == "trainable_only":
        return "not labelled untrainable (default; --include-untrainable)"
    if isinstance(value, tuple | list):
        value = ",".join(value)
    return f"--{name.replace('_', '-')} {value}"


def explain_empty(idx: IndexQueries, selection: Selection) -> list[str]:
    """Why a selection matched nothing: its filters, each one's count when dropped, what the pool has.

    For a person fixing the command line: the first line names every filter;
    the next say how many trajectories each filter alone removed (the count
    without it), and for ``--agent`` / ``--dataset`` the names the pool holds.
    """
    filters = selection_dict(selection)
    if not filters:
        return ["nothing matched: the pool holds no trajectories"]
    lines = ["nothing matched " + ", ".join(_flag(k, v) for k, v in filters.items())]
    default = Selection()
    for name in filters:
        without = dataclasses.replace(selection, **{name: getattr(default, name)})
        n = idx.count_trajectories(without)
        if n:
            lines.append(f"  without {_flag(name, filters[name])}: {n} trajectories")
    per = idx.stats()["per_agent"]
    for name in ("dataset", "agent"):
        if name in filters:
            held: dict[str, int] = {}
            for r in per:
                held[str(r[name])] = held.get(str(r[name]), 0) + r["trajectories"]
            names = ", ".join(f"{k} ({v})" for k, v in sorted(held.items())) or "none"
            lines.append(f"  {name}s in the pool (trajectories): {names}")
    if len(lines) == 1:
        lines.append(f"  the pool holds {idx.count_trajectories(Selection())} trajectories")
    return lines
