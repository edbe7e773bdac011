"""What the Anthropic and Responses adapters share: normalised messages as chat-completions input.

Both protocols are translated in two hops, protocol -> the record's normalised
messages -> a chat-completions body, so the record and the upstream request
are built from the same list and cannot disagree.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import orjson

from agentworld.proxy.bad_request import BadRequest
from agentworld.proxy.normal_form import check_tool_name

# Chat finish reasons as the record stores them (the chat adapter's own vocabulary).
STOP, LENGTH, TOOL_CALLS, CONTENT_FILTER = "stop", "length", "tool_calls", "content_filter"
# The ``reasoning_effort`` values vLLM's chat requests take (it refuses any other with a
# 400; it hands them to the chat template). OpenAI's own take more (minimal, none, xhigh).
VLLM_EFFORTS = ("low", "medium", "high")


def short_id(prefix: str) -> str:
    """An opaque protocol object id (``msg_…``, ``resp_…``, ``fc_…``)."""
    return f"{prefix}_{secrets.token_hex(12)}"


def sse(event: str, data: dict[str, Any]) -> bytes:
    """One server-sent event with a name, as Anthropic and the Responses API frame them."""
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def dumps_args(value: Any) -> str:
    """Tool-call arguments as the JSON string the record and chat completions carry."""
    if isinstance(value, str):
        return value
    return orjson.dumps(value if value is not None else {}).decode()


def loads_args(arguments: str) -> dict[str, Any]:
    """Tool-call arguments as an object; text that is not a JSON object is kept, not lost."""
    try:
        value = orjson.loads(arguments) if arguments.strip() else {}
    except orjson.JSONDecodeError:
        return {"_raw_arguments": arguments}
    return value if isinstance(value, dict) else {"_raw_arguments": arguments}


def text_of(parts: Any) -> str:
    """The text of a content string or a list of parts (other parts skipped)."""
    if isinstance(parts, str):
        return parts
    if not isinstance(parts, list):
        return ""
    return "".join(
        p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)
    )


def chat_messages(messages: Iterable[dict[str, Any]], *, engine: str) -> list[dict[str, Any]]:
    """Normalised record messages as chat-completions messages for the upstream.

    vLLM chat templates rarely know the ``developer`` role and read earlier
    reasoning from ``reasoning_content``; a plain OpenAI upstream gets neither.
    """
    out = []
    for m in messages:
        role = m["role"]
        if role == "developer" and engine == "vllm":
            role = "system"
        msg: dict[str, Any] = {"role": role, "content": m.get("content")}
        if role == "tool":
            msg["tool_call_id"] = m.get("tool_call_id") or ""
        if m.get("name"):
            msg["name"] = m["name"]
        if m.get("tool_calls"):
            msg["tool_calls"] = [
                {
                    "id": c.get("id") or short_id("call"),
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c["arguments"]},
                }
                for c in m["tool_calls"]
            ]
        if m.get("reasoning") and engine == "vllm":
            msg["reasoning_content"] = m["reasoning"]
        out.append(msg)
    return out


def function_tool(name: Any, description: Any, parameters: Any, where: str) -> dict[str, Any]:
    """One tool definition in the chat-completions shape (also the record's tool shape)."""
    if not isinstance(name, str) or not name:
        raise BadRequest(f"{where}.name: a tool needs a name (string)", f"{where}.name")
    check_tool_name(name, f"{where}.name")
    fn: dict[str, Any] = {"name": name}
    if isinstance(description, str):
        fn["description"] = description
    if parameters is not None:
        if not isinstance(parameters, dict):
            raise BadRequest(f"{where}: the input schema must be an object", where)
        fn["parameters"] = parameters
    else:
        fn["parameters"] = {"type": "object", "properties": {}}
    return {"type": "function", "function": fn}


def chat_usage(body: dict[str, Any], tokens: dict[str, Any] | None = None) -> tuple[int, int, int]:
    """(prompt, completion, cached prompt) token counts of a chat body, counted from ids if absent."""
    usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
    prompt = usage.get("prompt_tokens")
    completion = usage.get("completion_tokens")
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    tokens = tokens or {}
    if not isinstance(prompt, int):
        prompt = len(tokens.get("prompt_ids") or ())
    if not isinstance(completion, int):
        completion = len(tokens.get("completion_ids") or ())
    return prompt, completion, cached if isinstance(cached, int) else 0


def record_usage(prompt: int, completion: int) -> dict[str, int]:
    """Usage in the record's (chat) vocabulary, whatever the protocol called it."""
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def first_choice(body: dict[str, Any]) -> dict[str, Any]:
    """Choice 0 of a chat body (Anthropic and Responses have no ``n``)."""
    for c in body.get("choices") or ():
        if isinstance(c, dict) and c.get("index", 0) == 0:
            return c
    return {}


def name_calls(chat: dict[str, Any], prefix: str, given: Sequence[str] = ()) -> None:
    """Give choice 0's tool calls that came without an id one, in place: ``given[i]`` (the
    id a stream translator already sent the agent for call ``i``), else a new one.

    The agent, the step's normalised response and its ``raw`` answer then name each
    call alike, and the agent's next request, which sends the ids back, continues it.
    """
    msg = first_choice(chat).get("message")
    calls = msg.get("tool_calls") if isinstance(msg, dict) else None
    for i, c in enumerate(calls if isinstance(calls, list) else ()):
        if isinstance(c, dict) and not c.get("id"):
            c["id"] = given[i] if i < len(given) else short_id(prefix)


class Piece(NamedTuple):
    """What one streamed chat chunk adds to choice 0."""

    reasoning: str  # "" when none
    text: str
    tool_calls: Any  # the delta's tool-call pieces, as sent
    finish_reason: Any
    stop_reason: Any


def first_choice_pieces(chunk: dict[str, Any]) -> Iterator[Piece]:
    """Choice 0's pieces in a streamed chat chunk (Anthropic and Responses have no ``n``)."""
    for c in chunk.get("choices") or ():
        if not isinstance(c, dict) or c.get("index", 0) != 0:
            continue
        delta = c.get("delta") if isinstance(c.get("delta"), dict) else {}
        reasoning = delta.get("reasoning")
        if reasoning is None:
            reasoning = delta.get("reasoning_content")
        text = delta.get("content")
        yield Piece(
            reasoning if isinstance(reasoning, str) else "",
            text if isinstance(text, str) else "",
            delta.get("tool_calls") or (),
            c.get("finish_reason"),
            c.get("stop_reason"),
        )


def check_number(body: dict[str, Any], key: str, *, integer: bool = False) -> None:
    v = body.get(key)
    if v is None:
        return
    if isinstance(v, bool) or not isinstance(v, int if integer else int | float):
        kind = "an integer" if integer else "a number"
        raise BadRequest(f"'{key}' must be {kind}", key)
