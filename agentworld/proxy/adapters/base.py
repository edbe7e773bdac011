"""The one interface of a wire format's adapter, and what the pipeline hands it.

The pipeline (``proxy/pipeline/``) owns a call: reading and threading it, the
upstream request and its failover, faults, cancellation, the pump of a stream,
and the order of recording and answering. An adapter owns its wire format:

- the request: ``check`` it, the ``history`` a Responses chain stands for, its
  normalised ``messages``, and the ``outbound`` body (the same question as a
  chat completion when translating, or the agent's own body);
- the answer: ``answer`` turns the upstream's unary answer into the agent's
  bytes and the step records; ``relay`` makes the per-call ``Relay`` that turns
  the upstream's events into the agent's, holding the end back until the step
  is registered;
- its errors: ``refusal`` of a bad request, ``server_error`` of the proxy's own,
  ``refused`` for an upstream's error status, and the ``failed`` step of a call
  that did not complete.

OpenAI chat completions is the identity adapter: its answer and events go to
the agent as the upstream sent them, minus the token fields the proxy asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from aiohttp import web

from agentworld.proxy.bad_request import BadRequest
from agentworld.proxy.config import PROTOCOL_MODES, UpstreamConfig
from agentworld.proxy.translate.response_chains import ResponseChains
from agentworld.proxy.upstream.faults import Fault

if TYPE_CHECKING:
    from agentworld.proxy.adapters.openai import Injected
    from agentworld.proxy.recorder import Call
    from agentworld.proxy.state import State

# Where a call goes: its own protocol's upstream as is (chat and completions, and
# ``passthrough`` agents of the other protocols), or a chat upstream (``translate``).
TRANSLATE, PASSTHROUGH = PROTOCOL_MODES  # what an agent's ``protocol_mode`` may say
IDENTITY = "identity"  # chat and completions: always their own protocol's upstream


@dataclass
class Outbound:
    """What a request becomes upstream, and what its step records of it."""

    sent: dict[str, Any]  # the body sent upstream
    injected: Injected  # what the proxy added to it (removed from the agent's answer)
    path: str  # the upstream path
    stream: bool
    request_record: dict[str, Any] | None = None  # None: built from ``sent`` when recorded
    metadata: dict[str, Any] = field(default_factory=dict)
    rid: str = ""  # the protocol object id a translated answer gets


@dataclass
class Exchange:
    """One call in flight: what the agent asked, where it went, what to record."""

    st: State
    adapter: Adapter
    call: Call
    body: dict[str, Any]  # the agent's request
    mode: str
    prompt_key: bytes | None  # the thread's key of this call's prompt (automatic threading)
    chains: ResponseChains
    threads: bool  # this call continues an automatic thread: its replies are continuations
    request_record: dict[str, Any] | None = None
    history: list[Any] = field(default_factory=list)  # what a previous_response_id stands for
    rid: str = ""
    seq: int = 0  # the last Responses sequence_number seen (an error event continues it)

    @property
    def translate(self) -> bool:
        return self.mode == TRANSLATE


@dataclass
class Answer:
    """What the agent gets for a call that succeeded, and the step records of it.

    ``data``: the unary answer's body, or a stream's closing events. ``records`` is
    called when the records are needed: before the answer in strict durability,
    after it in batched (so building them never delays the agent).
    """

    data: bytes
    content_type: str
    replies: list[dict[str, Any]] | None  # what the thread continues from (None: no thread)
    records: Callable[[], list[dict[str, Any]]]


@runtime_checkable
class Relay(Protocol):
    """One streamed call's events, upstream to agent; made per call by ``Adapter.relay``."""

    done: bool  # the end event ([DONE], or the protocol's final event) has come
    error: dict[str, Any] | None  # an error event of the upstream's own, if one came

    def content_type(self, upstream: str) -> str:
        """The agent's stream's Content-Type, given the upstream's."""
        ...

    def ends_in(self, data: bytes) -> bool:
        """Whether ``data`` (a first read) holds the stream's end: then it goes out whole."""
        ...

    def feed(self, events: list[bytes], parts: list[bytes]) -> Fault | None:
        """Append to ``parts`` what the agent gets for ``events`` (complete SSE events,
        their blank line stripped); a Fault when one is not of this protocol."""
        ...

    def partial(self) -> Any:
        """What arrived, assembled (for the step of a call that ended early too)."""
        ...

    def end_fault(self) -> Fault | None:
        """After the upstream's body ended: a Fault when it ended too soon."""
        ...

    def close(self, partial: Any) -> Answer:
        """The closing events and the records of a stream that ended well (MALFORMED when
        what arrived is not an answer)."""
        ...

    def fault_event(self, fault: Fault, from_upstream: bool) -> bytes:
        """The events that end a failed stream (``from_upstream``: the upstream's own error
        event, already relayed, is why)."""
        ...

    def error_event(self, status: int, message: str, kind: str) -> bytes:
        """An error event in the protocol's shape (a step that could not be recorded)."""
        ...


@runtime_checkable
class Adapter(Protocol):
    """A wire format, as the pipeline uses it (see the module docstring)."""

    protocol: str  # the name steps record (``openai.chat``, ``anthropic.messages``...)
    path: str  # the agent's route, under any prefix
    # The header a pass-through upstream takes its key in, when not ``Authorization``.
    api_key_header: str | None

    def check(self, body: dict[str, Any]) -> None:
        """BadRequest naming the first malformed field."""
        ...

    def history(self, body: dict[str, Any], chains: ResponseChains) -> tuple[list[Any], str | None]:
        """The items before the request's own and the trajectory they belong to (Responses'
        ``previous_response_id``); BadRequest when it names an answer the proxy never gave."""
        ...

    def mode(self, up: UpstreamConfig) -> str:
        """IDENTITY, TRANSLATE or PASSTHROUGH for a call to ``up``."""
        ...

    def messages(
        self, body: dict[str, Any], history: list[Any], *, strict: bool
    ) -> list[dict[str, Any]] | None:
        """The request's messages in the record shape (None: a prompt, never threaded)."""
        ...

    def outbound(
        self,
        body: dict[str, Any],
        messages: list[dict[str, Any]] | None,
        up: UpstreamConfig,
        mode: str,
        history: list[Any],
    ) -> Outbound:
        """What goes upstream for ``body``."""
        ...

    def answer(self, x: Exchange, raw: bytes, content_type: str) -> Answer:
        """The agent's answer to the upstream's unary answer ``raw`` (its 200 body), read
        here; MALFORMED (see ``sse``) when it is not the protocol's answer."""
        ...

    def relay(self, x: Exchange, url: str) -> Relay:
        """A stream's relay for this call (``url``: the upstream, for the faults it names)."""
        ...

    def failed(
        self, x: Exchange, status: str, error: dict[str, Any], partial: Any = None
    ) -> list[dict[str, Any]]:
        """The step of a call that failed or was cancelled, with what arrived before."""
        ...

    def refused(
        self, x: Exchange, fault: Fault, raw: bytes, content_type: str, headers: dict[str, str]
    ) -> web.Response:
        """The agent's answer to the upstream's error status (``raw``: its body)."""
        ...

    def refusal(self, exc: BadRequest) -> web.Response:
        """The proxy's refusal of a bad request, in the protocol's error shape."""
        ...

    def server_error(
        self, status: int, message: str, kind: str, headers: dict[str, str]
    ) -> web.Response:
        """An error of the proxy's or the upstream's (a fault, a failed record) in the
        protocol's shape; ``kind``: its OpenAI error type."""
        ...
