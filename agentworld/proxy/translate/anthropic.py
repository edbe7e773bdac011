"""Anthropic Messages (``POST /v1/messages``): checks, normalisation, and translation to chat completions.

Requests become the record's normalised messages (system as a system message,
and a ``system`` message in ``messages`` as one at its place; ``tool_use``
blocks as tool calls, each ``tool_result`` block as a tool message,
``thinking`` as reasoning), and from those a chat-completions body.

Tools: a chat model gets the client tools. Server tools (web search, web
fetch, code execution, tool search, MCP toolsets), which Anthropic runs
itself, are left out (``left_out``), and the agent's call goes on without
them. A deferred tool (``defer_loading``) reaches the model once a
``tool_reference`` in a tool result has loaded it, as Anthropic expands it;
with a server-side tool search, which a chat upstream has not, every
deferred tool is given up front.

A chat-completions answer becomes an Anthropic ``Message``; an Anthropic
answer (pass-through) becomes the record's normalised response.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from agentworld.proxy.bad_request import BadRequest
from agentworld.proxy.normal_form import check_tool_name
from agentworld.proxy.redact import recorded_params
from agentworld.proxy.translate.chat_form import (
    CONTENT_FILTER,
    LENGTH,
    STOP,
    TOOL_CALLS,
    VLLM_EFFORTS,
    chat_messages,
    chat_usage,
    check_number,
    dumps_args,
    first_choice,
    function_tool,
    loads_args,
    record_usage,
    short_id,
    text_of,
)

PROTOCOL = "anthropic.messages"
PATH = "/v1/messages"

# Fields of a request that are not generation parameters (recorded elsewhere in the step).
_NOT_PARAMS = frozenset({"model", "messages", "system", "tools"})
# Tools with a schema of their own (a chat model can be given them).
_CLIENT_TOOL_TYPES = (None, "custom")  # a tuple: a type of any JSON shape can be looked up
# Tools Anthropic's servers run (by type prefix): left out when translating to a chat upstream.
# Anthropic-defined client tools (bash_*, text_editor_*, computer_*, memory_*) have no schema
# a chat model could be given, and the agent relies on them: those need passthrough.
_SERVER_TOOL_PREFIXES = (
    "web_search_",
    "web_fetch_",
    "code_execution_",
    "tool_search_tool_",
    "mcp_toolset",
)

STOP_REASONS = {
    STOP: "end_turn",
    LENGTH: "max_tokens",
    TOOL_CALLS: "tool_use",
    "function_call": "tool_use",
    CONTENT_FILTER: "refusal",
}
FINISH_REASONS = {
    "end_turn": STOP,
    "stop_sequence": STOP,
    "max_tokens": LENGTH,
    "model_context_window_exceeded": LENGTH,
    "tool_use": TOOL_CALLS,
    "refusal": CONTENT_FILTER,
}
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def error_body(status: int, message: str) -> dict[str, Any]:
    """An error in Anthropic's shape, its type chosen by the HTTP status."""
    kind = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


# -- checks -------------------------------------------------------------------------------


