"""Agent-produced text as inert data wherever it is shown (`aw tui`, `aw pool show` and
`ls`): never markup, never raw terminal escape sequences."""

from __future__ import annotations

import re
from typing import Any

from rich.text import Text

# C0 controls except tab and newline, DEL, and C1 controls: a terminal would act on them.
# And the invisible format characters that change what text appears to say (Trojan
# Source): bidirectional controls (U+061C, U+200E-200F, U+202A-202E, U+2066-2069) reorder
# a line; zero-width space, word joiner and BOM (U+200B, U+2060, U+FEFF) hide inside one.
# ZWJ and ZWNJ (U+200C-200D) are left as they are: emoji and several scripts need them.
_CONTROL = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b\u200e\u200f\u202a-\u202e\u2060\u2066-\u2069\ufeff]"
)


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def clean(value: Any) -> str:
    """``str(value)`` with control characters shown as ``\\xNN`` escapes (``\\uNNNN`` for
    the bidirectional and zero-width ones)."""
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
