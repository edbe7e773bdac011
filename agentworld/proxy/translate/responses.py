"""OpenAI Responses (``POST /v1/responses``), the request side: checks, normalisation,
``previous_response_id`` chains, and translation to chat completions. The way back, a
chat answer as a response, is ``responses_answer``; as a stream, ``responses_stream``.

Input items become the record's normalised messages: a ``reasoning`` item, an
assistant ``message`` and the ``function_call`` items after it form one
assistant turn (how the chat shape and the response record hold it), and each
``function_call_output`` is a tool message. A chat upstream stores nothing, so
the proxy keeps every response's items and rebuilds the conversation a
``previous_response_id`` points to.

Custom (free-form) tools, such as Codex's ``apply_patch``, reach a chat model as
functions of one string parameter, ``input``: their calls come back as
``custom_tool_call`` items holding that string, and the record keeps the call as
the model wrote it (``{"input": ...}`` arguments).

A namespace's tools (Codex groups its sub-agent tools so) reach a chat model
as functions named ``NAMESPACE__NAME``, as MCP tools are named; their calls
come back as items with that ``namespace`` and ``name``. Hosted tools, which
OpenAI runs (web search, file search, code interpreter, image generation,
remote MCP, tool search), are left out (``left_out``) and the agent's call goes
on without them; a deferred function (``defer_loading``) is given up front, as a
chat upstream has no tool search to find it. A tool search the agent runs itself
(``"execution": "client"``, as Codex sends it) is a function ``tool_search`` to
the chat model: its call answers as a ``tool_search_call`` item, and the tools
a ``tool_search_output`` item loads are given to the model from then on.
"""

from __future__ import annotations

from typing import Any

import orjson

from agentworld.proxy.bad_request import BadRequest
from agentworld.proxy.normal_form import check_tool_name
from agentworld.proxy.redact import recorded_params
from agentworld.proxy.translate.chat_form import (
    VLLM_EFFORTS,
    chat_messages,
    check_number,
    dumps_args,
    function_tool,
    text_of,
)

PROTOCOL = "openai.responses"
PATH = "/v1/responses"

_NOT_PARAMS = frozenset({"model", "input", "instructions", "tools"})
_ITEM_TYPES = frozenset(
    {
        "message",
        "function_call",
        "function_call_output",
        "custom_tool_call",
        "custom_tool_call_output",
        "tool_search_call",
        "tool_search_output",
        "reasoning",
        "item_reference",
    }
)
_CALLS = ("function_call", "custom_tool_call", "tool_search_call")
_OUTPUTS = ("function_call_output", "custom_tool_call_output", "tool_search_output")
_ROLES = frozenset({"user", "assistant", "system", "developer"})
# Tools OpenAI runs itself (by type prefix): left out when translating to a chat upstream.
# Tools the agent runs but a chat model cannot be given (computer use, local shell) need
# passthrough.
_HOSTED_PREFIXES = (
    "web_search",
    "file_search",
    "code_interpreter",
    "image_generation",
    "mcp",
    "tool_search",
)
NAMESPACE_SEP = "__"  # a namespaced tool's chat name: NAMESPACE__NAME
TOOL_SEARCH = "tool_search"  # a client-executed tool search's chat name


# -- checks -------------------------------------------------------------------------------


