"""The diff of two trajectories: alignment by message, word highlights, and the screen."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentworld import records
from agentworld.pool import Trajectory
from agentworld.tui.diff import DiffScreen
from agentworld.tui.diffing import (
    LEFT_STYLE,
    RIGHT_STYLE,
    align,
    conversation,
    difference_starts,
    highlighted_pair,
    shared_prefix_rows,
)
from agentworld.tui.group import GroupScreen
from agentworld.tui.trajectories import TrajectoriesScreen

from .conftest import app_for, write_pool
from .test_inspector_layout import screen_text
from .test_screens import loaded_list, until


def msg(role: str, content: str) -> dict:
    return {"role": role, "content": content}


def test_align_pairs_equal_messages_and_marks_changes_and_insertions() -> None:
    left = [msg("system", "s"), msg("user", "q"), msg("assistant", "a1"), msg("user", "more")]
    right = [msg("system", "s"), msg("user", "q"), msg("assistant", "a2")]
    rows = align(left, right)
    assert [r.kind for r in rows] == ["same", "same", "changed", "left"]
    assert shared_prefix_rows(rows) == 2
    assert difference_starts(rows) == [2]
    # Reserialised tool arguments are still the same message (the gist compares names).
    a = {"role": "assistant", "content": "", "tool_calls": [{"name": "f", "arguments": "{}"}]}
    b = {"role": "assistant", "content": "", "tool_calls": [{"name": "f", "arguments": "{ }"}]}
    assert [r.kind for r in align([a], [b])] == ["same"]


def test_highlight_marks_only_the_words_that_differ() -> None:
    a, b = highlighted_pair("The answer is 4.", "The answer is 5.")
    assert a.plain == "The answer is 4." and b.plain == "The answer is 5."
    marked_a = [a.plain[s.start : s.end] for s in a.spans if s.style == LEFT_STYLE]
    marked_b = [b.plain[s.start : s.end] for s in b.spans if s.style == RIGHT_STYLE]
    assert marked_a == ["4"] and marked_b == ["5"]
    # Markup in agent text stays literal.
    a, _ = highlighted_pair("[bold]x[/bold]", "y")
    assert a.plain == "[bold]x[/bold]"


def test_conversation_takes_each_message_once_across_continuing_steps() -> None:
    s0 = dict(
        index=0,
        request={"model": "m", "messages": [msg("system", "s"), msg("user", "q")]},
        response={"message": msg("assistant", "call"), "finish_reason": "stop"},
    )
    s1 = dict(
        index=1,
        request={
            "model": "m",
            "messages": [
                msg("system", "s"),
                msg("user", "q"),
                msg("assistant", "call"),
                msg("tool", "42"),
            ],
        },
        response={"message": msg("assistant", "done"), "finish_reason": "stop"},
    )
    t = Trajectory("tr_c", steps=[s0, s1])
    assert [m["content"] for m in conversation(t)] == ["s", "q", "call", "42", "done"]


def pair_pool(path: Path) -> Path:
    """Two rollouts of one task: a long shared conversation, then two places they differ."""
    shared = [msg("system", "You are a calculator.")] + [
        msg("user" if i % 2 == 0 else "assistant", f"turn {i}") for i in range(8)
    ]
    recs = []
    for k, (answer, tail) in enumerate((("It is 4.", "thanks"), ("It is 5.", "thank you"))):
        tid = f"tr_pair_{k}"
        msgs = [*shared, msg("user", "2+2?"), msg("assistant", answer), msg("user", "sure?")]
        msgs += [msg("assistant", "yes"), msg("user", tail)]
        recs.append(
            records.make_step(
                id=f"st_pair_{k}",
                trajectory=tid,
                index=0,
                agent="calc",
                dataset="arith",
                group="g1",
                task="g1",
                request={"model": "tiny", "messages": msgs},
                response={"message": msg("assistant", "bye"), "finish_reason": "stop"},
            )
        )
        recs.append(
            records.make_end(
                id=f"en_{tid}",
                trajectory=tid,
                agent="calc",
                dataset="arith",
                group="g1",
                task="g1",
                status="done",
                steps=1,
                reward=float(1 - k),
            )
        )
    return write_pool(path, recs)


@pytest.mark.parametrize("size", [(80, 24), (100, 30)])
async def test_diff_opens_from_the_group_view_and_steps_through(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    app = app_for(pair_pool(tmp_path / "pool"))
    async with app.run_test(size=size) as pilot:
        await loaded_list(pilot)
        await pilot.press("g")
        await until(pilot, lambda: isinstance(app.screen, GroupScreen) and app.screen.members)
        app.screen.query_one("#members").move_cursor(row=0)
        await pilot.press("d", "down", "d")  # mark one rollout, diff the other against it
        await until(pilot, lambda: isinstance(app.screen, DiffScreen) and app.screen.model)
        screen = app.screen
        await pilot.pause()
        text = "\n".join(screen_text(app))
        ids = {screen.left_id, screen.right_id}
        assert ids == {"tr_pair_0", "tr_pair_1"}
        for tid in ids:
            assert tid in text
        assert "adv +0.71" in text and "adv -0.71" in text  # GRPO, from the group
        assert "10 shared messages folded" in text
        assert "first difference: message 11" in text
        assert "difference 1 of 2" in text
        await pilot.press("n")
        await until(pilot, lambda: screen.at == 1)
        assert "difference 2 of 2" in "\n".join(screen_text(app))
        first = screen.left_id
        await pilot.press("s")
        await until(pilot, lambda: screen.left_id != first)
        assert screen.model.left.id == screen.left_id
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, GroupScreen))


async def test_diff_from_the_list_marks_then_diffs_against_the_cursor(pool_path: Path) -> None:
    app = app_for(pool_path)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await loaded_list(pilot)
        first = screen.current_id()
        await pilot.press("d")
        assert app.marked == first
        assert f"marked {first[-10:]}" in str(screen.query_one("#status").render())
        await pilot.press("down", "d")
        await until(pilot, lambda: isinstance(app.screen, DiffScreen) and app.screen.model)
        assert (app.screen.left_id, app.screen.right_id) == (first, screen.current_id())
        assert app.marked is None
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, TrajectoriesScreen))
        await until(pilot, lambda: "marked" not in str(screen.query_one("#status").render()))


async def test_diff_is_in_the_command_palette(pool_path: Path) -> None:
    app = app_for(pool_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded_list(pilot)
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert any(t.startswith("Diff") for t in titles)
