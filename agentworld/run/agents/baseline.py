"""A single-turn baseline: one model call, the answer read from the reply. No tools."""

from __future__ import annotations

from typing import Any

from agentworld.run.agents.answers import extract_final_answer

SYSTEM_PROMPT = "Solve the problem. Think briefly, then end with a line 'Final answer: <answer>'."


async def solve(task: Any, client: Any, settings: Any) -> str | None:
    """Ask once and return the extracted final answer."""
    response = await client.chat.completions.create(
        model=settings.model,
        messages=[
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": task.prompt},
        ],
        **settings.sampling,
    )
    return extract_final_answer(response.choices[0].message.content)
