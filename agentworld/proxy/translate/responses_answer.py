"""A chat answer as an OpenAI Responses response: its output items, status and usage, the
response record a step keeps, and the errors in the Responses shape.

The request side (checks, input items as messages, tools, the chat body) is in
``responses``; the stream of events in ``responses_stream``.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from agentworld.proxy.translate.chat_form import (
    CONTENT_FILTER,
    LENGTH,
    STOP,
    TOOL_CALLS,
    chat_usage,
    dumps_args,
    first_choice,
    record_usage,
    short_id,
    text_of,
)
from agentworld.proxy.translate.responses import (
    _CALLS,
    Called,
    called,
    called_names,
    custom_input,
    items,
    messages,
)


def status_of(finish: Any) -> tuple[str, dict[str, Any] | None]:
    """(status, incomplete_details) for a chat finish_reason."""
    if finish == LENGTH:
        return "incomplete", {"reason": "max_output_tokens"}
    if finish == CONTENT_FILTER:
        return "incomplete", {"reason": "content_filter"}
    return "completed", None


def usage_of(prompt: int, completion: int, cached: int, reasoning: int = 0) -> dict[str, Any]:
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": prompt + completion,
    }


def reasoning_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
        "status": status,
    }


def message_item(item_id: str, text: str | None, status: str = "completed") -> dict[str, Any]:
    content = (
        []
        if text is None
        else [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
    )
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": content,
    }


def call_item(
    item_id: str,
    call_id: str,
    name: str,
    arguments: str,
    status: str = "completed",
    namespace: str | None = None,
) -> dict[str, Any]:
    item = {
        "id": item_id,
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }
    if namespace is not None:
        item["namespace"] = namespace
    return item


def custom_call_item(
    item_id: str, call_id: str, name: str, input_: str, namespace: str | None = None
) -> dict[str, Any]:
    item = {
        "id": item_id,
        "type": "custom_tool_call",
        "call_id": call_id,
        "name": name,
        "input": input_,
    }
    if namespace is not None:
        item["namespace"] = namespace
    return item


def search_call_item(item_id: str, call_id: str, arguments: str) -> dict[str, Any]:
    """A client-executed tool search call: its arguments an object (what the model wrote,
    or ``{}`` until it is whole)."""
    try:
        args = orjson.loads(arguments) if arguments else {}
    except orjson.JSONDecodeError:
        args = {}
    return {
        "id": item_id,
        "type": "tool_search_call",
        "call_id": call_id,
        "arguments": args if isinstance(args, dict) else {},
        "execution": "client",
        "status": "completed",
    }


def call_item_for(called_as: Called, call_id: str, arguments: str) -> dict[str, Any]:
    """The output item for a chat model's call (arguments as far as they came)."""
    kind, ns, name = called_as
    if kind == "tool_search_call":
        return search_call_item(short_id("ts"), call_id, arguments)
    if kind == "custom_tool_call":
        return custom_call_item(short_id("ctc"), call_id, name, custom_input(arguments), ns)
    return call_item(short_id("fc"), call_id, name, arguments, namespace=ns)


def output_of(msg: dict[str, Any], names: dict[str, Called] | None = None) -> list[dict[str, Any]]:
    """Output items for one chat assistant message: reasoning, message, function calls
    (custom and namespaced tools' calls as ``names`` says they answer)."""
    out = []
    reasoning = msg.get("reasoning")
    if reasoning is None:
        reasoning = msg.get("reasoning_content")
    if isinstance(reasoning, str) and reasoning:
        out.append(reasoning_item(short_id("rs"), reasoning))
    if isinstance(msg.get("content"), str) and msg["content"]:
        out.append(message_item(short_id("msg"), msg["content"]))
    for c in msg.get("tool_calls") or ():
        if not isinstance(c, dict):
            continue
        fn = c.get("function") if isinstance(c.get("function"), dict) else {}
        name, call_id = str(fn.get("name") or ""), c.get("id") or short_id("call")
        arguments = dumps_args(fn.get("arguments"))
        out.append(call_item_for(called(names or {}, name), call_id, arguments))
    return out


