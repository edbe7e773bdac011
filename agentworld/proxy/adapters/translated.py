"""The Anthropic Messages and OpenAI Responses adapters: translated to a chat upstream, or passed through.

Per agent, ``protocol_mode`` says where a call goes: ``translate`` (the default)
asks a chat-completions upstream (vLLM, ``aw serve``) the same question and
translates its answer and stream back, which is where exact token ids come
from; ``passthrough`` forwards to an upstream speaking the same protocol and
records its answer as it is. Either way the step holds normalised messages,
the protocol name, and the agent's own request and answer under ``raw``.

Each adapter answers: is the request well formed, what are its normalised
messages, what chat-completions body asks the same, how a chat answer (or its
stream) reads in the protocol, how the protocol's own answer reads as a
record, and how errors look. Responses adds the ``previous_response_id`` chains.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from agentworld import raw_ids
from agentworld.proxy.adapters import openai_answer
from agentworld.proxy.adapters.base import TRANSLATE, Answer, Outbound
from agentworld.proxy.adapters.openai import CHAT, Injected
from agentworld.proxy.adapters.translated_steps import failed_steps, ok_step
from agentworld.proxy.adapters.translated_stream import PassthroughRelay, TranslatedRelay
from agentworld.proxy.bad_request import BadRequest
from agentworld.proxy.config import UpstreamConfig
from agentworld.proxy.error_responses import refusal_headers
from agentworld.proxy.translate import anthropic as am
from agentworld.proxy.translate import context_window
from agentworld.proxy.translate import responses as rs
from agentworld.proxy.translate import responses_answer as ra
from agentworld.proxy.translate.anthropic_stream import AnthropicAssembler, ChatToAnthropic
from agentworld.proxy.translate.chat_form import short_id, sse
from agentworld.proxy.translate.response_chains import ResponseChains, Stored
from agentworld.proxy.translate.responses_stream import ChatToResponses, ResponsesAssembler
from agentworld.proxy.upstream import answer_json
from agentworld.proxy.upstream.faults import Fault

if TYPE_CHECKING:
    from agentworld.proxy.adapters.base import Exchange


class TranslatedAdapter(ABC):
    """What both adapters share: what they take from their protocol's module as it is, and
    the pipeline's interface (``adapters.base.Adapter``) in either mode."""

    api_key_header: str | None = None
    call_prefix: str
    final_events: frozenset[str]

    def __init__(self, module: Any) -> None:
        self._module = module
        self.protocol: str = module.PROTOCOL
        self.path: str = module.PATH

    def mode(self, up: UpstreamConfig) -> str:
        return up.protocol_mode or TRANSLATE

    def outbound(
        self,
        body: dict[str, Any],
        messages: list[dict[str, Any]] | None,
        up: UpstreamConfig,
        mode: str,
        history: list[Any],
    ) -> Outbound:
        """Translated: the chat body asking the same (the tools the chat model gets are the
        step's); passed through: the agent's body, with the agent's model if one is set."""
        record: dict[str, Any] = {"messages": messages, "params": self.params(body)}
        metadata: dict[str, Any] = {"protocol_mode": mode}
        if mode == TRANSLATE:
            assert messages is not None
            chat = self.to_chat(body, messages, engine=up.engine, model=up.model, history=history)
            sent, injected = CHAT.prepare(chat, up)
            path = CHAT.path
            record["params"]["chat"] = {
                k: v for k, v in sent.items() if k not in ("model", "messages", "tools")
            }
            tools = chat.get("tools")
            if left := self.left_out(body):
                metadata["tools_left_out"] = left  # hosted/server tools a chat upstream cannot run
        else:
            sent, injected = dict(body), Injected()
            if up.model is not None:
                sent["model"] = up.model
            path = self.path
            tools = self.record_tools(body)
        if isinstance(sent.get("model"), str):
            record["model"] = sent["model"]
        if tools:
            record["tools"] = tools
        return Outbound(
            sent, injected, path, body.get("stream") is True, record, metadata, self.new_id()
        )

    def answer(self, x: Exchange, raw: bytes, content_type: str) -> Answer:
        # Translated: a chat answer, read typed (the protocol's answer is written from it).
        obj = openai_answer.parsed(raw) if x.translate else answer_json.loads_object(raw)
        rec, proto, replies = ok_step(self, x, obj)
        if x.translate:
            return Answer(raw_ids.dumps(proto), "application/json", replies, lambda: [rec])
        return Answer(raw, content_type, replies, lambda: [rec])

    def relay(self, x: Exchange, url: str) -> TranslatedRelay | PassthroughRelay:
        if x.translate:
            return TranslatedRelay(x, url, self)
        return PassthroughRelay(x, url, self)

    def failed(
        self, x: Exchange, status: str, error: dict[str, Any], partial: Any = None
    ) -> list[dict[str, Any]]:
        return failed_steps(self, x, status, error, partial)

    def refused(
        self, x: Exchange, fault: Fault, raw: bytes, content_type: str, headers: dict[str, str]
    ) -> web.Response:
        """Passed through: the upstream's error as it came. Translated: in the protocol's
        shape; a prompt over the context window in the protocol's own words for it (agents
        compact their conversation on them)."""
        if not x.translate:
            return web.Response(
                status=fault.status, body=raw, headers={"Content-Type": content_type, **headers}
            )
        message, code = fault.message, None
        over = context_window.overflow(message) if fault.status == 400 else None
        if over is not None:
            message, code = self.overflow(*over)
        return self.error_response(fault.status, message, headers=headers, code=code)

    def refusal(self, exc: BadRequest) -> web.Response:
        headers = refusal_headers(exc.status)
        return self.error_response(
            exc.status, exc.message, exc.param, headers=headers, code=exc.code
        )

    def server_error(
        self, status: int, message: str, kind: str, headers: dict[str, str]
    ) -> web.Response:
        return self.error_response(status, message, headers=headers)  # the type by the status

    def error_response(
        self,
        status: int,
        message: str,
        param: str | None = None,
        *,
        headers: dict[str, str] | None = None,
        code: str | None = None,
    ) -> web.Response:
        """An HTTP error in the protocol's own shape."""
        return web.Response(
            status=status,
            body=self.error_body(status, message, param, code),
            content_type="application/json",
            headers=headers,
        )

    @abstractmethod
    def error_body(
        self, status: int, message: str, param: str | None = None, code: str | None = None
    ) -> bytes:
        """An error body in the protocol's shape, its type by the HTTP status."""

    @abstractmethod
    def overflow(self, prompt: int, window: int) -> tuple[str, str | None]:
        """(message, code) telling the agent its prompt is over the context window."""

    @abstractmethod
    def error_event(self, status: int, message: str, seq: int) -> bytes:
        """An error event in the protocol's stream shape (``seq``: Responses' next number)."""

    @abstractmethod
    def new_id(self) -> str:
        """A fresh id for the protocol object a translated answer is."""

    @abstractmethod
    def to_chat(
        self,
        body: dict[str, Any],
        messages: list[dict[str, Any]],
        *,
        engine: str,
        model: str | None,
        history: list[Any] = (),
    ) -> dict[str, Any]:
        """The chat-completions body asking a chat upstream the same question."""

    @abstractmethod
    def from_chat(
        self,
        chat: dict[str, Any],
        body: dict[str, Any],
        rid: str,
        tokens: dict[str, Any],
        window: bool = False,
        history: list[Any] = (),
    ) -> dict[str, Any]:
        """A chat answer as the protocol's answer."""

    @abstractmethod
    def translator(
        self, body: dict[str, Any], rid: str, window: bool = False, history: list[Any] = ()
    ) -> Any:
        """The per-call translator of chat chunks into the protocol's events."""

    @abstractmethod
    def streamed(
        self,
        tr: Any,
        chat: dict[str, Any],
        body: dict[str, Any],
        tokens: dict[str, Any],
        counts: tuple[int, int, int],
    ) -> dict[str, Any]:
        """The protocol object a translated stream amounted to (for ``raw``)."""

    @abstractmethod
    def assembler(self) -> Any:
        """The assembler of the protocol's own events into its answer (pass-through)."""

    @abstractmethod
    def remember(
        self, chains: ResponseChains, trajectory: str, body: dict[str, Any], obj: Any
    ) -> None:
        """Keep what a later request may point back to (Responses chains)."""

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


class MessagesAdapter(TranslatedAdapter):
    """Anthropic ``POST /v1/messages``."""

    final_events = frozenset({"message_stop"})
    call_prefix = "toolu"  # an id for a tool call that came without one
    api_key_header = "x-api-key"  # Anthropic's API takes its key so

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


class ResponsesAdapter(TranslatedAdapter):
    """OpenAI ``POST /v1/responses``."""

    final_events = frozenset({"response.completed", "response.incomplete", "response.failed"})
    call_prefix = "call"

    def response_record(self, obj: dict[str, Any]) -> dict[str, Any]:
        return ra.response_record(obj)

    def error_body(
        self, status: int, message: str, param: str | None = None, code: str | None = None
    ) -> bytes:
        return orjson.dumps(ra.error_body(status, message, param, code))

    def overflow(self, prompt: int, window: int) -> tuple[str, str | None]:
        """(message, code) telling the agent its prompt is over the context window."""
        return ra.OVERFLOW_MESSAGE, ra.OVERFLOW_CODE

    def error_event(self, status: int, message: str, seq: int) -> bytes:
        return sse(
            "error", {"type": "error", **ra.stream_error(status, message), "sequence_number": seq}
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
        return ra.from_chat(chat, body, rid, tokens, history)

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
