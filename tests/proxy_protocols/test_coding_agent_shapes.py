"""Requests shaped as the coding CLIs of late 2026 send them, translated onto a chat upstream.

Claude Code 2.1.328 (Anthropic Messages): a ``system`` message inside
``messages``, adaptive thinking with an effort, context management, deferred
tools loaded by its own ``ToolSearch`` tool (``tool_reference`` results), and
server tools. Codex 0.169 (OpenAI Responses): ``developer`` messages, a
``namespace`` of tools, the hosted ``web_search`` tool, ``store: false`` with
its whole history each turn. Both CLIs were driven through ``aw proxy`` onto a
scripted upstream and ran their tools; these tests keep the shapes they sent.
"""

from __future__ import annotations

import pytest

from tests.proxy_protocols.conftest import steps_of
from tests.proxy_protocols.test_anthropic_sdk import ask as ask_anthropic
from tests.proxy_protocols.test_anthropic_sdk import client_for as anthropic_client
from tests.proxy_protocols.test_responses_sdk import MODES
from tests.proxy_protocols.test_responses_sdk import ask as ask_responses
from tests.proxy_protocols.test_responses_sdk import client_for as openai_client

SCHEMA = {"type": "object", "properties": {"command": {"type": "string"}}}
CLAUDE_TOOLS = [
    {"name": "Bash", "description": "Run a command", "input_schema": SCHEMA},
    {"name": "ToolSearch", "description": "Load deferred tools", "input_schema": SCHEMA},
    {
        "name": "WebFetch",
        "description": "Fetch a URL",
        "input_schema": SCHEMA,
        "defer_loading": True,
    },
    {"name": "Placeholder", "description": "-", "input_schema": SCHEMA, "defer_loading": True},
    {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
]
CLAUDE_EXTRA = {
    "thinking": {"type": "adaptive", "display": "omitted"},
    "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    "output_config": {"effort": "medium"},
}


async def claude(client, stream: bool, messages: list) -> object:
    system = [{"type": "text", "text": "You are a coding agent."}]
    return await ask_anthropic(
        client,
        stream,
        model="claude-opus-5-5",
        max_tokens=4096,
        system=system,
        messages=messages,
        tools=CLAUDE_TOOLS,
        extra_body=CLAUDE_EXTRA,
    )


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
async def test_claude_code_turns(translating, pool, chat_fake, stream):
    fake, _ = chat_fake
    client = anthropic_client(translating.url)
    msgs = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "<system-reminder>attribution</system-reminder>"},
                {"type": "text", "text": "Fetch example.com"},
            ],
        },
        {"role": "system", "content": [{"type": "text", "text": "# Environment\ncwd: /w"}]},
    ]
    first = await claude(client, stream, msgs)
    (use,) = [b for b in first.content if b.type == "tool_use"]
    assert use.name == "Bash" and first.stop_reason == "tool_use"
    msgs += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": use.id,
                    "content": [{"type": "tool_reference", "tool_name": "WebFetch"}],
                },
                {"type": "text", "text": "Tool loaded."},
            ],
        },
    ]
    second = await claude(client, stream, msgs)
    assert second.stop_reason == "tool_use"  # the fake calls a tool after a user's text
    await client.close()
    await translating.stop()

    asked, then = fake.requests
    # The system message stays where the agent put it: it applies from there on.
    assert [m["role"] for m in asked["messages"]] == ["system", "user", "system"]
    assert asked["messages"][2]["content"] == "# Environment\ncwd: /w"
    # Deferred tools wait for a tool_reference; the server tool is Anthropic's to run.
    assert [t["function"]["name"] for t in asked["tools"]] == ["Bash", "ToolSearch"]
    assert [t["function"]["name"] for t in then["tools"]] == ["Bash", "ToolSearch", "WebFetch"]
    assert asked["chat_template_kwargs"] == {"enable_thinking": True}
    assert asked["reasoning_effort"] == "medium"
    roles = [m["role"] for m in then["messages"]]
    assert roles == ["system", "user", "system", "assistant", "tool", "user"]
    assert then["messages"][4]["content"] == "Tool loaded: WebFetch"

    s0, s1 = steps_of(pool)
    assert s0["trajectory"] == s1["trajectory"]  # threaded, system message and all
    assert s1["metadata"]["threading"] == "auto"
    for s, sent in ((s0, asked), (s1, then)):
        assert s["status"] == "ok" and s["tokens"]["source"] == "engine"
        assert s["metadata"]["tools_left_out"] == ["web_search"]
        assert s["request"]["tools"] == sent["tools"]  # what the chat model was given
        assert s["request"]["params"]["context_management"] == CLAUDE_EXTRA["context_management"]


NAMESPACE = {
    "type": "namespace",
    "name": "multi_agent_v1",
    "description": "Tools for spawning and managing sub-agents.",
    "tools": [
        {
            "type": "function",
            "name": "close_agent",
            "description": "Close an agent.",
            "strict": False,
            "parameters": {"type": "object", "properties": {"target": {"type": "string"}}},
        }
    ],
}
EXEC = {
    "type": "function",
    "name": "exec_command",
    "description": "Runs a command in a PTY.",
    "strict": False,
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
}
CODEX_TOOLS = [NAMESPACE, EXEC, {"type": "web_search", "external_web_access": True}]
CODEX_EXTRA = {
    "store": False,
    "include": ["reasoning.encrypted_content"],
    "reasoning": {"summary": "auto"},
    "prompt_cache_key": "01a231af",
}


