"""A chat or completions stream relayed as the upstream sent it: the identity ``Relay``.

Each event goes to the agent byte for byte unless the proxy asked for token ids
or log-probs the agent did not (then it is re-encoded without them), while the
assembler rebuilds the whole answer for the record. ``[DONE]`` is held back: the
pipeline sends it once the step is registered (and durable, in strict mode).

This is the proxy's hottest loop (every token of every streamed call), so a
chat stream's events go first to the compiled reader (``fast_chunks``, where the
C extension is built: one call a read, up to the first event it does not take
with certainty); the rest, and every event without it, are read in Python: the
usual one-line ``data: `` event inline, and a chat event into typed structs
(``openai_chunks``: no dicts, and of the log-probs only their values) wherever
those read it exactly; the general way (orjson, ``StreamAssembler.add``) takes
what they do not.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from agentworld import raw_ids
from agentworld.proxy.adapters import fast_chunks, openai_chunks
from agentworld.proxy.adapters.base import Answer
from agentworld.proxy.recorder import ok_steps
from agentworld.proxy.sse import LF, MALFORMED, StreamAssembler, encode_event, event_data
from agentworld.proxy.upstream import answer_json
from agentworld.proxy.upstream.faults import Fault

if TYPE_CHECKING:
    from agentworld.proxy.adapters.base import Exchange
    from agentworld.proxy.adapters.openai import OpenAIAdapter

DONE = b"data: [DONE]\n\n"


class OpenAIRelay:
    """The events of one streamed chat or completions call (see the module docstring)."""

    def __init__(self, x: Exchange, url: str, adapter: OpenAIAdapter) -> None:
        self._x = x
        self._url = url
        self._adapter = adapter
        self.asm = StreamAssembler(chat=adapter.chat)
        self.done = False
        injected = x.call.injected
        # The typed reading (see openai_chunks): READ when events go as they came,
        # REWRITE when their log-probs are nulled (the entries are not kept to write).
        self._typed: Callable[[bytes], Any] | None = None
        if adapter.chat and not injected.any:
            self._typed = openai_chunks.READ
        elif adapter.chat and injected.logprobs:
            self._typed = openai_chunks.REWRITE
        # The compiled reading of what the typed one reads (where built). It stops where
        # the typed reading does, for the rest of the stream: see ``feed``.
        self._fast: fast_chunks.Read | None = None
        if self._typed is not None:
            self._fast = fast_chunks.reader(
                self.asm,
                rewrite=self._typed is openai_chunks.REWRITE,
                strip_ids=injected.token_ids,
                max_payload=answer_json.MIN_RAW_BYTES,
            )

    @property
    def error(self) -> dict[str, Any] | None:
        return self.asm.error

    def content_type(self, upstream: str) -> str:
        return upstream

    def ends_in(self, data: bytes) -> bool:
        return data.find(b"data: [DONE]") >= 0  # not ``in``: see sse.py

    def feed(self, events: list[bytes], parts: list[bytes]) -> Fault | None:
        """Relay ``events`` (to ``parts``) and add them to the assembler; a fault ends the stream."""
        fast = self._fast
        if fast is None or self._typed is None:
            return self._feed(events, parts)
        i, n = 0, len(events)
        while True:
            i, done = fast(events, i, parts)
            if done:
                self.done = True
            if i == n:
                return None
            # An event the C reader does not take: the Python way, which may end the typed
            # reading for the rest of the stream (then the C one too: it reads a subset).
            fault = self._feed(events[i : i + 1], parts)
            i += 1
            if fault is not None or i == n:
                return fault
            if self._typed is None:
                return self._feed(events[i:], parts)

    def _feed(self, events: list[bytes], parts: list[bytes]) -> Fault | None:
        """``feed`` in Python: the definition the C reader is held to."""
        call = self._x.call
        strip = call.injected.any
        adapter = self._adapter
        injected = call.injected
        add = self.asm.add
        loads, small = answer_json.loads, answer_json.MIN_RAW_BYTES
        # answer_json.loads and encode_event, inline for a token's event: a Python call
        # costs about what orjson takes for the event itself.
        oloads, dumps, default = orjson.loads, orjson.dumps, raw_ids.default
        typed, unset, add_typed = self._typed, openai_chunks.UNSET, self.asm.add_typed
        strip_typed, encode = openai_chunks.strip, openai_chunks.encode
        for ev in events:
            if ev[:6] == b"data: " and LF not in ev:
                payload: bytes | None = ev[6:]  # the usual one-line event, inline
            else:
                payload = event_data(ev)
            if payload is None:
                parts.append(ev + b"\n\n")
            elif payload[:1] != b"{" and payload.strip() == b"[DONE]":
                self.done = True  # released after the step is registered (and durable, if strict)
            else:
                if typed is not None and len(payload) < small:
                    try:
                        chunk = typed(payload)
                    except openai_chunks.NOT_TYPED:
                        # The general way, for this event and (as the upstream's events
                        # are all alike) the rest of the stream.
                        chunk = self._typed = typed = None
                    if chunk is not None and chunk.error is unset:
                        try:
                            add_typed(chunk)
                        except MALFORMED as exc:
                            return self._malformed(exc)
                        if strip:
                            strip_typed(chunk, injected.token_ids)
                            parts.append(b"data: " + encode(chunk) + b"\n\n")
                        else:
                            parts.append(ev + b"\n\n")
                        continue
                try:
                    obj = oloads(payload) if len(payload) < small else loads(payload)
                except orjson.JSONDecodeError:
                    # Not an event of this protocol: the agent gets the protocol's error
                    # event (not garbage and [DONE]), and the step its error.
                    msg = f"upstream {self._url} sent an event that is not JSON: {payload[:80]!r}"
                    return Fault(502, "upstream_invalid", msg)
                try:
                    add(obj)
                    if strip and obj.__class__ is dict:
                        adapter.strip(obj, injected)
                        parts.append(b"data: " + dumps(obj, default=default) + b"\n\n")
                    else:
                        parts.append(ev + b"\n\n")
                except MALFORMED as exc:
                    return self._malformed(exc)
        return None

    def _malformed(self, exc: Exception) -> Fault:
        return Fault(502, "upstream_invalid", f"upstream {self._url} sent a malformed event: {exc}")

    def partial(self) -> Any:
        return self.asm.result()

    def end_fault(self) -> Fault | None:
        asm = self.asm
        if asm.error is not None:
            return None
        if self.done and not asm.chunks:  # [DONE] after nothing of the protocol's
            msg = f"upstream {self._url} sent [DONE] without any chat event before it"
            return Fault(502, "upstream_invalid", msg)
        if not self.done:
            msg = f"upstream {self._url} ended the stream before [DONE]"
            return Fault(502, "upstream_disconnected", msg)
        return None

    def close(self, partial: Any) -> Answer:
        x = self._x
        replies = self._adapter.replies(partial) if x.threads else None
        call = x.call
        return Answer(DONE, "", replies, lambda: ok_steps(call, partial, replies))

    def fault_event(self, fault: Fault, from_upstream: bool) -> bytes:
        if from_upstream:  # the upstream's error event went to the agent as it came
            return b""
        return self.error_event(fault.status, fault.message, "upstream_error")

    def error_event(self, status: int, message: str, kind: str) -> bytes:
        return encode_event({"error": {"message": message, "type": kind, "code": status}})
