"""The docs' screenshots load nothing from outside the repository, and each is listed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agentworld.tui.screenshot import local_fonts

from .conftest import app_for
from .docs_screenshots import ROOT, SHOTS
from .test_screens import loaded_list

OUTSIDE = re.compile(r"url\((?!#)|@font-face|@import", re.IGNORECASE)  # url(#id) is in-file


def outside_references(svg: str) -> list[str]:
    """What in ``svg`` would be fetched from elsewhere: fonts, stylesheets, a URL in
    its style sheet (text on screen may show a URL: that is content, not a reference)."""
    style = svg.split("<style>", 1)[-1].split("</style>", 1)[0]
    return OUTSIDE.findall(svg) + re.findall(r"https?://[^\s\"')]+", style)


@pytest.mark.parametrize("svg", sorted((ROOT / "docs").glob("*.svg")), ids=lambda p: p.name)
def test_docs_svgs_reference_no_font_outside_the_repo(svg: Path) -> None:
    assert outside_references(svg.read_text()) == []


def test_every_screenshot_is_made_by_the_script_and_listed_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    on_disk = {p.name for p in (ROOT / "docs").glob("tui-*.svg")}
    assert on_disk == {f"tui-{name}.svg" for name in SHOTS}
    for name in on_disk:
        assert f"(docs/{name})" in readme, name


def test_rich_web_fonts_are_replaced() -> None:
    import io

    from rich.console import Console

    console = Console(record=True, width=20, file=io.StringIO())
    console.print("x")
    raw = console.export_svg()
    assert outside_references(raw)  # what Rich writes: Fira Code from cdnjs
    assert outside_references(local_fonts(raw)) == []
    assert "monospace" in local_fonts(raw)


async def test_the_apps_own_screenshots_use_local_fonts(pool_path: Path) -> None:
    async with app_for(pool_path).run_test(size=(80, 24)) as pilot:
        await loaded_list(pilot)
        assert outside_references(pilot.app.export_screenshot()) == []
