"""The monitor's proxy panel: GET /aw/stats as labelled lines a person reads at a glance.

The stats are nested JSON (``steps: {ok, error, total}``) that grows fields as the
proxy does; each top-level key becomes one line, a nested table its ``name value``
pairs, so a field added to the proxy shows up here readable without a change.
"""

from __future__ import annotations

import re
from typing import Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.text import Text

from agentworld.literal import one_line

MAX_LINES = 20  # stats keys shown
MAX_VALUE = 400  # characters of one value: a long error text is cut, not the panel
INDENT = "  "
# After a separator: a line breaks between two pairs, never inside one.
_BREAK = re.compile(r"(?<= · )|(?<=, )")


def _number(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return "-" if v is None else ("yes" if v else "no")
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def _duration(seconds: float) -> str:
    s = int(seconds)
    if s < 60:
        return f"{seconds:.0f} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


def _value(key: str, v: Any) -> str:
    """One stats value as words: a table as its pairs (the total first), a time in s
    as a duration."""
    if isinstance(v, dict):
        items = sorted(v.items(), key=lambda kv: kv[0] != "total")
        return " · ".join(f"{_label(k)} {_value(k, x)}" for k, x in items) or "-"
    if isinstance(v, list):
        return ", ".join(_value(key, x) for x in v) or "-"
    if _seconds(key) and isinstance(v, int | float) and not isinstance(v, bool):
        return _duration(v)
    return _number(v)


def _seconds(key: str) -> bool:
    """Whether a key holds seconds (``uptime_s``; ``steps_per_s`` is a rate)."""
    return key.endswith("_s") and not key.endswith("per_s")


def _label(key: str) -> str:
    return (key.removesuffix("_s") if _seconds(key) else key).replace("_", " ")


def wrap_pairs(head: str, value: str, width: int) -> list[str]:
    """``head value`` in lines of at most ``width`` characters, broken only between
    pairs (after `` · `` or ``, ``), the later lines indented: a pair broken across
    lines (``bad`` / ``request 0``) reads as two. A pair wider than a line stays whole
    (the widget folds it)."""
    lines: list[str] = []
    line, empty = head, True
    for piece in _BREAK.split(value):
        if not empty and len(line) + len(piece.rstrip()) > width:
            lines.append(line.rstrip())
            line = INDENT
        line, empty = line + piece, False
    lines.append(line.rstrip())
    return lines


def proxy_panel(stats: dict[str, Any] | str, width: int = 60) -> Text:
    """The proxy's stats (or why they could not be read) as ``label value`` lines,
    wrapped to ``width`` between pairs: nothing is cut to fit."""
    out = Text()
    out.append("proxy\n", style="bold underline")
    if isinstance(stats, str):
        out.append(one_line(stats, MAX_VALUE, style="red"))
        out.append("\n")
        return out
    for key, v in list(stats.items())[:MAX_LINES]:
        head = f"{_label(key)} "
        lines = wrap_pairs(head, one_line(_value(key, v), MAX_VALUE).plain, width)
        out.append(head, style="bold")
        out.append("\n".join([lines[0][len(head) :], *lines[1:]]))
        out.append("\n")
    return out


class ProxyPanel:
    """``proxy_panel`` drawn at the width its widget has when drawn, so a resized
    terminal rewraps it (a width fixed when the stats came would cut or waste a line)."""

    def __init__(self, stats: dict[str, Any] | str) -> None:
        self.stats = stats

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        panel = proxy_panel(self.stats, options.max_width)
        panel.rstrip()  # no blank line under it
        yield panel
