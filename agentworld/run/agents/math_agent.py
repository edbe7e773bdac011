"""A multi-turn math agent: works GSM8K-style problems with a calculator tool and ends with a final answer.

White-box: `aw run` calls ``solve(task, client, settings)`` with an
``openai.AsyncOpenAI`` bound to the trajectory, so every turn is recorded.
"""

from __future__ import annotations

import json
from typing import Any

from agentworld.run.agents.answers import extract_final_answer
from agentworld.run.agents.calculator import calculator

SYSTEM_PROMPT = (
    "You solve math word problems step by step. Use the `calculator` tool for every "
    "arithmetic operation instead of computing in your head. When you know the answer, "
    "call `final_answer` with just the number (no units)."
)

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression, e.g. '(12 + 30) * 4 / 7'.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "final_answer",
            "description": "Give the final answer and stop.",
            "parameters": {
                "type": "object",
                "properties": {"answer": {"type": "string"}},
                "required": ["answer"],
            },
        },
    },
]


def _arguments(raw: str | None) -> dict[str, Any]:
    try:
        args = json.loads(raw or "{}")
    except json.JSONDecodeError:
        return {}
    return args if isinstance(args, dict) else {}


async def solve(task: Any, client: Any, settings: Any) -> dict[str, Any]:
    """Run the tool loop for at most ``settings.max_turns`` model calls; return the answer."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": task.prompt},
    ]
    tool_calls_made = 0
    for _ in range(settings.max_turns):
        response = await client.chat.completions.create(
            model=settings.model, messages=messages, tools=TOOLS, **settings.sampling
        )
        message = response.choices[0].message
        calls = message.tool_calls or []
        entry: dict[str, Any] = {"role": "assistant", "content": message.content or ""}
        if calls:
            entry["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.function.name, "arguments": c.function.arguments},
                }
                for c in calls
            ]
        messages.append(entry)
        if not calls:
            # No tool call: the reply itself is the answer.
            return _result(extract_final_answer(message.content), tool_calls_made, "text")
        for call in calls:
            args = _arguments(call.function.arguments)
            if call.function.name == "final_answer":
                return _result(str(args.get("answer", "")).strip(), tool_calls_made, "tool")
            tool_calls_made += 1
            if call.function.name == "calculator":
                output = calculator(str(args.get("expression", "")))
            else:
                output = f"error: unknown tool {call.function.name!r}"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
    return _result(None, tool_calls_made, "max_turns")


def _result(answer: str | None, tool_calls: int, ended_by: str) -> dict[str, Any]:
    return {"answer": answer, "metadata": {"tool_calls": tool_calls, "ended_by": ended_by}}
