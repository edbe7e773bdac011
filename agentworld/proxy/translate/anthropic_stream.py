"""Anthropic Messages streams: chat-completions chunks translated to Anthropic events, and Anthropic
events assembled back into the ``Message`` they describe (for recording pass-through streams).

The event grammar is ``message_start``, ``ping``, then for each content block
``content_block_start`` / ``content_block_delta``… / ``content_block_stop``, and
finally ``message_delta`` (stop reason, usage) and ``message_stop``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from agentworld.proxy.translate.anthropic import (
    anthropic_usage,
    error_body,
    message_id,
    stop_reason,
    thinking_signature,
)
from agentworld.proxy.translate.chat_form import (
    Piece,
    first_choice_pieces,
    loads_args,
    short_id,
    sse,
)
from agentworld.raw_ids import RawIds


class _PendingCall:
    """A chat model's tool call whose arguments are still coming."""

    __slots__ = ("arguments", "id", "name")

    def __init__(self, call_id: str, name: str) -> None:
        self.id = call_id
        self.name = name
        self.arguments: list[str] = []


class ChatToAnthropic:
    """Feed parsed ``chat.completion.chunk`` objects; get Anthropic SSE events as bytes.

    Text and thinking stream as they come. A tool call goes out whole, as one
    ``input_json_delta``, once its arguments are complete: when a later call's
    arguments begin (vLLM sends each call's arguments before the next call) or at
    the end. Anthropic streams the partial JSON of an object, and its SDK parses
    every delta as one: what a chat model writes need not be an object (a string,
    invalid JSON, an answer cut off by ``max_tokens``), and is sent as the
    non-streamed answer has it, ``{"_raw_arguments": ...}`` when not an object.
    """

    def __init__(self, body: dict[str, Any], window: bool = False) -> None:
        self.body = body
        self.window = window  # max_tokens was cut to the context window's room
        self.started = False
        self.index = -1  # the open content block, -1 when none
        self.kind: str | None = None  # "thinking" | "text" | "tool_use"
        self.calls: dict[int, _PendingCall] = {}  # chat tool-call index -> the call
        self.sent: set[int] = set()  # chat tool-call indices whose blocks went out
        self.thinking: list[str] = []  # the open thinking block's text, signed when it closes
        self.finish_reason: Any = None
        self.matched_stop: Any = None

    def _start(self, chunk: dict[str, Any]) -> list[bytes]:
        self.started = True
        prompt = chunk.get("prompt_token_ids")
        message = {
            "id": message_id(chunk.get("id")),
            "type": "message",
            "role": "assistant",
            "model": chunk.get("model")
            if isinstance(chunk.get("model"), str)
            else self.body["model"],
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": anthropic_usage(len(prompt) if isinstance(prompt, list | RawIds) else 0, 0, 0),
        }
        return [
            sse("message_start", {"type": "message_start", "message": message}),
            sse("ping", {"type": "ping"}),
        ]

    def _close(self) -> list[bytes]:
        if self.index < 0 or self.kind is None:
            return []
        out = []
        if self.kind == "thinking":  # as Anthropic: the signature is the block's last delta
            signature = thinking_signature("".join(self.thinking))
            out.append(self._delta({"type": "signature_delta", "signature": signature}))
            self.thinking = []
        self.kind = None
        out.append(sse("content_block_stop", {"type": "content_block_stop", "index": self.index}))
        return out

    def _open(self, kind: str, block: dict[str, Any]) -> list[bytes]:
        out = self._close()
        self.index += 1
        self.kind = kind
        out.append(
            sse(
                "content_block_start",
                {"type": "content_block_start", "index": self.index, "content_block": block},
            )
        )
        return out

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return sse(
            "content_block_delta",
            {"type": "content_block_delta", "index": self.index, "delta": delta},
        )

    def feed(self, chunk: Any) -> list[bytes]:
        """Events for one chunk (choice 0 only: Anthropic has no ``n``)."""
        if not isinstance(chunk, dict):
            return []
        return self.feed_pieces(chunk, first_choice_pieces(chunk))

    def feed_pieces(self, chunk: Any, pieces: Iterable[Piece]) -> list[bytes]:
        """Events for a chunk's choice-0 ``pieces`` (``chunk``: read with ``get`` when it
        is the first)."""
        out = [] if self.started else self._start(chunk)
        for piece in pieces:
            if piece.reasoning:
                if self.kind != "thinking":
                    out += self._open(
                        "thinking", {"type": "thinking", "thinking": "", "signature": ""}
                    )
                self.thinking.append(piece.reasoning)
                out.append(self._delta({"type": "thinking_delta", "thinking": piece.reasoning}))
            if piece.text:
                if self.kind != "text":
                    out += self._open("text", {"type": "text", "text": ""})
                out.append(self._delta({"type": "text_delta", "text": piece.text}))
            for tc in piece.tool_calls:
                out += self._tool_call(tc)
            if piece.finish_reason is not None:
                self.finish_reason = piece.finish_reason
            if piece.stop_reason is not None:
                self.matched_stop = piece.stop_reason
        return out

    def _tool_call(self, tc: Any) -> list[bytes]:
        if not isinstance(tc, dict):
            return []
        k = tc.get("index", len(self.calls))
        fn = tc.get("function") if isinstance(tc.get("function"), dict) else {}
        call = self.calls.get(k)
        if call is None:  # an id the upstream left out is made here, and recorded (call_ids)
            call = self.calls[k] = _PendingCall(tc.get("id") or short_id("toolu"), "")
        if isinstance(fn.get("name"), str):
            call.name += fn["name"]  # as the chat assembler reads it: the record agrees
        args = fn.get("arguments")
        if not isinstance(args, str) or not args:
            return []
        call.arguments.append(args)
        # The newest call's arguments have begun: the calls before it are whole.
        return self._send_calls(lambda j: j < k)

    def _send_calls(self, which: Any) -> list[bytes]:
        out: list[bytes] = []
        for j in sorted(self.calls):
            if j in self.sent or not which(j):
                continue
            self.sent.add(j)
            call = self.calls[j]
            block = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
            out += self._open("tool_use", block)
            arguments = orjson.dumps(loads_args("".join(call.arguments))).decode()
            out.append(self._delta({"type": "input_json_delta", "partial_json": arguments}))
        return out

    def call_ids(self) -> list[str]:
        """The ids the agent was given for the answer's tool calls, in the calls' order."""
        return [self.calls[k].id for k in sorted(self.calls)]

    def finish(self, prompt: int, completion: int, cached: int) -> list[bytes]:
        """The closing events, given the final token counts."""
        out = [] if self.started else self._start({})
        out += self._send_calls(lambda j: True)
        out += self._close()
        reason, sequence = stop_reason(
            self.finish_reason,
            self.matched_stop,
            self.body.get("stop_sequences"),
            bool(self.calls),
            self.window,
        )
        usage = anthropic_usage(prompt, completion, cached)
        out.append(
            sse(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": reason, "stop_sequence": sequence},
                    "usage": usage,
                },
            )
        )
        out.append(sse("message_stop", {"type": "message_stop"}))
        return out

    def fail(self, status: int, message: str) -> bytes:
        """What ends the stream when the call failed: Anthropic's error event."""
        return error_event(status, message)


