"""Chat-completions bodies and stream chunks in vLLM's shapes (token ids included), and SSE parsing."""

from __future__ import annotations

from typing import Any

import orjson


def chat_body(
    *,
    content: str | None = "Hello there.",
    reasoning: str | None = None,
    calls: list[tuple[str, str, str]] = (),  # (id, name, arguments)
    finish: str = "stop",
    stop_reason: Any = None,
    prompt_ids: list[int] | None = None,
) -> dict[str, Any]:
    """A non-streamed vLLM chat.completion with return_token_ids."""
    text = (reasoning or "") + (content or "") + "".join(a for _, _, a in calls)
    prompt_ids = prompt_ids if prompt_ids is not None else [1, 2, 3, 4, 5]
    msg: dict[str, Any] = {"role": "assistant", "content": content, "reasoning": reasoning}
    if calls:
        msg["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in calls
        ]
    return {
        "id": "chatcmpl-abc",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "qwen-tiny",
        "choices": [
            {
                "index": 0,
                "message": msg,
                "finish_reason": finish,
                "stop_reason": stop_reason,
                "token_ids": [ord(c) for c in text],
                "logprobs": {"content": [{"token": c, "logprob": -0.5} for c in text]},
            }
        ],
        "usage": {
            "prompt_tokens": len(prompt_ids),
            "completion_tokens": len(text),
            "total_tokens": len(prompt_ids) + len(text),
        },
        "prompt_token_ids": prompt_ids,
    }


def chat_chunks(
    *,
    content: str | None = "Hello there.",
    reasoning: str | None = None,
    calls: list[tuple[str, str, str]] = (),
    finish: str = "stop",
    stop_reason: Any = None,
    prompt_ids: list[int] | None = None,
    usage: bool = True,
) -> list[dict[str, Any]]:
    """The same answer streamed: role chunk, 3-char pieces, tool-call head + argument pieces, usage."""
    prompt_ids = prompt_ids if prompt_ids is not None else [1, 2, 3, 4, 5]
    base = {"id": "chatcmpl-abc", "object": "chat.completion.chunk", "created": 1700000000}
    base["model"] = "qwen-tiny"

    def chunk(delta: dict[str, Any], ids: str = "", **extra: Any) -> dict[str, Any]:
        c = {"index": 0, "delta": delta, "finish_reason": None, "token_ids": [ord(x) for x in ids]}
        c.update(extra)
        return {**base, "choices": [c]}

    out = [
        {**chunk({"role": "assistant", "content": ""}), "prompt_token_ids": prompt_ids},
    ]
    total = 0
    for kind, text in (("reasoning", reasoning), ("content", content)):
        for k in range(0, len(text or ""), 3):
            piece = text[k : k + 3]
            out.append(chunk({kind: piece}, piece))
            total += len(piece)
    for j, (cid, name, args) in enumerate(calls):
        head = {
            "index": j,
            "id": cid,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        out.append(chunk({"tool_calls": [head]}))
        for k in range(0, len(args), 4):
            piece = args[k : k + 4]
            out.append(
                chunk({"tool_calls": [{"index": j, "function": {"arguments": piece}}]}, piece)
            )
            total += len(piece)
    out.append(chunk({}, "", finish_reason=finish, stop_reason=stop_reason))
    if usage:
        out.append(
            {
                **base,
                "choices": [],
                "usage": {
                    "prompt_tokens": len(prompt_ids),
                    "completion_tokens": total,
                    "total_tokens": len(prompt_ids) + total,
                },
            }
        )
    return out


def parse_sse(data: bytes) -> list[tuple[str | None, dict[str, Any]]]:
    """(event name, data object) of each event in an SSE byte string."""
    out = []
    for raw in data.split(b"\n\n"):
        if not raw.strip():
            continue
        name, payload = None, []
        for line in raw.split(b"\n"):
            if line.startswith(b"event: "):
                name = line[7:].decode()
            elif line.startswith(b"data: "):
                payload.append(line[6:])
        out.append((name, orjson.loads(b"\n".join(payload))))
    return out