def check(body: dict[str, Any]) -> None:
    """Raise BadRequest naming the first malformed field of a Responses request."""
    if body.get("model") is not None and not isinstance(body["model"], str):
        raise BadRequest("'model' must be a string", "model")
    inp = body.get("input")
    if inp is None and body.get("previous_response_id") is None:
        raise BadRequest("'input' is a required property", "input")
    if inp is not None and not isinstance(inp, str | list):
        raise BadRequest("'input' must be a string or a list of input items", "input")
    for i, item in enumerate(inp if isinstance(inp, list) else ()):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise BadRequest(f"{where}: expected an object", where)
        kind = item.get("type", "message" if "role" in item else None)
        if not isinstance(kind, str):
            raise BadRequest(f"{where}.type: required", f"{where}.type")
        if kind == "message":
            role = item.get("role")
            if not isinstance(role, str) or role not in _ROLES:
                raise BadRequest(
                    f"{where}.role: unknown role {item.get('role')!r}", f"{where}.role"
                )
            if not isinstance(item.get("content"), str | list):
                raise BadRequest(
                    f"{where}.content: expected a string or a list of parts", f"{where}.content"
                )
        elif kind in ("tool_search_call", "tool_search_output"):
            check_tool_name(item.get("call_id"), f"{where}.call_id")
            if kind == "tool_search_output" and not (
                isinstance(item.get("tools"), list)
                and all(isinstance(t, dict) for t in item["tools"])
            ):
                raise BadRequest(f"{where}.tools: a list of tool objects", f"{where}.tools")
        elif kind in (*_CALLS, *_OUTPUTS):
            if not isinstance(item.get("call_id"), str):
                raise BadRequest(f"{where}.call_id: required (a string)", f"{where}.call_id")
            if kind in _CALLS:
                check_tool_name(item["call_id"], f"{where}.call_id")
                check_tool_name(item.get("name"), f"{where}.name")
                ns = item.get("namespace")
                if ns is not None:  # the call's name to a chat model is NAMESPACE__NAME
                    if not isinstance(ns, str):
                        raise BadRequest(
                            f"{where}.namespace must be a string", f"{where}.namespace"
                        )
                    check_tool_name(f"{ns}{NAMESPACE_SEP}{item.get('name')}", f"{where}.namespace")
            elif not isinstance(item.get("output"), str | list | None):
                raise BadRequest(
                    f"{where}.output: expected a string or a list of parts", f"{where}.output"
                )
    for key in ("instructions", "previous_response_id"):
        if body.get(key) is not None and not isinstance(body[key], str):
            raise BadRequest(f"'{key}' must be a string", key)
    tools = body.get("tools")
    if tools is not None and not (
        isinstance(tools, list) and all(isinstance(t, dict) for t in tools)
    ):
        raise BadRequest("'tools' must be a list of tool objects", "tools")
    if body.get("stream") is not None and not isinstance(body["stream"], bool):
        raise BadRequest("'stream' must be a boolean", "stream")
    for key in ("temperature", "top_p"):
        check_number(body, key)
    check_number(body, "max_output_tokens", integer=True)
    if isinstance(body.get("max_output_tokens"), int) and body["max_output_tokens"] < 1:
        raise BadRequest("'max_output_tokens' must be a positive integer", "max_output_tokens")


