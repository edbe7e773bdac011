"""The relays of a streamed Anthropic Messages or OpenAI Responses call.

Translated: the chat upstream's chunks become the protocol's events as they
come (``[DONE]`` ends it; the protocol's own closing events follow the record).
Passed through: the protocol's own events go as they came, the final one
(``message_stop``, ``response.completed``...) held until the step is recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from agentworld.proxy.adapters import openai_chunks
from agentworld.proxy.adapters.base import Answer
from agentworld.proxy.adapters.openai import CHAT
from agentworld.proxy.adapters.translated_steps import ok_step
from agentworld.proxy.sse import MALFORMED, StreamAssembler, event_data
from agentworld.proxy.translate.chat_form import chat_usage, name_calls
from agentworld.proxy.translate.context_window import clamped
from agentworld.proxy.upstream import answer_json
from agentworld.proxy.upstream.faults import Fault

if TYPE_CHECKING:
    from agentworld.proxy.adapters.base import Exchange
    from agentworld.proxy.adapters.translated import TranslatedAdapter


class _ProtocolRelay:
    """What both relays share: the protocol's content type, and the end that never came."""

    done = False
    asm: Any

    def __init__(self, x: Exchange, url: str, adapter: TranslatedAdapter) -> None:
        self._x = x
        self._url = url
        self._adapter = adapter

    @property
    def error(self) -> dict[str, Any] | None:
        return self.asm.error

    def content_type(self, upstream: str) -> str:
        return "text/event-stream"

    def partial(self) -> Any:
        return self.asm.result()

    def end_fault(self) -> Fault | None:
        if self.done or self.asm.error is not None:
            return None
        return Fault(502, "upstream_disconnected", f"upstream {self._url} ended the stream early")

    def _malformed(self, exc: Exception) -> Fault:
        return Fault(502, "upstream_invalid", f"upstream {self._url} sent a malformed event: {exc}")


class TranslatedRelay(_ProtocolRelay):
    """Chat chunks translated to the protocol's events, event by event."""

    def __init__(self, x: Exchange, url: str, adapter: TranslatedAdapter) -> None:
        super().__init__(x, url, adapter)
        self.asm = StreamAssembler(chat=True)
        self.tr = adapter.translator(x.body, x.rid, clamped(x.call), x.history)
        # The agent gets the protocol's events, never the chat chunks: nothing is written
        # again from them, so the lenient reading serves every call.
        self._typed: Callable[[bytes], Any] | None = openai_chunks.READ

    def ends_in(self, data: bytes) -> bool:
        return data.find(b"data: [DONE]") >= 0  # not ``in``: see sse.py

    def feed(self, events: list[bytes], parts: list[bytes]) -> Fault | None:
        typed, small = self._typed, answer_json.MIN_RAW_BYTES
        for ev in events:
            payload = event_data(ev)
            if payload is None:
                continue  # a comment: no event of the protocol's
            if payload.strip() == b"[DONE]":
                self.done = True  # the protocol's own closing events follow the record
                continue
            if typed is not None and len(payload) < small:
                # Read into structs where they read it exactly (as the chat relay does:
                # openai_chunks); the agent's events are made from the same pieces.
                try:
                    chunk = typed(payload)
                except openai_chunks.NOT_TYPED:
                    chunk = self._typed = typed = None
                if chunk is not None and chunk.error is openai_chunks.UNSET:
                    try:
                        self.asm.add_typed(chunk)
                        parts += self.tr.feed_pieces(
                            chunk, openai_chunks.first_choice_pieces(chunk)
                        )
                    except MALFORMED as exc:
                        return self._malformed(exc)
                    continue
            try:
                obj = answer_json.loads(payload)
            except orjson.JSONDecodeError:
                continue
            try:
                self.asm.add(obj)
                if isinstance(obj, dict) and ("error" not in obj or "choices" in obj):
                    parts += self.tr.feed(obj)
            except MALFORMED as exc:
                return self._malformed(exc)
        return None

    def close(self, partial: Any) -> Answer:
        x, tr = self._x, self.tr
        name_calls(partial, self._adapter.call_prefix, tr.call_ids())
        got = CHAT.choices(partial)
        if not got:
            raise ValueError("the stream has no choices")
        tokens = got[0][2]
        counts = chat_usage(partial, tokens)
        tail = b"".join(tr.finish(*counts))
        proto = self._adapter.streamed(tr, partial, x.body, tokens, counts)
        rec, _, replies = ok_step(self._adapter, x, partial, proto)
        return Answer(tail, "", replies, lambda: [rec])

    def fault_event(self, fault: Fault, from_upstream: bool) -> bytes:
        return self.tr.fail(fault.status, fault.message)  # closes the stream as the protocol does

    def error_event(self, status: int, message: str, kind: str) -> bytes:
        return self.tr.fail(status, message)


class PassthroughRelay(_ProtocolRelay):
    """The protocol's own events, as they came; the final one held for the record."""

    def __init__(self, x: Exchange, url: str, adapter: TranslatedAdapter) -> None:
        super().__init__(x, url, adapter)
        self.asm = adapter.assembler()
        self.final = b""  # the final event, sent once the step is recorded
        self._finals = adapter.final_events
        self._markers = tuple(f'"{t}"'.encode() for t in adapter.final_events)

    def ends_in(self, data: bytes) -> bool:
        return any(data.find(m) >= 0 for m in self._markers)  # not ``in``: see sse.py

    def feed(self, events: list[bytes], parts: list[bytes]) -> Fault | None:
        x = self._x
        for ev in events:
            payload = event_data(ev)
            if payload is None:
                parts.append(ev + b"\n\n")
                continue
            try:
                obj = answer_json.loads(payload)
            except orjson.JSONDecodeError:
                parts.append(ev + b"\n\n")
                continue
            try:
                self.asm.add(obj)
                if not isinstance(obj, dict):
                    continue
                if isinstance(obj.get("sequence_number"), int):
                    x.seq = obj["sequence_number"]
                is_final = obj.get("type") in self._finals
            except MALFORMED as exc:
                return self._malformed(exc)
            if is_final:
                self.done = True  # released once the step is registered (and durable, if strict)
                self.final = ev + b"\n\n"
            else:
                parts.append(ev + b"\n\n")
        return None

    def close(self, partial: Any) -> Answer:
        if partial is None:
            raise ValueError("the stream never started a message")
        rec, _, replies = ok_step(self._adapter, self._x, partial)
        return Answer(self.final, "", replies, lambda: [rec])

    def fault_event(self, fault: Fault, from_upstream: bool) -> bytes:
        if from_upstream:  # the upstream's error event reached the agent as it came
            return b""
        return self.error_event(fault.status, fault.message, "upstream_error")

    def error_event(self, status: int, message: str, kind: str) -> bytes:
        # Responses events continue the upstream's sequence numbers.
        return self._adapter.error_event(status, message, self._x.seq + 1)
