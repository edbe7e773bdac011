"""The inspector on a small terminal: the label line, folded metadata, the conversation
first, and keys that scroll it without Tab."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.containers import VerticalScroll

from agentworld import records
from agentworld.tui.app import AgentWorldApp
from agentworld.tui.help import HelpScreen

from .conftest import T0, app_for, write_pool
from .test_screens import loaded_list, shown_inspector, until


def screen_text(app: AgentWorldApp) -> list[str]:
    """What the terminal shows, line by line."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


def long_session(path: Path, usage: dict | None = None) -> Path:
    """One trajectory whose one step has a long conversation and a usage with None fields."""
    msgs = [{"role": "system", "content": "You solve things."}] + [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " + "words " * 30}
        for i in range(40)
    ]
    agent = "a-very-long-agent-name-that-fills-the-header"
    step = records.make_step(
        id="st_long_0",
        trajectory="tr_long",
        index=0,
        agent=agent,
        dataset="a-dataset-with-a-long-name-too",
        group="group-with-a-long-name",
        task="task-with-a-long-name-as-well",
        timings={"started_at": T0, "ended_at": T0 + 1},
        request={"model": "m", "messages": msgs},
        response={
            "message": {"role": "assistant", "content": "THE LAST ANSWER"},
            "finish_reason": "stop",
            "usage": usage
            or {"prompt_tokens": 900, "completion_tokens": 4, "prompt_tokens_details": None},
        },
    )
    end = records.make_end(
        id="en_tr_long",
        trajectory="tr_long",
        agent=agent,
        steps=1,
        status="done",
        reward=1.0,
        ended_at=T0 + 2,
    )
    return write_pool(path, [step, end])


@pytest.mark.parametrize("size", [(80, 24), (100, 30)])
async def test_label_line_and_conversation_fit_a_small_terminal(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    async with app_for(long_session(tmp_path / "pool")).run_test(size=size) as pilot:
        await loaded_list(pilot)
        pilot.app.inspect("tr_long")
        ins = await shown_inspector(pilot)
        await pilot.press("1")
        await until(pilot, lambda: any("quality=good" in line for line in screen_text(pilot.app)))
        lines = screen_text(pilot.app)
        label = next(line for line in lines if "labelling" in line)
        assert "trajectory" in label and "quality=good" in label
        # The metadata is one folded line: the conversation starts right under it.
        assert any("▸ step 0 · ok" in line for line in lines)
        assert "prompt_tokens_details" not in "".join(lines)
        assert any("── system" in line for line in lines[:8]), lines[:8]
        await pilot.press("full_stop")
        await until(
            pilot, lambda: " step 0 " in next(s for s in screen_text(pilot.app) if "labelling" in s)
        )
        # PageDown reaches the conversation although the step table has the focus.
        detail = ins.query_one("#detail", VerticalScroll)
        assert detail.scroll_y == 0
        await pilot.press("pagedown")
        await until(pilot, lambda: detail.scroll_y > 0)
        await pilot.press("end")
        await until(pilot, lambda: any("THE LAST ANSWER" in s for s in screen_text(pilot.app)))
        await pilot.press("home")
        await until(pilot, lambda: detail.scroll_y == 0)
        # i unfolds the metadata, without the None fields.
        await pilot.press("i")
        await until(pilot, lambda: any("first token" in s for s in screen_text(pilot.app)))
        assert not any("prompt_tokens_details" in s for s in screen_text(pilot.app))
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(pilot.app.screen, HelpScreen))
        text = str(pilot.app.screen.query_one("#help").render())
        assert "PgDn  Scroll the conversation a page down" in text
        assert "i  The step's metadata in full" in text


async def test_the_filter_placeholder_shows_its_most_used_terms_at_80_columns(
    pool_path: Path,
) -> None:
    """It listed agent:, dataset:, split:, ... first, and 80 columns cut it before label:,
    tag:, since: and free words."""
    async with app_for(pool_path).run_test(size=(80, 24)) as pilot:
        await loaded_list(pilot)
        line = next(s for s in screen_text(pilot.app) if "filter:" in s)
        for term in ("words", "label:good", "reward:", "since:1h", "(? lists all)"):
            assert term in line, line


async def test_unfolded_metadata_wraps_under_its_value_column_at_80_columns(
    tmp_path: Path,
) -> None:
    """A usage too long for the line went on at column 0 of the pane, under the keys."""
    usage = {
        "prompt_tokens": 327,
        "completion_tokens": 96,
        "total_tokens": 423,
        "cached_prompt_tokens": 256,
        "reasoning_tokens": 0,
    }
    async with app_for(long_session(tmp_path / "pool", usage)).run_test(size=(80, 24)) as pilot:
        await loaded_list(pilot)
        pilot.app.inspect("tr_long")
        await shown_inspector(pilot)
        await pilot.press("i")
        await until(pilot, lambda: any("first token" in s for s in screen_text(pilot.app)))
        lines = screen_text(pilot.app)
        at = next(i for i, s in enumerate(lines) if " usage " in s)
        value_col = lines[at].index(" usage ") + len(" usage ")
        assert "reasoning_tokens=0" not in lines[at], lines[at]  # it does wrap at 80
        rest = lines[at + 1]
        assert rest[:value_col].strip(" │▎▊") == "" and rest[value_col] != " ", lines[at : at + 2]
