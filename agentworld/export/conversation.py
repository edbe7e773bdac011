"""A trajectory's steps as linear conversations: the shape every chat-style export starts from.

Each step's prompt repeats the conversation so far, so a trajectory is one
conversation as long as every prompt extends the previous prompt plus its
response. When an agent rewrites its history (summarising, truncating), the
conversation breaks into a new *segment*; exporters emit each segment.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson


@dataclass
class Segment:
    """A linear conversation and which of its assistant messages each step sampled."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    sampled: dict[int, dict[str, Any]] = field(default_factory=dict)  # position -> step record
    tools: list[Any] | None = None


def content_text(content: Any) -> str:
    """Plain text of message content (a string, or a list of parts whose text is joined)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    out = []
    for part in content:
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            out.append(part["text"])
        elif isinstance(part, str):
            out.append(part)
    return "".join(out)


def _comparable(m: Mapping[str, Any]) -> tuple[Any, ...]:
    content = m.get("content")
    if content is None:
        content = ""
    elif not isinstance(content, str):
        content = orjson.dumps(content, option=orjson.OPT_SORT_KEYS).decode()
    calls = tuple(
        (c.get("id") or "", c.get("name"), c.get("arguments")) for c in m.get("tool_calls") or ()
    )
    return (m.get("role"), content, calls, m.get("tool_call_id") or "")


def same_message(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Equal as far as a prompt is concerned (reasoning and null-vs-empty content ignored)."""
    return _comparable(a) == _comparable(b)


def extends(conversation: list[dict[str, Any]], prompt: list[dict[str, Any]]) -> bool:
    """Whether ``prompt`` starts with ``conversation`` (reasoning and null-vs-empty ignored)."""
    if len(conversation) > len(prompt):
        return False
    return all(_comparable(a) == _comparable(b) for a, b in zip(conversation, prompt, strict=False))


def usable(step: Mapping[str, Any]) -> bool:
    """A step that sampled a chat response: ok, a message prompt, first choice."""
    resp = step.get("response") or {}
    return (
        step.get("status") == "ok"
        and bool((step.get("request") or {}).get("messages"))
        and resp.get("message") is not None
        and not step.get("choice")
    )


def segments(steps: Iterable[dict[str, Any]]) -> list[Segment]:
    """Linear conversations of a trajectory's usable steps, in step order."""
    out: list[Segment] = []
    cur: Segment | None = None
    for step in steps:
        if not usable(step):
            continue
        prompt = step["request"]["messages"]
        if cur is None or not extends(cur.messages, prompt):
            cur = Segment()
            out.append(cur)
        cur.messages = [*prompt, step["response"]["message"]]
        cur.sampled[len(prompt)] = step
        cur.tools = step["request"].get("tools") or cur.tools
    return out


def openai_tools(tools: list[Any] | None) -> list[Any]:
    """Tool definitions in OpenAI's ``{"type": "function", "function": {...}}`` shape."""
    out = []
    for t in tools or ():
        if not isinstance(t, dict):
            continue
        if t.get("type") == "function" and isinstance(t.get("function"), dict):
            out.append(t)
        elif "name" in t:
            schema = t.get("input_schema") or t.get("parameters") or {"type": "object"}
            fn = {"name": t["name"], "parameters": schema}
            if t.get("description"):
                fn["description"] = t["description"]
            out.append({"type": "function", "function": fn})
    return out


def orphan_tool_results(messages: list[dict[str, Any]]) -> list[int]:
    """Positions of tool messages that answer no call of the assistant turn before them.

    A tool result belongs to the latest assistant message's ``tool_calls`` (by
    ``tool_call_id``); one with no assistant call before it, or an id that call
    did not make, is an orphan: an agent that seeded results into its history,
    or one that cut the call away when it truncated.
    """
    out: list[int] = []
    open_ids: set[str] = set()
    for i, m in enumerate(messages):
        if m.get("role") == "assistant":
            open_ids = {c.get("id") for c in m.get("tool_calls") or () if c.get("id")}
        elif m.get("role") == "tool" and m.get("tool_call_id") not in open_ids:
            out.append(i)
    return out


def template_arguments(raw: Any) -> Any:
    """Arguments as the object chat templates ``tojson``; text that is no JSON object stays text."""
    if not isinstance(raw, str):
        return raw
    try:
        value = json.loads(raw)
    except ValueError:
        return raw
    return value if isinstance(value, dict) else raw


def trl_messages(messages: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Normalised messages in chat-template shape, each with only the keys it uses."""
    out: list[dict[str, Any]] = []
    call_names: dict[str, str] = {}
    for m in messages:
        role = "system" if m["role"] == "developer" else m["role"]
        msg: dict[str, Any] = {"role": role, "content": content_text(m.get("content"))}
        if m.get("reasoning"):
            msg["reasoning_content"] = m["reasoning"]
        if m.get("tool_calls"):
            msg["tool_calls"] = []
            for i, c in enumerate(m["tool_calls"]):
                call_id = c.get("id") or f"call_{i}"
                call_names[call_id] = c["name"]
                fn = {"name": c["name"], "arguments": template_arguments(c.get("arguments"))}
                msg["tool_calls"].append({"id": call_id, "type": "function", "function": fn})
        if role == "tool":
            if m.get("tool_call_id"):
                msg["tool_call_id"] = m["tool_call_id"]
            name = m.get("name") or call_names.get(m.get("tool_call_id") or "")
            if name:
                msg["name"] = name
        out.append(msg)
    return out
