"""Chat messages in the record's normalised shape, and what threading compares of them.

Every wire format's messages become this one shape in a step's ``request``
(OpenAI's chat form, tool calls as ``{id, name, arguments}``), so the trainer,
the TUI and automatic threading read one shape whatever the agent spoke.
"""

from __future__ import annotations

from typing import Any

import orjson

from agentworld.proxy.bad_request import BadRequest
from agentworld.records import MAX_TOOL_NAME_BYTES


def _arguments(v: Any) -> str:
    if isinstance(v, str):
        return v
    return orjson.dumps(v).decode() if v is not None else ""


def normalise_tool_calls(calls: Any) -> list[dict[str, Any]] | None:
    """OpenAI ``tool_calls`` ([{id, type, function{name, arguments}}]) -> [{id, name, arguments}]."""
    if not isinstance(calls, list) or not calls:
        return None
    out = []
    for c in calls:
        if not isinstance(c, dict):
            continue
        fn = c.get("function") if isinstance(c.get("function"), dict) else c
        call = {"name": str(fn.get("name") or ""), "arguments": _arguments(fn.get("arguments"))}
        if isinstance(c.get("id"), str):
            call["id"] = c["id"]
        out.append(call)
    return out or None


def normalise_message(m: dict[str, Any]) -> dict[str, Any]:
    """One OpenAI chat message in the record's normalised shape."""
    if len(m) == 2 and m.get("content").__class__ is str and "role" in m:
        role = m["role"]  # the usual {role, content} message: nothing else to look at
        return {"role": "tool" if role == "function" else role, "content": m["content"]}
    role = m.get("role")
    out: dict[str, Any] = {"role": "tool" if role == "function" else role}
    content = m.get("content")
    if isinstance(content, str | list):
        out["content"] = content
    for key in ("name", "tool_call_id"):
        if isinstance(m.get(key), str):
            out[key] = m[key]
    calls = normalise_tool_calls(m.get("tool_calls"))
    if calls:
        out["tool_calls"] = calls
    reasoning = m.get("reasoning")
    if reasoning is None:
        reasoning = m.get("reasoning_content")
    if isinstance(reasoning, str):
        out["reasoning"] = reasoning
    return out


def thread_form(m: dict[str, Any]) -> Any:
    """What must match for a resent message to count as the same turn (automatic threading).

    Agents often drop reasoning, turn a null assistant content into "", strip
    whitespace, or re-serialise tool arguments; none of that breaks a thread.
    """
    content = m.get("content")
    if len(m) == 2 and content.__class__ is str and "role" in m:  # the usual message
        return [m["role"], content.strip(), [], "", ""]
    if isinstance(content, list):
        if all(isinstance(p, dict) and p.get("type") == "text" for p in content):
            content = "".join(str(p.get("text", "")) for p in content)
        else:
            content = orjson.dumps(content, option=orjson.OPT_SORT_KEYS).decode()
    content = (content or "").strip()
    calls = []
    for c in m.get("tool_calls") or ():
        args = c.get("arguments", "")
        try:
            args = orjson.dumps(orjson.loads(args), option=orjson.OPT_SORT_KEYS).decode()
        except (orjson.JSONDecodeError, TypeError):
            pass
        calls.append([c.get("id") or "", c.get("name"), args])
    return [m.get("role"), content, calls, m.get("tool_call_id") or "", m.get("name") or ""]


def check_tool_name(v: Any, where: str) -> None:
    """A tool call's id or name, or a tool's name: a string a record can keep (or absent).
    A request with a longer one is refused, rather than served and then not recorded."""
    if v is None:
        return
    if not isinstance(v, str):
        raise BadRequest(f"{where} must be a string", where)
    if len(v) > MAX_TOOL_NAME_BYTES // 4 and len(v.encode()) > MAX_TOOL_NAME_BYTES:
        raise BadRequest(f"{where}: longer than {MAX_TOOL_NAME_BYTES} bytes", where)