def check(body: dict[str, Any], *, count_only: bool = False) -> None:
    """Raise BadRequest naming the first malformed field of a Messages request (of a
    count_tokens request with ``count_only``: no ``max_tokens`` then)."""
    if not isinstance(body.get("model"), str):
        raise BadRequest("model: Field required (a string)", "model")
    max_tokens = body.get("max_tokens")
    if not count_only and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
    ):
        raise BadRequest("max_tokens: Field required (a positive integer)", "max_tokens")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages: Field required (a list of at least one message)", "messages")
    for i, m in enumerate(messages):
        where = f"messages.{i}"
        if not isinstance(m, dict):
            raise BadRequest(f"{where}: expected an object", where)
        if m.get("role") not in ("user", "assistant", "system"):
            raise BadRequest(
                f"{where}.role: must be 'user', 'assistant' or 'system'", f"{where}.role"
            )
        _check_content(m.get("content"), f"{where}.content")
    system = body.get("system")
    if system is not None and not isinstance(system, str):
        _check_content(system, "system")
    tools = body.get("tools")
    if tools is not None and not (
        isinstance(tools, list) and all(isinstance(t, dict) for t in tools)
    ):
        raise BadRequest("tools: expected a list of tool objects", "tools")
    choice = body.get("tool_choice")
    if choice is not None and not (
        isinstance(choice, dict) and isinstance(choice.get("type"), str)
    ):
        raise BadRequest("tool_choice: expected an object with a 'type'", "tool_choice")
    if choice is not None and choice["type"] == "tool":
        names = {t.get("name") for t in tools or ()}
        if choice.get("name") not in names:  # Anthropic refuses a choice of no tool given
            raise BadRequest(
                f"tool_choice.name: {choice.get('name')!r} is not one of the request's tools",
                "tool_choice.name",
            )
    stops = body.get("stop_sequences")
    if stops is not None and not (
        isinstance(stops, list) and all(isinstance(s, str) for s in stops)
    ):
        raise BadRequest("stop_sequences: expected a list of strings", "stop_sequences")
    if body.get("stream") is not None and not isinstance(body["stream"], bool):
        raise BadRequest("stream: expected a boolean", "stream")
    for key in ("temperature", "top_p"):
        check_number(body, key)
    check_number(body, "top_k", integer=True)
    thinking = body.get("thinking")
    if thinking is not None and not isinstance(thinking, dict):
        raise BadRequest("thinking: expected an object", "thinking")


def _check_content(content: Any, where: str) -> None:
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise BadRequest(f"{where}: expected a string or a list of content blocks", where)
    for j, block in enumerate(content):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise BadRequest(f"{where}.{j}: expected a content block with a 'type'", f"{where}.{j}")
        kind = block["type"]
        if kind == "tool_use":
            check_tool_name(block.get("id"), f"{where}.{j}.id")
            check_tool_name(block.get("name"), f"{where}.{j}.name")
        elif kind == "tool_result" and block.get("content") is not None:
            _check_content(block["content"], f"{where}.{j}.content")


# -- requests -----------------------------------------------------------------------------


def _image_part(block: dict[str, Any], where: str) -> dict[str, Any]:
    src = block.get("source") if isinstance(block.get("source"), dict) else {}
    if src.get("type") == "base64":
        url = f"data:{src.get('media_type', 'image/png')};base64,{src.get('data', '')}"
    elif src.get("type") == "url" and isinstance(src.get("url"), str):
        url = src["url"]
    else:
        raise BadRequest(f"{where}.source: an image source is base64 or url", f"{where}.source")
    return {"type": "image_url", "image_url": {"url": url}}


def _parts(content: Any, where: str) -> list[dict[str, Any]]:
    """User-side content blocks (text, image, document text) as chat content parts."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    out = []
    for j, b in enumerate(content or ()):
        kind = b.get("type")
        if kind == "text":
            out.append({"type": "text", "text": str(b.get("text", ""))})
        elif kind == "image":
            out.append(_image_part(b, f"{where}.{j}"))
        elif kind == "document" and (b.get("source") or {}).get("type") == "text":
            out.append({"type": "text", "text": str(b["source"].get("data", ""))})
        elif kind == "tool_reference":  # a tool search's result: the tool is now loaded
            out.append({"type": "text", "text": f"Tool loaded: {b.get('tool_name', '')}"})
        else:
            raise BadRequest(
                f"{where}.{j}: content block type {kind!r} is not supported here", f"{where}.{j}"
            )
    return out


def _simplify(parts: list[dict[str, Any]], original: Any) -> Any:
    """Keep a string a string; a list stays a list of parts (how the agent sent it)."""
    if isinstance(original, str):
        return original
    return parts


def _user(m: dict[str, Any], where: str) -> list[dict[str, Any]]:
    content = m.get("content")
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    out: list[dict[str, Any]] = []
    rest = []
    # tool_result blocks come first in a user turn; each is its own tool message.
    for j, b in enumerate(content):
        if b.get("type") == "tool_result":
            body = b.get("content")
            parts = _parts(body if body is not None else "", f"{where}.{j}.content")
            if all(p["type"] == "text" for p in parts):
                result: Any = "".join(p["text"] for p in parts)
            else:
                result = parts
            out.append(
                {"role": "tool", "tool_call_id": str(b.get("tool_use_id", "")), "content": result}
            )
        else:
            rest.append(b)
    if rest or not out:
        out.append({"role": "user", "content": _parts(rest, where)})
    return out


def _assistant(m: dict[str, Any], where: str) -> dict[str, Any]:
    content = m.get("content")
    msg: dict[str, Any] = {"role": "assistant"}
    if isinstance(content, str):
        msg["content"] = content
        return msg
    texts, calls, thinking = [], [], []
    for j, b in enumerate(content):
        kind = b.get("type")
        if kind == "text":
            texts.append(str(b.get("text", "")))
        elif kind == "tool_use":
            calls.append(
                {
                    "id": str(b.get("id", "")),
                    "name": str(b.get("name", "")),
                    "arguments": dumps_args(b.get("input")),
                }
            )
        elif kind == "thinking":
            thinking.append(str(b.get("thinking", "")))
        elif kind == "redacted_thinking":
            continue  # opaque to anything but Anthropic
        else:
            raise BadRequest(
                f"{where}.{j}: content block type {kind!r} is not supported here", f"{where}.{j}"
            )
    msg["content"] = "".join(texts) if texts else None
    if calls:
        msg["tool_calls"] = calls
    if thinking:
        msg["reasoning"] = "".join(thinking)
    return msg


def _system_text(system: Any) -> str:
    """A system prompt's text: its blocks are separate paragraphs of one prompt."""
    if isinstance(system, str):
        return system
    return "\n\n".join(text_of([b]) for b in system or ())


def messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The request as normalised record messages (the system prompt first)."""
    out: list[dict[str, Any]] = []
    system = _system_text(body.get("system"))
    if system:
        out.append({"role": "system", "content": system})
    for i, m in enumerate(body["messages"]):
        where = f"messages.{i}.content"
        if m["role"] == "user":
            out.extend(_user(m, where))
        elif m["role"] == "system":  # applies from here on (a mid-conversation instruction)
            out.append({"role": "system", "content": _system_text(m.get("content"))})
        else:
            out.append(_assistant(m, where))
    return out


def _server_tool(t: dict[str, Any]) -> bool:
    kind = t.get("type")
    return isinstance(kind, str) and kind.startswith(_SERVER_TOOL_PREFIXES)


def _loaded(body: dict[str, Any]) -> set[str]:
    """Names of the tools ``tool_reference`` blocks in the conversation's tool results load."""
    names = set()
    for m in body.get("messages") or ():
        if m.get("role") != "user" or not isinstance(m.get("content"), list):
            continue
        for b in m["content"]:
            if b.get("type") == "tool_result" and isinstance(b.get("content"), list):
                names.update(
                    str(r.get("tool_name"))
                    for r in b["content"]
                    if isinstance(r, dict) and r.get("type") == "tool_reference"
                )
    return names


def tools(body: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The tools a chat model is given, in the chat shape: client tools, deferred ones once
    loaded; server tools left out (raises for Anthropic-defined client tools)."""
    out = []
    listed = body.get("tools") or ()
    server_search = any(_server_tool(t) and "tool_search" in t["type"] for t in listed)
    loaded = None
    for i, t in enumerate(listed):
        if t.get("type") not in _CLIENT_TOOL_TYPES:
            if _server_tool(t):
                continue
            raise BadRequest(
                f"tools.{i}: tool type {t.get('type')!r} needs an Anthropic upstream "
                '(use protocol_mode = "passthrough")',
                f"tools.{i}",
            )
        tool = function_tool(
            t.get("name"), t.get("description"), t.get("input_schema"), f"tools.{i}"
        )
        if isinstance(t.get("strict"), bool):  # strict tool use: arguments match the schema
            tool["function"]["strict"] = t["strict"]
        if t.get("defer_loading") is True and not server_search:
            if loaded is None:
                loaded = _loaded(body)
            if t["name"] not in loaded:
                continue
        out.append(tool)
    return out or None


def left_out(body: dict[str, Any]) -> list[str]:
    """The server tools translation leaves out (by name, else type)."""
    return [str(t.get("name") or t.get("type")) for t in body.get("tools") or () if _server_tool(t)]


def record_tools(body: dict[str, Any]) -> list[dict[str, Any]] | None:
    """Tools for a pass-through step's record: client tools in the chat shape, others (and any
    that will not take that shape) as the agent sent them."""
    out = []
    for i, t in enumerate(body.get("tools") or ()):
        tool = t
        if t.get("type") in _CLIENT_TOOL_TYPES:
            try:
                tool = function_tool(
                    t.get("name"), t.get("description"), t.get("input_schema"), f"tools.{i}"
                )
            except BadRequest:
                pass  # a shape the chat form will not take: kept as sent
        out.append(tool)  # an MCP server's credentials are redacted as it is written
    return out or None


def _tool_choice(choice: dict[str, Any]) -> tuple[Any, bool | None]:
    kind = choice.get("type")
    parallel = False if choice.get("disable_parallel_tool_use") else None
    if kind == "auto":
        return "auto", parallel
    if kind == "any":
        return "required", parallel
    if kind == "none":
        return "none", None
    if kind == "tool" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}, parallel
    raise BadRequest(f"tool_choice.type: unknown choice {kind!r}", "tool_choice.type")


def params(body: dict[str, Any]) -> dict[str, Any]:
    """The agent's generation parameters, as it sent them (for the record)."""
    return recorded_params(body, _NOT_PARAMS)


