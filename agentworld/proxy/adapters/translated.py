"""One interface over Anthropic Messages and OpenAI Responses, so ``bridge`` forwards both alike.

Each adapter answers: is the request well formed, what are its normalised
messages, what chat-completions body asks the same, how a chat answer (or its
stream) reads in the protocol, how the protocol's own answer reads as a
record, and how errors look. Responses adds the ``previous_response_id`` chains.
"""

from __future__ import annotations

from typing import Any

import orjson

from agentworld.proxy.translate import anthropic as am
from agentworld.proxy.translate import responses as rs
from agentworld.proxy.translate.anthropic_stream import AnthropicAssembler, ChatToAnthropic
from agentworld.proxy.translate.chat_form import short_id, sse
from agentworld.proxy.translate.response_chains import ResponseChains, Stored
from agentworld.proxy.translate.responses_stream import ChatToResponses, ResponsesAssembler

PASSTHROUGH, TRANSLATE = "passthrough", "translate"
MODES = (PASSTHROUGH, TRANSLATE)


class _Adapter:
    """What both adapters take from their protocol's module as it is."""

    def __init__(self, module: Any) -> None:
        self._module = module
        self.protocol: str = module.PROTOCOL
        self.path: str = module.PATH

    def check(self, body: dict[str, Any]) -> None:
        self._module.check(body)

    def record_tools(self, body: dict[str, Any]) -> list[dict[str, Any]] | None:
        """A pass-through step's tools (a translated step records those the chat model got)."""
        return self._module.record_tools(body)

    def left_out(self, body: dict[str, Any]) -> list[str]:
        """Tools translation leaves out (the upstream's own to run)."""
        return self._module.left_out(body)

    def params(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._module.params(body)

    def response_record(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self._module.response_record(obj)


class MessagesAdapter(_Adapter):
    """Anthropic ``POST /v1/messages``."""

    final_events = frozenset({"message_stop"})
    call_prefix = "toolu"  # an id for a tool call that came without one

    def error_body(
        self, status: int, message: str, param: str | None = None, code: str | None = None
    ) -> bytes:
        return orjson.dumps(am.error_body(status, message))

    def overflow(self, prompt: int, window: int) -> tuple[str, str | None]:
        """(message, code) telling the agent its prompt is over the context window."""
        return am.overflow_message(prompt, window), None

    def error_event(self, status: int, message: str, seq: int) -> bytes:
        return sse("error", am.error_body(status, message))

    def history(self, body: dict[str, Any], chains: ResponseChains) -> tuple[list[Any], str | None]:
        """Items before the request's own, and the trajectory they belong to (none here)."""
        return [], None

    def messages(
        self, body: dict[str, Any], history: list[Any], *, strict: bool
    ) -> list[dict[str, Any]]:
        return am.messages(body)

    def new_id(self) -> str:
        return short_id("msg")

    def to_chat(
        self,
        body: dict[str, Any],
        messages: list[dict[str, Any]],
        *,
        engine: str,
        model: str | None,
        history: list[Any] = (),
    ) -> dict[str, Any]:
        return am.to_chat(body, messages, engine=engine, model=model)

    def from_chat(
        self,
        chat: dict[str, Any],
        body: dict[str, Any],
        rid: str,
        tokens: dict[str, Any],
        window: bool = False,
        history: list[Any] = (),
    ) -> dict[str, Any]:
        return am.from_chat(chat, body, tokens, window)

    def translator(
        self, body: dict[str, Any], rid: str, window: bool = False, history: list[Any] = ()
    ) -> ChatToAnthropic:
        return ChatToAnthropic(body, window)

    def streamed(
        self,
        tr: Any,
        chat: dict[str, Any],
        body: dict[str, Any],
        tokens: dict[str, Any],
        counts: tuple[int, int, int],
    ) -> dict[str, Any]:
        """The protocol object a translated stream amounted to (for ``raw``)."""
        return am.from_chat(chat, body, tokens, tr.window)

    def assembler(self) -> AnthropicAssembler:
        return AnthropicAssembler()

    def remember(
        self, chains: ResponseChains, trajectory: str, body: dict[str, Any], obj: Any
    ) -> None:
        """Keep what a later request may point back to (nothing for Messages)."""


class ResponsesAdapter(_Adapter):
    """OpenAI ``POST /v1/responses``."""

    final_events = frozenset({"response.completed", "response.incomplete", "response.failed"})
    call_prefix = "call"

    def error_body(
        self, status: int, message: str, param: str | None = None, code: str | None = None
    ) -> bytes:
        return orjson.dumps(rs.error_body(status, message, param, code))

    def overflow(self, prompt: int, window: int) -> tuple[str, str | None]:
        """(message, code) telling the agent its prompt is over the context window."""
        return rs.OVERFLOW_MESSAGE, rs.OVERFLOW_CODE

    def error_event(self, status: int, message: str, seq: int) -> bytes:
        return sse(
            "error", {"type": "error", **rs.stream_error(status, message), "sequence_number": seq}
        )

    def history(self, body: dict[str, Any], chains: ResponseChains) -> tuple[list[Any], str | None]:
        prev = body.get("previous_response_id")
        if not isinstance(prev, str):
            return [], None
        stored = chains.get(prev)
        return chains.history(prev), stored.trajectory if stored else None

    def messages(
        self, body: dict[str, Any], history: list[Any], *, strict: bool
    ) -> list[dict[str, Any]]:
        return rs.messages(history + rs.items(body), body.get("instructions"), strict=strict)

    def new_id(self) -> str:
        return short_id("resp")

    def to_chat(
        self,
        body: dict[str, Any],
        messages: list[dict[str, Any]],
        *,
        engine: str,
        model: str | None,
        history: list[Any] = (),
    ) -> dict[str, Any]:
        return rs.to_chat(body, messages, engine=engine, model=model, history=history)

    def from_chat(
        self,
        chat: dict[str, Any],
        body: dict[str, Any],
        rid: str,
        tokens: dict[str, Any],
        window: bool = False,  # a length stop reads max_output_tokens either way
        history: list[Any] = (),
    ) -> dict[str, Any]:
        return rs.from_chat(chat, body, rid, tokens, history)

    def translator(
        self, body: dict[str, Any], rid: str, window: bool = False, history: list[Any] = ()
    ) -> ChatToResponses:
        return ChatToResponses(body, rid, history)

    def streamed(
        self,
        tr: Any,
        chat: dict[str, Any],
        body: dict[str, Any],
        tokens: dict[str, Any],
        counts: tuple[int, int, int],
    ) -> dict[str, Any]:
        return tr.final(*counts)  # the items as streamed, with the ids the agent saw

    def assembler(self) -> ResponsesAssembler:
        return ResponsesAssembler()

    def remember(
        self, chains: ResponseChains, trajectory: str, body: dict[str, Any], obj: Any
    ) -> None:
        if not isinstance(obj, dict) or not isinstance(obj.get("id"), str):
            return
        if body.get("store") is False:  # as OpenAI: nothing to chain to (Codex sends it so)
            return
        output = [o for o in obj.get("output") or () if isinstance(o, dict)]
        prev = body.get("previous_response_id")
        chains.put(
            obj["id"],
            Stored(trajectory, prev if isinstance(prev, str) else None, rs.items(body), output),
        )


MESSAGES = MessagesAdapter(am)
RESPONSES = ResponsesAdapter(rs)
ProtocolAdapter = MessagesAdapter | ResponsesAdapter