def error_event(status: int, message: str) -> bytes:
    """A mid-stream error, as Anthropic sends one."""
    return sse("error", error_body(status, message))


class AnthropicAssembler:
    """Rebuilds the ``Message`` from an Anthropic event stream (pass-through recording)."""

    def __init__(self) -> None:
        self.message: dict[str, Any] | None = None
        self.blocks: dict[int, dict[str, Any]] = {}
        self.json: dict[int, list[str]] = {}
        self.error: dict[str, Any] | None = None
        self.done = False

    def add(self, event: Any) -> None:
        """Take one parsed event (its ``data:`` object)."""
        if not isinstance(event, dict):
            return
        kind = event.get("type")
        if kind == "message_start" and isinstance(event.get("message"), dict):
            self.message = dict(event["message"])
            self.message["usage"] = dict(self.message.get("usage") or {})
        elif kind == "content_block_start" and isinstance(event.get("index"), int):
            block = event.get("content_block")
            self.blocks[event["index"]] = dict(block) if isinstance(block, dict) else {}
        elif kind == "content_block_delta":
            self._delta(event.get("index"), event.get("delta") or {})
        elif kind == "content_block_stop":
            i = event.get("index")
            if i in self.json and i in self.blocks:
                raw = "".join(self.json.pop(i))
                try:
                    self.blocks[i]["input"] = orjson.loads(raw) if raw else {}
                except orjson.JSONDecodeError:
                    self.blocks[i]["input"] = {"_raw_arguments": raw}
        elif kind == "message_delta" and self.message is not None:
            delta = event.get("delta") or {}
            for key in ("stop_reason", "stop_sequence"):
                if key in delta:
                    self.message[key] = delta[key]
            usage = event.get("usage")
            if isinstance(usage, dict):
                self.message["usage"].update({k: v for k, v in usage.items() if v is not None})
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            err = event.get("error")
            self.error = err if isinstance(err, dict) else {"message": str(err)}

    def _delta(self, i: Any, delta: dict[str, Any]) -> None:
        block = self.blocks.get(i) if isinstance(i, int) else None
        if block is None:
            return
        kind = delta.get("type")
        if kind == "text_delta":
            block["text"] = block.get("text", "") + str(delta.get("text", ""))
        elif kind == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + str(delta.get("thinking", ""))
        elif kind == "signature_delta":
            block["signature"] = str(delta.get("signature", ""))
        elif kind == "input_json_delta":
            self.json.setdefault(i, []).append(str(delta.get("partial_json", "")))

    def result(self) -> dict[str, Any] | None:
        """The message so far (None before ``message_start``)."""
        if self.message is None:
            return None
        return {**self.message, "content": [self.blocks[i] for i in sorted(self.blocks)]}