@pytest.mark.parametrize("mode", MODES)
async def test_codex_turns(translating, pool, chat_fake, mode):
    fake, _ = chat_fake
    client = openai_client(translating.base_url)
    history = [
        {
            "type": "message",
            "role": "developer",
            "content": [{"type": "input_text", "text": "Be a coding agent."}],
        },
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "Close agent a1"}],
        },
    ]
    kw = {"instructions": None, "tools": CODEX_TOOLS, "extra_body": CODEX_EXTRA}
    first = await ask_responses(client, mode, input=history, **kw)
    (call,) = first.output
    assert call.type == "function_call"
    assert (call.namespace, call.name) == ("multi_agent_v1", "close_agent")
    # As Codex does with store false: the whole history again, its call and the output.
    history += [
        call.model_dump(exclude_none=True),
        {"type": "function_call_output", "call_id": call.call_id, "output": "closed"},
    ]
    second = await ask_responses(client, mode, input=history, **kw)
    assert second.output_text.startswith("ok 1: Close agent a1")
    await client.close()
    await translating.stop()

    asked, then = fake.requests
    names = [t["function"]["name"] for t in asked["tools"]]
    assert names == ["multi_agent_v1__close_agent", "exec_command"]  # web_search left out
    about = asked["tools"][0]["function"]["description"]
    assert about == "(multi_agent_v1: Tools for spawning and managing sub-agents.)\nClose an agent."
    assert [m["role"] for m in asked["messages"]] == ["system", "user"]  # vLLM: no developer role
    assert then["messages"][2]["tool_calls"][0]["function"]["name"] == "multi_agent_v1__close_agent"
    assert then["messages"][3] == {
        "role": "tool",
        "content": "closed",
        "tool_call_id": call.call_id,
    }

    s0, s1 = steps_of(pool)
    assert s0["trajectory"] == s1["trajectory"]
    for s in (s0, s1):
        assert s["status"] == "ok" and s["metadata"]["tools_left_out"] == ["web_search"]
        assert [t["function"]["name"] for t in s["request"]["tools"]] == names
    assert s0["response"]["message"]["tool_calls"][0]["name"] == "multi_agent_v1__close_agent"
    assert s0["raw"]["response"]["output"][0]["namespace"] == "multi_agent_v1"


TOOL_SEARCH = {  # Codex 0.169 with a model it knows (gpt-5.5): it runs the search itself
    "type": "tool_search",
    "execution": "client",
    "description": "Searches over deferred tool metadata with BM25.",
    "parameters": {
        "type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": "number"}},
        "required": ["query"],
    },
}
APPLY_PATCH = {"type": "custom", "name": "apply_patch", "description": "Edit files."}


@pytest.mark.parametrize("mode", MODES)
async def test_codex_runs_its_own_tool_search(translating, pool, chat_fake, mode):
    fake, _ = chat_fake
    client = openai_client(translating.base_url)
    tools = [TOOL_SEARCH, EXEC, APPLY_PATCH, {"type": "web_search"}]
    history = [{"type": "message", "role": "user", "content": "Spawn a helper agent"}]
    kw = {"instructions": "Be a coding agent.", "tools": tools, "extra_body": CODEX_EXTRA}
    first = await ask_responses(client, mode, input=history, **kw)
    (search,) = first.output
    assert search.type == "tool_search_call" and search.execution == "client"
    assert search.arguments == {"q": "Spawn a he", "j": 0}  # what the model wrote, an object
    loaded = {"type": "tool_search_output", "call_id": search.call_id, "execution": "client"}
    history += [search.model_dump(exclude_none=True), {**loaded, "tools": [NAMESPACE]}]
    second = await ask_responses(client, mode, input=history, **kw)
    assert second.output_text.startswith("ok 1: Spawn a helper")
    await client.close()
    await translating.stop()

    asked, then = fake.requests
    names = [t["function"]["name"] for t in asked["tools"]]
    assert names == ["tool_search", "exec_command", "apply_patch"]  # web_search left out
    assert asked["tools"][0]["function"]["parameters"] == TOOL_SEARCH["parameters"]
    # What the search loaded is the model's from then on.
    assert [t["function"]["name"] for t in then["tools"]] == [*names, "multi_agent_v1__close_agent"]
    assert then["messages"][-2]["tool_calls"][0]["function"]["name"] == "tool_search"
    assert then["messages"][-1] == {
        "role": "tool",
        "tool_call_id": search.call_id,
        "content": "Tools loaded: multi_agent_v1",
    }
    s0, s1 = steps_of(pool)
    assert s0["trajectory"] == s1["trajectory"]  # the search call threads like any other
    assert s0["response"]["message"]["tool_calls"][0]["name"] == "tool_search"
