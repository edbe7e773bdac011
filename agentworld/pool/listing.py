"""Listing tables for `aw pool ls`: ids whole and readable at any terminal width.

Rich shrinks every column of a table wider than the terminal, ids included,
down to ``…``: on an 80-column terminal a trajectory listing showed only ids
and ellipses. Here the columns a user copies or scans (ids, status, counts,
times) keep their full width, the free-text ones (agent, task, text) share
what is left and end in ``…`` when cut; a free-text column empty in every
row is left out, and so are the least useful ones (lowest ``keep``) when too
little room is left for them. Piped output is not cut at all.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from agentworld.literal import clean

GAP = 2  # columns between two cells
MIN_FLEX = 5  # the narrowest a cut free-text column gets
EMPTY = ("", "-")


@dataclass(frozen=True)
class Column:
    name: str
    flex: bool = False  # free text: may be cut, left out when empty in every row
    right: bool = False  # numbers
    keep: int = 0  # free text: the lowest is the first left out when the width is short


# `aw pool ls`: one row per trajectory, and with --trajectory one row per step.
TRAJECTORIES = (
    Column("trajectory"),
    Column("agent", flex=True, keep=3),
    Column("dataset", flex=True, keep=1),
    Column("task", flex=True, keep=2),
    Column("status"),
    Column("steps", right=True),
    Column("reward", right=True),
    Column("labels", flex=True),
    Column("last"),
)
STEPS = (
    Column("#", right=True),
    Column("step"),
    Column("status"),
    Column("policy", right=True),
    Column("tokens", right=True),
    Column("source"),
    Column("text", flex=True),
)


def console() -> Console:
    """The console for a listing: the terminal's width, or unlimited when piped."""
    out = Console(highlight=False)
    if not out.is_terminal and "COLUMNS" not in os.environ:
        out.width = 100_000  # rows as they are, for grep and files (tables do not expand)
    return out


def short_time(ts: float | None, now: float | None = None) -> str:
    """``ls -l``'s habit: month, day, hour and minute this year, the date alone for older ones."""
    if not ts:
        return "-"
    t = time.localtime(ts)
    if t.tm_year == time.localtime(now).tm_year:
        return time.strftime("%m-%d %H:%M", t)
    return time.strftime("%Y-%m-%d", t)


def fit_table(
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    width: int,
    *,
    title: str | None = None,
    caption: str | None = None,
) -> Table:
    """A table of ``rows`` (plain strings, never markup) that fits ``width`` where it can."""
    keep = [i for i, c in enumerate(columns) if not c.flex or any(r[i] not in EMPTY for r in rows)]
    natural = {i: max([len(columns[i].name), *(len(r[i]) for r in rows)]) for i in keep}
    while True:
        flex = [i for i in keep if columns[i].flex]
        fixed = sum(natural[i] for i in keep if i not in flex) + GAP * (len(keep) - 1)
        least = sum(min(natural[i], MIN_FLEX) for i in flex)
        if not flex or fixed + least <= width:
            break
        keep.remove(min(reversed(flex), key=lambda i: columns[i].keep))  # ties: the rightmost
    limits = _share(max(0, width - fixed), {i: natural[i] for i in flex})
    table = Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, GAP // 2),
        collapse_padding=True,
        title=Text(title) if title else None,
        caption=Text(caption) if caption else None,
        caption_justify="left",
        title_justify="left",
    )
    for i in keep:
        c = columns[i]
        table.add_column(
            c.name,
            justify="right" if c.right else "left",
            no_wrap=True,
            overflow="ellipsis",
            min_width=natural[i] if i not in flex else min(natural[i], limits[i]),
            max_width=limits.get(i),
        )
    for r in rows:
        table.add_row(*(Text(clean(r[i])) for i in keep))
    return table


def _share(room: int, wants: dict[int, int]) -> dict[int, int]:
    """Split ``room`` columns among free-text columns: the narrow ones whole, the rest evenly."""
    out: dict[int, int] = {}
    left = dict(wants)
    while left:
        each = max(MIN_FLEX, room // len(left))
        narrow = {i: w for i, w in left.items() if w <= each}
        if not narrow:  # every one wider than its share: cut them all to it
            return {**out, **{i: min(w, each) for i, w in left.items()}}
        for i, w in narrow.items():
            out[i] = w
            room = max(0, room - w)
            del left[i]
    return out