def items(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's own input items (a string input is one user message)."""
    inp = body.get("input")
    if isinstance(inp, str):
        return [{"type": "message", "role": "user", "content": inp}]
    return [
        {**item, "type": item.get("type", "message")}
        for item in inp or ()
        if isinstance(item, dict)
    ]


# -- normalisation --------------------------------------------------------------------------


def _part(p: Any, where: str) -> dict[str, Any]:
    if isinstance(p, str):
        return {"type": "text", "text": p}
    if not isinstance(p, dict):
        raise BadRequest(f"{where}: expected a content part object", where)
    kind = p.get("type")
    if kind in ("input_text", "output_text", "text", "summary_text", "reasoning_text"):
        return {"type": "text", "text": str(p.get("text", ""))}
    if kind == "refusal":
        return {"type": "text", "text": str(p.get("refusal", ""))}
    if kind == "input_image":
        url = p.get("image_url") or p.get("file_id")
        image: dict[str, Any] = {"url": str(url or "")}
        if isinstance(p.get("detail"), str):
            image["detail"] = p["detail"]
        return {"type": "image_url", "image_url": image}
    if kind == "input_file":
        file = {k: p[k] for k in ("file_data", "file_id", "filename") if isinstance(p.get(k), str)}
        return {"type": "file", "file": file}
    raise BadRequest(f"{where}.type: content part type {kind!r} is not supported here", where)


def _content(content: Any, where: str, *, as_text: bool) -> Any:
    if isinstance(content, str) or content is None:
        return content
    parts = [_part(p, f"{where}[{j}]") for j, p in enumerate(content)]
    if as_text:
        return "".join(p.get("text", "") for p in parts)
    return parts


def messages(
    all_items: list[dict[str, Any]], instructions: Any = None, *, strict: bool = True
) -> list[dict[str, Any]]:
    """Items (history and the request's own) as normalised record messages.

    ``strict`` refuses items a chat model cannot be given (translation); with an
    upstream that speaks Responses they are skipped here and kept in ``raw``.
    """
    out: list[dict[str, Any]] = []
    if isinstance(instructions, str) and instructions:
        out.append({"role": "system", "content": instructions})
    turn: dict[str, Any] | None = None  # the assistant turn items are still joining
    for i, item in enumerate(all_items):
        where = f"input[{i}]"
        kind = item.get("type")
        if kind == "message" and item.get("role") == "assistant":
            text = _content(item.get("content"), f"{where}.content", as_text=True)
            if turn is None or turn.get("content") is not None or turn.get("tool_calls"):
                turn = {"role": "assistant", "content": None}
                out.append(turn)
            turn["content"] = text
        elif kind == "message":
            turn = None
            content = _content(item.get("content"), f"{where}.content", as_text=False)
            out.append({"role": item.get("role"), "content": content})
        elif kind in _CALLS:
            if turn is None:
                turn = {"role": "assistant", "content": None}
                out.append(turn)
            if kind == "custom_tool_call":
                arguments = custom_arguments(item.get("input"))
            else:
                arguments = dumps_args(item.get("arguments"))
            name = TOOL_SEARCH if kind == "tool_search_call" else str(item.get("name", ""))
            if isinstance(item.get("namespace"), str) and item["namespace"]:
                name = item["namespace"] + NAMESPACE_SEP + name
            turn.setdefault("tool_calls", []).append(
                {"id": str(item.get("call_id") or ""), "name": name, "arguments": arguments}
            )
        elif kind == "tool_search_output":
            turn = None
            names = [str(t.get("name") or t.get("type")) for t in item.get("tools") or ()]
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": str(item.get("call_id") or ""),
                    "content": "Tools loaded: " + ", ".join(names) if names else "No tools found.",
                }
            )
        elif kind in _OUTPUTS:
            turn = None
            output = item.get("output")
            content = _content(
                output if output is not None else "", f"{where}.output", as_text=False
            )
            if isinstance(content, list) and all(p["type"] == "text" for p in content):
                content = "".join(p["text"] for p in content)
            out.append(
                {"role": "tool", "tool_call_id": str(item.get("call_id")), "content": content}
            )
        elif kind == "reasoning":
            text = text_of(item.get("content")) or text_of(item.get("summary"))
            if turn is not None and turn.get("content") is None and not turn.get("tool_calls"):
                turn["reasoning"] = turn.get("reasoning", "") + text
            else:
                turn = {"role": "assistant", "content": None, "reasoning": text}
                out.append(turn)
        elif strict:
            raise BadRequest(
                f"{where}.type: item type {kind!r} needs an upstream that speaks Responses "
                '(protocol_mode = "passthrough")',
                f"{where}.type",
            )
    for m in out:
        if m["role"] == "assistant" and not m.get("reasoning"):
            m.pop("reasoning", None)
    return out


def _client_search(t: dict[str, Any]) -> bool:
    return t.get("type") == "tool_search" and t.get("execution") == "client"


def _hosted(t: dict[str, Any]) -> bool:
    kind = t.get("type")
    return isinstance(kind, str) and kind.startswith(_HOSTED_PREFIXES) and not _client_search(t)


