"""Free-text search reaches every role, and the inspector marks what was searched for."""

from __future__ import annotations

from pathlib import Path

from agentworld import records

from .conftest import T0, app_for, write_pool
from .test_screens import loaded_list, shown_inspector, until


def tool_step(tid: str) -> dict:
    """A step whose words sit in a system prompt and a tool result, nowhere else."""
    return records.make_step(
        id=f"st_{tid}",
        trajectory=tid,
        index=0,
        agent="a",
        timings={"started_at": T0, "ended_at": T0 + 1},
        request={
            "model": "m",
            "messages": [
                {"role": "system", "content": "Use the Calculator tool for arithmetic."},
                {"role": "user", "content": "What is 6 * 7?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "c1", "name": "calc", "arguments": '{"e": "6*7"}'}]},
                {"role": "tool", "tool_call_id": "c1", "content": "zanzibar 42"},
                {"role": "user", "content": "Now answer."},
            ],
        },
        response={"message": {"role": "assistant", "content": "42"}},
    )  # fmt: skip


async def test_search_finds_system_prompts_and_tool_results(tmp_path: Path) -> None:
    pool = write_pool(tmp_path / "pool", [tool_step("tr_x"), tool_step("tr_y")])
    async with app_for(pool).run_test(size=(100, 30)) as pilot:
        screen = await loaded_list(pilot)
        for words in ("calculator", "zanzibar"):
            await pilot.press("slash", "ctrl+u", *words, "enter")
            await until(pilot, lambda: screen.page is not None and screen.page.total == 2)
        await pilot.press("slash", "ctrl+u", *"calculator tool", "enter")
        await until(pilot, lambda: screen.page.total == 2)
        await pilot.press("enter")
        ins = await shown_inspector(pilot)
        ins.full_history = True  # the system prompt is a message the step repeats
        text = ins.body(ins.trajectory.steps[0], None)
        marked = [text.plain[s.start : s.end] for s in text.spans if "on yellow" in str(s.style)]
        assert marked == ["Calculator tool"]
