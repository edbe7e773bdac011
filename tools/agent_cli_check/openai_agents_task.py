"""One task for the OpenAI Agents SDK through ``aw proxy``: Responses (translated to chat, with
the hosted web search tool left out) and chat completions, each run and streamed.

    PYTHONPATH=DIR_WITH_openai-agents python openai_agents_task.py BASE_URL
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    WebSearchTool,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI


@function_tool
def bash(command: str) -> str:
    """Run a shell command."""
    return subprocess.run(command, shell=True, capture_output=True, text=True).stdout


async def main(base_url: str) -> None:
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=base_url, api_key="unused")
    models = (
        ("responses", OpenAIResponsesModel("scripted", client), [bash, WebSearchTool()]),
        ("chat", OpenAIChatCompletionsModel("scripted", client), [bash]),
    )
    for api, model, tools in models:
        agent = Agent(name="coder", instructions="You write files.", tools=tools, model=model)
        ran = await Runner.run(agent, "Create proof.txt")
        streamed = Runner.run_streamed(agent, "Create proof.txt")
        async for _ in streamed.stream_events():
            pass
        print(f"  {api}: {ran.final_output} / streamed: {streamed.final_output}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