def chat_prompt(
    body: dict[str, Any], normalised: list[dict[str, Any]], *, engine: str, model: str | None
) -> dict[str, Any]:
    """What makes the prompt a chat upstream renders: model, messages, tools and the
    thinking switch (also what ``count_tokens`` asks the tokenizer about)."""
    chat: dict[str, Any] = {
        "model": model or body["model"],
        "messages": chat_messages(normalised, engine=engine),
    }
    chat_tools = tools(body)
    if chat_tools:
        chat["tools"] = chat_tools
    last = normalised[-1] if normalised else {}
    if engine == "vllm" and last.get("role") == "assistant" and not last.get("tool_calls"):
        # A prefill: Anthropic goes on with the final assistant turn rather than answer it.
        chat["continue_final_message"] = True
        chat["add_generation_prompt"] = False
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and engine == "vllm":
        # Chat templates that can think (Qwen3, DeepSeek, ...) read this switch; others ignore it.
        # "enabled" and "adaptive" both think (a chat model has no budget to adapt).
        chat["chat_template_kwargs"] = {"enable_thinking": thinking.get("type") != "disabled"}
    return chat


def to_chat(
    body: dict[str, Any], normalised: list[dict[str, Any]], *, engine: str, model: str | None
) -> dict[str, Any]:
    """The chat-completions body asking a chat upstream the same question."""
    chat = chat_prompt(body, normalised, engine=engine, model=model)
    chat["max_tokens"] = body["max_tokens"]
    chat_tools = chat.get("tools")
    if isinstance(body.get("tool_choice"), dict):
        choice, parallel = _tool_choice(body["tool_choice"])
        if chat_tools or choice == "none":
            chat["tool_choice"] = choice
        if parallel is not None:
            chat["parallel_tool_calls"] = parallel
    for key in ("temperature", "top_p"):
        if body.get(key) is not None:
            chat[key] = body[key]
    output = body.get("output_config") if isinstance(body.get("output_config"), dict) else {}
    if output.get("effort") in VLLM_EFFORTS and engine == "vllm":  # vLLM hands it to the template
        chat["reasoning_effort"] = output["effort"]
    fmt = output.get("format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        if not isinstance(fmt.get("schema"), dict):
            raise BadRequest(
                "output_config.format.schema: a JSON schema (object) is required",
                "output_config.format.schema",
            )
        # Structured output: the engine constrains decoding to the schema, as Anthropic does.
        schema = {"name": "output", "schema": fmt["schema"], "strict": True}
        chat["response_format"] = {"type": "json_schema", "json_schema": schema}
    if body.get("top_k") is not None and engine == "vllm":
        chat["top_k"] = body["top_k"]
    if body.get("stop_sequences"):
        chat["stop"] = body["stop_sequences"]
    if body.get("stream"):
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    return chat


def overflow_message(prompt: int, window: int) -> str:
    """Anthropic's words for a prompt over the context window (Claude Code compacts on them)."""
    return f"prompt is too long: {prompt} tokens > {window} maximum"


# -- responses ----------------------------------------------------------------------------


def stop_reason(
    finish: Any, matched: Any, stop_sequences: Any, has_calls: bool, window: bool = False
) -> tuple[str, str | None]:
    """(Anthropic stop_reason, stop_sequence) for a chat finish_reason and vLLM's matched stop;
    ``window``: max_tokens was cut to the room left in the context window, so a length stop
    is the window's (``model_context_window_exceeded``)."""
    if finish == LENGTH:  # a tool call cut off too: its input is not whole
        return ("model_context_window_exceeded" if window else "max_tokens"), None
    if has_calls:
        return "tool_use", None
    if finish == STOP and isinstance(matched, str) and matched in (stop_sequences or ()):
        return "stop_sequence", matched
    return STOP_REASONS.get(finish, "end_turn"), None


def anthropic_usage(prompt: int, completion: int, cached: int) -> dict[str, Any]:
    return {
        "input_tokens": max(prompt - cached, 0),
        "output_tokens": completion,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
    }


def message_id(chat_id: Any) -> str:
    return f"msg_{chat_id}" if isinstance(chat_id, str) and chat_id else short_id("msg")


def thinking_signature(thinking: str) -> str:
    """The ``signature`` of a translated thinking block: a digest of its text.

    Anthropic signs each thinking block, and clients hold a block without a
    signature for an interrupted one: pi sends it back as a text block (the
    model would see its own reasoning as something it said), and the next call
    then no longer continues the conversation it answered. The proxy signs what
    it translates; the signature says the text is as the proxy sent it.
    """
    digest = hashlib.sha256(thinking.encode("utf-8", "surrogatepass")).digest()
    return "aw1." + base64.b64encode(digest).decode()


def from_chat(
    chat: dict[str, Any],
    body: dict[str, Any],
    tokens: dict[str, Any] | None = None,
    window: bool = False,
) -> dict[str, Any]:
    """The Anthropic ``Message`` for a (non-streamed or assembled) chat-completions body."""
    choice = first_choice(chat)
    msg = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    content: list[dict[str, Any]] = []
    reasoning = msg.get("reasoning")
    if reasoning is None:
        reasoning = msg.get("reasoning_content")
    if isinstance(reasoning, str) and reasoning:
        content.append(
            {"type": "thinking", "thinking": reasoning, "signature": thinking_signature(reasoning)}
        )
    if isinstance(msg.get("content"), str) and msg["content"]:
        content.append({"type": "text", "text": msg["content"]})
    calls = [c for c in msg.get("tool_calls") or () if isinstance(c, dict)]
    for c in calls:
        fn = c.get("function") if isinstance(c.get("function"), dict) else {}
        content.append(
            {
                "type": "tool_use",
                "id": c.get("id") or short_id("toolu"),
                "name": str(fn.get("name") or ""),
                "input": loads_args(dumps_args(fn.get("arguments"))),
            }
        )
    reason, sequence = stop_reason(
        choice.get("finish_reason"),
        choice.get("stop_reason"),
        body.get("stop_sequences"),
        bool(calls),
        window,
    )
    return {
        "id": message_id(chat.get("id")),
        "type": "message",
        "role": "assistant",
        "model": chat.get("model") if isinstance(chat.get("model"), str) else body["model"],
        "content": content,
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": anthropic_usage(*chat_usage(chat, tokens)),
    }


def response_record(message: dict[str, Any]) -> dict[str, Any]:
    """An Anthropic ``Message`` (pass-through) as the record's normalised response."""
    blocks = [b for b in message.get("content") or () if isinstance(b, dict)]
    norm = _assistant(
        {"content": [b for b in blocks if b.get("type") in ("text", "tool_use", "thinking")]},
        "content",
    )
    out: dict[str, Any] = {"message": norm}
    reason = message.get("stop_reason")
    if isinstance(reason, str):
        out["finish_reason"] = FINISH_REASONS.get(reason, reason)
    if isinstance(message.get("id"), str):
        out["id"] = message["id"]
    usage = message.get("usage")
    if isinstance(usage, dict):
        prompt = sum(
            usage.get(k) or 0
            for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
            if isinstance(usage.get(k) or 0, int)
        )
        completion = usage.get("output_tokens")
        out["usage"] = record_usage(prompt, completion if isinstance(completion, int) else 0)
    return out
