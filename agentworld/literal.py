"""Agent-produced text as inert data wherever it is shown (`aw tui`, `aw pool show` and
`ls`): never markup, never raw terminal escape sequences."""

from __future__ import annotations

import re
from typing import Any

from rich.text import Text

# C0 controls except tab and newline, DEL, and C1 controls: a terminal would act on them.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _visible(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


def clean(value: Any) -> str:
    """``str(value)`` with control characters shown as ``\\xNN`` escapes."""
    s = value if isinstance(value, str) else ("" if value is None else str(value))
    return _CONTROL.sub(_visible, s)


def literal(value: Any, style: str = "") -> Text:
    """A rich Text that displays ``value`` exactly: ``[bold]`` stays ``[bold]``."""
    return Text(clean(value), style=style)


def one_line(value: Any, width: int = 80, style: str = "") -> Text:
    """A single-line literal preview, newlines folded, cut to ``width`` characters."""
    s = clean(value).replace("\n", " ⏎ ").replace("\t", " ")
    if len(s) > width:
        s = s[: width - 1] + "…"
    return Text(s, style=style)
