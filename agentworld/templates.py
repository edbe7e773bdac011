"""Annotated example agents.toml and datasets.toml written by `aw init`."""

from __future__ import annotations

from pathlib import Path


def write_templates(folder: Path) -> list[Path]:
    """Write the example config files that do not exist yet; return what was written."""
    return []