def loaded_tools(all_items: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(where, tool) for the tools ``tool_search_output`` items loaded, in order."""
    return [
        (f"tool_search_output.tools[{j}]", t)
        for item in all_items
        if item.get("type") == "tool_search_output" and isinstance(item.get("tools"), list)
        for j, t in enumerate(item["tools"])
        if isinstance(t, dict)
    ]


def _namespaced(
    body: dict[str, Any], loaded: list[tuple[str, dict[str, Any]]] = ()
) -> list[tuple[str, dict[str, Any], str | None, str]]:
    """(where, tool, namespace, its description) for each function or custom tool, those in a
    namespace and those a tool search loaded included; hosted tools skipped; deferred ones
    skipped when the agent runs the search; raises for tools a chat model cannot be given."""
    listed = [(f"tools[{i}]", t) for i, t in enumerate(body.get("tools") or ())]
    client_search = any(_client_search(t) for _, t in listed)
    out = []
    for k, (where, t) in enumerate([*listed, *loaded]):
        kind = t.get("type")
        # A deferred tool waits for the agent's own search (what it loaded is given).
        waits = client_search and k < len(listed)
        if waits and t.get("defer_loading") is True:
            continue
        if kind in ("function", "custom") or _client_search(t):
            out.append((where, t, None, ""))
        elif kind == "namespace":
            ns = t.get("name")
            if not isinstance(ns, str) or not ns or not isinstance(t.get("tools"), list):
                raise BadRequest(f"{where}: a namespace needs a name and a list of tools", where)
            about = t.get("description") if isinstance(t.get("description"), str) else ""
            for j, inner in enumerate(t["tools"]):
                if not isinstance(inner, dict) or inner.get("type") not in ("function", "custom"):
                    raise BadRequest(
                        f"{where}.tools[{j}]: a namespace holds function and custom tools",
                        f"{where}.tools[{j}]",
                    )
                if not (waits and inner.get("defer_loading") is True):
                    out.append((f"{where}.tools[{j}]", inner, ns, about))
        elif not _hosted(t):
            raise BadRequest(
                f"{where}.type: tool type {kind!r} needs an upstream that speaks "
                'Responses (protocol_mode = "passthrough")',
                f"{where}.type",
            )
    return out


def _chat_name(t: dict[str, Any], namespace: str | None) -> Any:
    name = t.get("name")
    if namespace is None or not isinstance(name, str):
        return name
    return namespace + NAMESPACE_SEP + name


def tools(
    body: dict[str, Any], all_items: list[dict[str, Any]] = ()
) -> list[dict[str, Any]] | None:
    """Function and custom tools (a namespace's, and those a tool search loaded, too) in the
    chat shape, a client tool search as a function, hosted tools left out; other built-in
    tools need a Responses upstream."""
    out = []
    given: set[Any] = set()  # a tool two searches loaded is given once
    for where, t, ns, about in _namespaced(body, loaded_tools(all_items)):
        name = TOOL_SEARCH if _client_search(t) else _chat_name(t, ns)
        if isinstance(name, str) and name in given:
            continue
        given.add(name if isinstance(name, str) else None)
        if _client_search(t):
            params = t.get("parameters") if isinstance(t.get("parameters"), dict) else None
            said = t.get("description") if isinstance(t.get("description"), str) else None
            out.append(function_tool(TOOL_SEARCH, said, params or _search_parameters(), where))
            continue
        description = t.get("description") if isinstance(t.get("description"), str) else ""
        if about:  # what the namespace is for, which a chat model is not told otherwise
            description = f"({ns}: {about})\n{description}" if description else f"({ns}: {about})"
        if t.get("type") == "custom":
            out.append(custom_tool({**t, "name": name, "description": description}, where))
            continue
        tool = function_tool(name, description or None, t.get("parameters"), where)
        if isinstance(t.get("strict"), bool):
            tool["function"]["strict"] = t["strict"]
        out.append(tool)
    return out or None


def _search_parameters() -> dict[str, Any]:
    """A tool search's parameters when the agent gave none (a new dict: records share none)."""
    return {
        "type": "object",
        "properties": {"query": {"type": "string", "description": "What the tools are for."}},
        "required": ["query"],
    }


def left_out(body: dict[str, Any]) -> list[str]:
    """The hosted tools translation leaves out (by type)."""
    return [str(t.get("type")) for t in body.get("tools") or () if _hosted(t)]


# The item type, namespace and name a chat model's call to a tool answers as.
Called = tuple[str, str | None, str]


def called_names(body: dict[str, Any], all_items: list[dict[str, Any]] = ()) -> dict[str, Called]:
    """Chat names of the custom, namespaced and tool-search tools, with what their calls
    answer as (a name not here is a plain function's)."""
    out: dict[str, Called] = {}
    try:
        listed = _namespaced(body, loaded_tools(all_items))
    except BadRequest:  # not translated: nothing to map back
        return out
    for _, t, ns, _ in listed:
        if _client_search(t):
            out[TOOL_SEARCH] = ("tool_search_call", None, TOOL_SEARCH)
            continue
        name = t.get("name")
        if not isinstance(name, str) or (ns is None and t.get("type") != "custom"):
            continue
        kind = "custom_tool_call" if t.get("type") == "custom" else "function_call"
        out[_chat_name(t, ns)] = (kind, ns, name)
    return out


def called(names: dict[str, Called], chat_name: str) -> Called:
    return names.get(chat_name) or ("function_call", None, chat_name)


def record_tools(body: dict[str, Any]) -> list[dict[str, Any]] | None:
    """Tools for the record: function and custom tools as the chat model sees them, others as
    the agent sent them."""
    out = []
    for i, t in enumerate(body.get("tools") or ()):
        if t.get("type") == "function" and isinstance(t.get("name"), str):
            fn = {k: t[k] for k in ("name", "description", "parameters", "strict") if k in t}
            out.append({"type": "function", "function": fn})
        elif t.get("type") == "custom" and isinstance(t.get("name"), str):
            out.append(custom_tool(t, f"tools[{i}]"))
        else:
            out.append(t)  # a remote MCP server: its headers are redacted as it is written
    return out or None


# -- custom (free-form) tools ---------------------------------------------------------------

CUSTOM_INPUT = "input"  # the one string parameter a custom tool is given to a chat model as


def _custom_parameters() -> dict[str, Any]:
    """The JSON schema of that parameter (a new one each time: records must not share it)."""
    return {
        "type": "object",
        "properties": {
            CUSTOM_INPUT: {"type": "string", "description": "The tool's free-form input."}
        },
        "required": [CUSTOM_INPUT],
        "additionalProperties": False,
    }


def custom_tool(t: dict[str, Any], where: str) -> dict[str, Any]:
    """A custom tool as a chat function taking its text as one string; a grammar the input
    must follow (Codex's ``apply_patch`` has one) is told in the description."""
    description = t.get("description") if isinstance(t.get("description"), str) else ""
    fmt = t.get("format")
    if isinstance(fmt, dict) and fmt.get("type") == "grammar":
        definition = fmt.get("definition")
        if not isinstance(definition, str):
            raise BadRequest(f"{where}.format.definition: a grammar needs its text", where)
        syntax = fmt.get("syntax")
        label = f" ({syntax})" if isinstance(syntax, str) and syntax else ""
        rule = f"The {CUSTOM_INPUT} must follow this grammar{label}:\n{definition}"
        description = f"{description}\n\n{rule}" if description else rule
    return function_tool(t.get("name"), description or None, _custom_parameters(), where)


def custom_arguments(value: Any) -> str:
    """A custom call's input as the arguments the chat model writes for it."""
    return orjson.dumps({CUSTOM_INPUT: value if isinstance(value, str) else ""}).decode()


def custom_input(arguments: str) -> str:
    """The input out of a chat call's arguments; the arguments themselves when the model
    wrote something else (the agent then sees what it wrote)."""
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments
    if isinstance(value, dict) and isinstance(value.get(CUSTOM_INPUT), str):
        return value[CUSTOM_INPUT]
    return arguments


def params(body: dict[str, Any]) -> dict[str, Any]:
    return recorded_params(body, _NOT_PARAMS)


def _tool_choice(choice: Any) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    if (
        isinstance(choice, dict)
        and choice.get("type") in ("function", "custom")
        and isinstance(choice.get("name"), str)
    ):
        ns = choice.get("namespace")
        return {"type": "function", "function": {"name": _chat_name(choice, ns or None)}}
    raise BadRequest(f"tool_choice: {choice!r} cannot be given to a chat upstream", "tool_choice")


def _response_format(text: Any) -> dict[str, Any] | None:
    fmt = text.get("format") if isinstance(text, dict) else None
    if not isinstance(fmt, dict) or fmt.get("type") in (None, "text"):
        return None
    if fmt["type"] == "json_object":
        return {"type": "json_object"}
    if fmt["type"] == "json_schema":
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        return {"type": "json_schema", "json_schema": schema}
    raise BadRequest(f"text.format.type: unknown format {fmt['type']!r}", "text.format.type")


def to_chat(
    body: dict[str, Any],
    normalised: list[dict[str, Any]],
    *,
    engine: str,
    model: str | None,
    history: list[dict[str, Any]] = (),
) -> dict[str, Any]:
    """The chat-completions body asking a chat upstream the same question (``history``: the
    items a ``previous_response_id`` stands for)."""
    chat: dict[str, Any] = {
        "model": model or body.get("model") or "",
        "messages": chat_messages(normalised, engine=engine),
    }
    chat_tools = tools(body, [*history, *items(body)])
    if chat_tools:
        chat["tools"] = chat_tools
        if body.get("tool_choice") is not None:
            chat["tool_choice"] = _tool_choice(body["tool_choice"])
        if isinstance(body.get("parallel_tool_calls"), bool):
            chat["parallel_tool_calls"] = body["parallel_tool_calls"]
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    for key in ("temperature", "top_p"):
        if body.get(key) is not None:
            chat[key] = body[key]
    fmt = _response_format(body.get("text"))
    if fmt is not None:
        chat["response_format"] = fmt
    reasoning = body.get("reasoning")
    effort = reasoning.get("effort") if isinstance(reasoning, dict) else None
    if isinstance(effort, str) and (engine != "vllm" or effort in VLLM_EFFORTS):
        chat["reasoning_effort"] = effort  # Codex's minimal / xhigh: vLLM would refuse the call
    if body.get("stream"):
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    return chat
