"""SVG screenshots that reference nothing outside the file: system monospace fonts.

Rich's SVG template loads Fira Code from cdnjs; a screenshot opened from docs/, a
git host or an air-gapped machine would fetch a font from the internet to show
it (or, offline, wait for it). The app's screenshots (the docs, the snapshot tests,
Textual's own "save screenshot") go through ``local_fonts`` instead.
"""

from __future__ import annotations

import re

# Fonts every platform has, widest coverage first; all draw box characters on the grid.
MONOSPACE = (
    'ui-monospace, "SFMono-Regular", "DejaVu Sans Mono", Menlo, Consolas, '
    '"Liberation Mono", monospace'
)
_FONT_FACE = re.compile(r"\s*@font-face\s*\{[^}]*\}")
_FAMILY = re.compile(r"font-family:\s*Fira Code,\s*monospace;")
_GENERATOR = re.compile(r"\s*<!-- Generated with Rich https?://[^>]*-->")


def local_fonts(svg: str) -> str:
    """``svg`` (Rich's export) with its web fonts dropped for the system's monospace."""
    svg = _FONT_FACE.sub("", svg)
    svg = _FAMILY.sub(f"font-family: {MONOSPACE};", svg)
    return _GENERATOR.sub("", svg, count=1)
