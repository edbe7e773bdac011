"""`python -m agentworld.tui`: the `aw tui` command alone (what `aw tui --web` serves)."""

from __future__ import annotations

import typer

from agentworld.tui.command import tui

if __name__ == "__main__":
    typer.run(tui)
