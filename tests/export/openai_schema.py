"""OpenAI fine-tuning input lines, checked against the published schema and the guides' rules (pinned).

Sources, as of 2026-12:
- openai/openai-openapi ``openapi.yaml``, ``components.schemas``:
  ``FineTuneChatRequestInput`` (``messages``, ``tools``, ``parallel_tool_calls``,
  ``functions``), ``FineTuneChatCompletionRequestAssistantMessage`` (the chat
  assistant message plus ``weight`` 0/1), ``ChatCompletionRequestToolMessage``
  (``role``, ``content``, ``tool_call_id``: all required, nothing else),
  ``ChatCompletionMessageToolCall`` (``id``, ``type: function``,
  ``function: {name, arguments: string}``), ``FineTunePreferenceRequestInput``
  (``input: {messages, tools, parallel_tool_calls}``, ``preferred_output`` /
  ``non_preferred_output``: one assistant message each).
- https://platform.openai.com/docs/guides/supervised-fine-tuning: a tool
  message answers a ``tool_calls`` entry of the assistant message before it.
- https://platform.openai.com/docs/guides/direct-preference-optimization: "DPO
  is currently only supported for text inputs and outputs", trained on
  one-turn conversations (the outputs are the last assistant message).

The fine-tuning file validator refuses keys the schema does not name, so the
message checks here are closed (``additionalProperties: false``).
"""

from __future__ import annotations

from typing import Any

_MESSAGE_KEYS = {
    "system": {"role", "content", "name"},
    "developer": {"role", "content", "name"},
    "user": {"role", "content", "name"},
    "assistant": {"role", "content", "name", "tool_calls", "weight", "refusal", "function_call"},
    "tool": {"role", "content", "tool_call_id"},
}
_REQUIRED = {"tool": {"role", "content", "tool_call_id"}}


def _message(m: Any, where: str, problems: list[str]) -> None:
    if not isinstance(m, dict) or m.get("role") not in _MESSAGE_KEYS:
        problems.append(f"{where}: not a message with a known role")
        return
    role = m["role"]
    extra = set(m) - _MESSAGE_KEYS[role]
    if extra:
        problems.append(f"{where}: {role} message has no field {sorted(extra)}")
    missing = _REQUIRED.get(role, {"role"}) - set(m)
    if missing:
        problems.append(f"{where}: {role} message needs {sorted(missing)}")
    content = m.get("content")
    if role == "assistant":
        if content is None and not m.get("tool_calls"):
            problems.append(f"{where}: assistant content is null without tool_calls")
        if "weight" in m and m["weight"] not in (0, 1):
            problems.append(f"{where}.weight: must be 0 or 1")
    elif not isinstance(content, str | list):
        problems.append(f"{where}.content: must be a string or a list of parts")
    for i, c in enumerate(m.get("tool_calls") or ()):
        fn = c.get("function") if isinstance(c, dict) else None
        if (
            not isinstance(c, dict)
            or set(c) != {"id", "type", "function"}
            or c["type"] != "function"
            or not isinstance(c["id"], str)
            or not isinstance(fn, dict)
            or not isinstance(fn.get("name"), str)
            or not isinstance(fn.get("arguments"), str)
        ):
            problems.append(f"{where}.tool_calls[{i}]: not {{id, type: function, function}}")


def _tools(tools: Any, where: str, problems: list[str]) -> None:
    if not isinstance(tools, list):
        problems.append(f"{where}: must be a list")
        return
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if t.get("type") != "function" or not isinstance(fn, dict) or "name" not in fn:
            problems.append(f"{where}[{i}]: not a function tool")


def chat_line_problems(line: Any) -> list[str]:
    """Where an SFT line breaks ``FineTuneChatRequestInput`` or the tool-result rule."""
    problems: list[str] = []
    if not isinstance(line, dict):
        return ["line: not an object"]
    extra = set(line) - {"messages", "tools", "parallel_tool_calls", "functions"}
    if extra:
        problems.append(f"line: unknown keys {sorted(extra)}")
    msgs = line.get("messages")
    if not isinstance(msgs, list) or not msgs:
        return [*problems, "messages: required non-empty list"]
    open_ids: set[str] = set()
    for i, m in enumerate(msgs):
        _message(m, f"messages[{i}]", problems)
        if not isinstance(m, dict):
            continue
        if m.get("role") == "assistant":
            open_ids = {c.get("id") for c in m.get("tool_calls") or () if isinstance(c, dict)}
        elif m.get("role") == "tool" and m.get("tool_call_id") not in open_ids:
            problems.append(f"messages[{i}]: tool result answers no call of the assistant before")
    if "tools" in line:
        _tools(line["tools"], "tools", problems)
    if "parallel_tool_calls" in line and not isinstance(line["parallel_tool_calls"], bool):
        problems.append("parallel_tool_calls: must be a boolean")
    return problems


def preference_line_problems(line: Any) -> list[str]:
    """Where a DPO line breaks ``FineTunePreferenceRequestInput`` or the DPO guide's rules."""
    if not isinstance(line, dict):
        return ["line: not an object"]
    problems: list[str] = []
    extra = set(line) - {"input", "preferred_output", "non_preferred_output"}
    if extra:
        problems.append(f"line: unknown keys {sorted(extra)}")
    inp = line.get("input")
    if not isinstance(inp, dict) or not isinstance(inp.get("messages"), list):
        return [*problems, "input.messages: required list"]
    if set(inp) - {"messages", "tools", "parallel_tool_calls"}:
        problems.append(f"input: unknown keys {sorted(set(inp) - {'messages', 'tools'})}")
    for i, m in enumerate(inp["messages"]):
        _message(m, f"input.messages[{i}]", problems)
        if isinstance(m, dict) and m.get("role") not in ("system", "developer", "user"):
            problems.append(f"input.messages[{i}]: a one-turn input has no {m.get('role')} turn")
    if "tools" in inp:
        _tools(inp["tools"], "input.tools", problems)
    for key in ("preferred_output", "non_preferred_output"):
        out = line.get(key)
        if not isinstance(out, list) or len(out) != 1:
            problems.append(f"{key}: one assistant message")
            continue
        m = out[0]
        _message(m, f"{key}[0]", problems)
        if not isinstance(m, dict) or m.get("role") != "assistant":
            problems.append(f"{key}[0]: must be an assistant message")
        elif m.get("tool_calls") or not isinstance(m.get("content"), str):
            problems.append(f"{key}[0]: DPO outputs are text only")
    return problems
