"""The group view on a small terminal: labels as the rest of the app writes them, and every
member's card reachable and whole at 80×24 and 120×40."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.pilot import Pilot

from agentworld import records
from agentworld.pool import Pool
from agentworld.tui.group import CARD_WIDTH, GroupScreen

from .conftest import T0, app_for, step, write_pool
from .test_inspector_layout import screen_text
from .test_screens import until


def wide_group(path: Path, n: int) -> Path:
    """One group of ``n`` trajectories whose answers are taller than a small screen; the
    last one labelled with every field, a long note included."""
    recs: list[dict] = []
    for k in range(n):
        tid = f"tr_wide-{k}"
        answer = f"answer{k} " + "words here " * 50 + f"END{k}"
        recs.append(step(tid, 0, group="g-wide", content=answer))
        recs.append(
            records.make_end(
                id=f"en_{tid}",
                trajectory=tid,
                agent="coder",
                dataset="gsm8k",
                group="g-wide",
                task="g-wide",
                status="done",
                steps=1,
                reward=float(k),
                ended_at=T0,
            )
        )
    write_pool(path, recs)
    pool = Pool.open(path, recover=False)
    pool.labels.set(
        [f"trajectory:tr_wide-{n - 1}"],
        {
            "note": "model rambles",
            "quality": "good",
            "tags": ["arith", "short"],
            "trainable": True,
        },
        author="t",
    )
    pool.close()
    return path


async def shown_group(pilot: Pilot, focus: str | None = None) -> GroupScreen:
    pilot.app.show_group("g-wide", focus)  # type: ignore[attr-defined]
    screen = lambda: pilot.app.screen  # noqa: E731
    await until(pilot, lambda: isinstance(screen(), GroupScreen) and screen().members)
    return screen()


async def test_group_labels_read_as_everywhere_else(tmp_path: Path) -> None:
    """They showed as Python (``tags=['arith', 'short']``, ``trainable=True``), and a note
    written first pushed the trainable flag off a 120-column screen."""
    app = app_for(wide_group(tmp_path / "pool", 4))
    async with app.run_test(size=(120, 40)) as pilot:
        await shown_group(pilot)
        rows = lambda: [s for s in screen_text(pilot.app) if s.lstrip().startswith("tr_wide-3")]  # noqa: E731
        await until(pilot, rows)  # drawn (a loaded machine draws late)
        row = rows()[0]
        assert "quality=good tags=arith,short trainable=true" in row, row
        assert "['" not in row and "True" not in row


@pytest.mark.parametrize(("size", "n"), [((80, 24), 3), ((120, 40), 4)])
async def test_every_card_is_reachable_and_whole(
    tmp_path: Path, size: tuple[int, int], n: int
) -> None:
    """Cards sat in one row of fixed width: the last one (3rd at 80 columns, 4th at 120)
    was cut mid-word past the right edge, and no key scrolled to it. Now they wrap onto
    rows below, and the member cursor brings its card into view."""
    app = app_for(wide_group(tmp_path / "pool", n))
    async with app.run_test(size=size) as pilot:
        screen = await shown_group(pilot)
        cards = lambda: list(screen.query(".card"))  # noqa: E731
        side = screen.query_one("#side")
        # none runs past the right edge (once laid out beside the scrollbar)
        await until(
            pilot,
            lambda: (
                len(cards()) == n
                and all(
                    c.region and c.region.right <= side.scrollable_content_region.right
                    for c in cards()
                )
            ),
        )
        assert all(c.region.width >= CARD_WIDTH for c in cards())  # none squeezed
        for k in range(n):
            if k:
                await pilot.press("down")
            card = cards()[k]
            # its head line in full, on screen, at the card's own left edge
            await until(
                pilot,
                lambda k=k, card=card: any(
                    s[card.region.x :].startswith(f" tr_wide-{k}  done") for s in screen_text(app)
                ),
            )
            assert card.has_class("-current")


async def test_page_keys_scroll_a_card_taller_than_the_screen(tmp_path: Path) -> None:
    """The member table keeps the focus; PgDn/PgUp scroll the cards beside it."""
    app = app_for(wide_group(tmp_path / "pool", 3))
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await shown_group(pilot)
        cards = lambda: list(screen.query(".card"))  # noqa: E731
        await until(pilot, lambda: len(cards()) == 3 and cards()[-1].region)
        assert not any("END0" in s for s in screen_text(app))  # below the screen's foot
        side = screen.query_one("#side")
        await until(pilot, lambda: side.max_scroll_y > 0)  # laid out: there is room to scroll
        await pilot.press("pagedown")
        await until(pilot, lambda: any("END0" in s for s in screen_text(app)))
        await pilot.press("pageup")
        await until(pilot, lambda: any("answer0 words" in s for s in screen_text(app)))
        assert screen.query_one("#members").has_focus


async def test_the_focused_members_card_is_in_view_and_stays_there(tmp_path: Path) -> None:
    """Opened on a member whose card is on the second row (``g`` from the inspector), the
    card is in view; labelling it reloads the group and leaves it in view."""
    app = app_for(wide_group(tmp_path / "pool", 4))
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await shown_group(pilot, focus="tr_wide-3")
        head = lambda: any(" tr_wide-3  done" in s for s in screen_text(app))  # noqa: E731
        await until(pilot, head)
        await pilot.press("2")
        await until(pilot, lambda: screen.members[3].labels.get("quality") == "bad")
        await pilot.pause(0.2)
        assert head()


async def test_labelling_a_member_keeps_the_cards_where_they_were_scrolled(tmp_path: Path) -> None:
    """Scrolled to the foot of a long card and labelled, the cards jumped back to its head:
    the reload rebuilt the table, whose first row announced a highlight of row 0. On a slow
    terminal the same announcement, from the first show, undid a PgDn pressed as the group
    opened (CI's loaded machine)."""
    app = app_for(wide_group(tmp_path / "pool", 3))
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await shown_group(pilot)
        side = screen.query_one("#side")
        await until(pilot, lambda: len(screen.query(".card")) == 3 and side.max_scroll_y > 0)
        await pilot.press("pagedown")
        end0 = lambda: any("END0" in s for s in screen_text(app))  # noqa: E731
        await until(pilot, end0)
        scrolled = side.scroll_y
        await pilot.press("1")
        await until(pilot, lambda: screen.members[0].labels.get("quality") == "good")
        await pilot.pause(0.2)
        assert side.scroll_y == scrolled and end0()
        assert screen.cards[0].has_class("-current")