def skeleton(
    body: dict[str, Any], response_id: str, model: str, created_at: float
) -> dict[str, Any]:
    """A Response object with the request's settings and no output yet (status in_progress)."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": "in_progress",
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": model,
        "output": [],
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
        "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0),
        "text": body.get("text") or {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_p": body.get("top_p", 1.0),
        "truncation": body.get("truncation", "disabled"),
        "usage": None,
        "user": body.get("user"),
        "metadata": body.get("metadata") or {},
    }


def from_chat(
    chat: dict[str, Any],
    body: dict[str, Any],
    response_id: str,
    tokens: dict[str, Any] | None = None,
    history: list[dict[str, Any]] = (),
) -> dict[str, Any]:
    """The Response object for a (non-streamed or assembled) chat-completions body."""
    choice = first_choice(chat)
    msg = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    model = chat.get("model") if isinstance(chat.get("model"), str) else body.get("model") or ""
    created = chat.get("created") if isinstance(chat.get("created"), int | float) else time.time()
    resp = skeleton(body, response_id, model, created)
    resp["status"], resp["incomplete_details"] = status_of(choice.get("finish_reason"))
    resp["output"] = output_of(msg, called_names(body, [*history, *items(body)]))
    if resp["status"] == "incomplete" and resp["output"] and "status" in resp["output"][-1]:
        resp["output"][-1]["status"] = "incomplete"  # where the answer was cut off
    resp["usage"] = usage_of(*chat_usage(chat, tokens))
    return resp


def response_record(resp: dict[str, Any]) -> dict[str, Any]:
    """A Response object (pass-through) as the record's normalised response."""
    output = [o for o in resp.get("output") or () if isinstance(o, dict)]
    known = [o for o in output if o.get("type") in ("message", *_CALLS, "reasoning")]
    msgs = messages(known, strict=False)
    message: dict[str, Any] = {"role": "assistant", "content": None}
    for m in msgs:  # one turn; join defensively if the upstream split it
        if m.get("content") is not None:
            message["content"] = (message["content"] or "") + text_of(m["content"])
        if m.get("tool_calls"):
            message.setdefault("tool_calls", []).extend(m["tool_calls"])
        if m.get("reasoning"):
            message["reasoning"] = message.get("reasoning", "") + m["reasoning"]
    out: dict[str, Any] = {"message": message}
    status = resp.get("status")
    details = resp.get("incomplete_details") or {}
    if status == "incomplete":
        out["finish_reason"] = (
            LENGTH if details.get("reason") == "max_output_tokens" else CONTENT_FILTER
        )
    elif status == "completed":
        out["finish_reason"] = TOOL_CALLS if message.get("tool_calls") else STOP
    elif isinstance(status, str):
        out["finish_reason"] = status
    if isinstance(resp.get("id"), str):
        out["id"] = resp["id"]
    usage = resp.get("usage")
    if isinstance(usage, dict):
        prompt, completion = usage.get("input_tokens"), usage.get("output_tokens")
        out["usage"] = record_usage(
            prompt if isinstance(prompt, int) else 0,
            completion if isinstance(completion, int) else 0,
        )
    return out


# OpenAI's error type for an HTTP status (SDKs pick their exception by the status; agents
# that log or branch on the type must not read a rate limit as a bad request).
ERROR_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
}
# OpenAI's error code where the status says it (what SDKs and agents back off on).
ERROR_CODES = {429: "rate_limit_exceeded"}


def error_body(
    status: int, message: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """An error in OpenAI's shape, its type (and code, if none is given) by the HTTP status."""
    kind = ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "server_error")
    code = code if code is not None else ERROR_CODES.get(status)
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def stream_error(status: int, message: str) -> dict[str, Any]:
    """The fields of a Responses stream's ``error`` event (its code by the HTTP status)."""
    code = ERROR_CODES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"code": code, "message": message, "param": None}


# OpenAI's words and code for an input over the context window (Codex compacts on the code).
OVERFLOW_MESSAGE = (
    "Your input exceeds the context window of this model. Please adjust your input and try again."
)
OVERFLOW_CODE = "context_length_exceeded"
