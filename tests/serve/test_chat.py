"""Tool calls and reasoning: parsed from known text, and end to end through the openai client."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from agentworld.serve.chat import parse_assistant_text
from agentworld.serve.engine import Engine
from agentworld.serve.server import make_app

from .conftest import TOOL_MESSAGES, TOOLS


def test_one_tool_call_becomes_an_openai_tool_call():
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "paris"}}\n</tool_call>'
    parsed = parse_assistant_text(text)
    assert parsed.content is None
    (call,) = parsed.tool_calls
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "get_weather"
    assert isinstance(call["function"]["arguments"], str)
    assert json.loads(call["function"]["arguments"]) == {"city": "paris"}


def test_several_calls_keep_order_and_content_before_them():
    text = (
        "Let me check both.\n"
        '<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call>\n'
        '<tool_call>{"name": "b", "arguments": "{\\"y\\": 2}"}</tool_call>'
    )
    parsed = parse_assistant_text(text)
    assert parsed.content == "Let me check both.\n"
    assert [c["function"]["name"] for c in parsed.tool_calls] == ["a", "b"]
    assert json.loads(parsed.tool_calls[1]["function"]["arguments"]) == {"y": 2}
    assert len({c["id"] for c in parsed.tool_calls}) == 2


def test_malformed_tool_call_stays_content_and_tools_off_means_no_parsing():
    bad = "<tool_call>{not json}</tool_call>"
    assert parse_assistant_text(bad).tool_calls == []
    assert parse_assistant_text(bad).content == bad
    good = '<tool_call>{"name": "a", "arguments": {}}</tool_call>'
    assert parse_assistant_text(good, tools_enabled=False).content == good


def test_think_block_becomes_reasoning():
    parsed = parse_assistant_text("<think>2+3=5</think>The answer is 5.")
    assert parsed.reasoning == "2+3=5" and parsed.content == "The answer is 5."
    cut = parse_assistant_text("<think>still thinking")
    assert cut.reasoning == "still thinking" and cut.content is None


@pytest.fixture
async def served_toolcall_model(toolcall_model_dir: Path) -> Any:
    """A real server on a local port, so the openai client talks real HTTP."""
    engine = Engine(toolcall_model_dir, device="cpu", model_name="tiny-tools")
    runner = web.AppRunner(make_app(engine))
    await runner.setup()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    yield f"http://127.0.0.1:{port}/v1"
    await runner.cleanup()
    engine.close()


@pytest.mark.timeout(600)  # includes overfitting the tool-call model (~10 s on an idle CPU)
async def test_openai_client_gets_tool_calls_end_to_end(served_toolcall_model: str):
    import openai

    async with openai.AsyncOpenAI(base_url=served_toolcall_model, api_key="none") as client:
        resp = await client.chat.completions.create(
            model="tiny-tools",
            messages=TOOL_MESSAGES,
            tools=TOOLS,
            temperature=0,
            max_tokens=60,
            extra_body={"return_token_ids": True},
        )
        choice = resp.choices[0]
        assert choice.finish_reason == "tool_calls"
        (call,) = choice.message.tool_calls
        assert call.id.startswith("call_") and call.type == "function"
        assert call.function.name == "get_weather"
        assert json.loads(call.function.arguments) == {"city": "paris"}
        assert choice.message.content is None
        assert resp.model_extra["prompt_token_ids"]
        assert choice.model_extra["token_ids"]

        stream = await client.chat.completions.create(
            model="tiny-tools",
            messages=TOOL_MESSAGES,
            tools=TOOLS,
            temperature=0,
            max_tokens=60,
            stream=True,
        )
        calls: dict[int, dict[str, str]] = {}
        finish = None
        async for chunk in stream:
            for c in chunk.choices:
                for tc in c.delta.tool_calls or []:
                    slot = calls.setdefault(tc.index, {"name": "", "arguments": ""})
                    slot["name"] += tc.function.name or ""
                    slot["arguments"] += tc.function.arguments or ""
                finish = c.finish_reason or finish
        assert finish == "tool_calls"
        assert calls[0]["name"] == "get_weather"
        assert json.loads(calls[0]["arguments"]) == {"city": "paris"}

        # tool_choice none: same prompt, same text, but it stays content (as in vLLM).
        plain = await client.chat.completions.create(
            model="tiny-tools",
            messages=TOOL_MESSAGES,
            tools=TOOLS,
            tool_choice="none",
            temperature=0,
            max_tokens=60,
        )
        # None, not []: an SDK loop `while message.tool_calls is not None` must end here.
        assert plain.choices[0].message.tool_calls is None
        assert '"get_weather"' in plain.choices[0].message.content
        assert plain.choices[0].finish_reason == "stop"
