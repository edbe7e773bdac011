"""One HTTP request's generation: its choices, merged engine events, and streamable text."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any

from aiohttp import web

from agentworld.serve import protocol as P
from agentworld.serve.detokenize import IncrementalDetokenizer, decode_text
from agentworld.serve.engine import (
    Admitted,
    Engine,
    Finished,
    PromptScored,
    PromptToken,
    Request,
    TokenEvent,
)


@dataclass
class Choice:
    """One sequence being generated: its engine request and what was streamed so far."""

    index: int
    prompt_ids: list[int]
    request: Request
    events: list[TokenEvent] = field(default_factory=list)
    finished: Finished | None = None
    prompt_logprobs: list[PromptToken | None] | None = None  # when the request asked
    echo_text: str = ""  # what `echo` puts before the answer's text
    sent_chars: int = 0
    sent_tokens: int = 0
    first_chunk: bool = True

    @property
    def output_ids(self) -> list[int]:
        return [ev.token_id for ev in self.events]


class Generation:
    """All choices of one HTTP request (prompts x n), read as one merged event stream."""

    def __init__(
        self,
        engine: Engine,
        prompts: list[list[int]],
        g: P.GenerationRequest,
        prompt_param: str = "prompt",
    ) -> None:
        loop = asyncio.get_running_loop()
        self.engine = engine
        self.queue: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()
        self.choices: list[Choice] = []
        self.policy_version: int | None = None
        for prompt in prompts:
            # vLLM's checks, in its words (clients and the proxy read them).
            window = engine.max_model_len
            room = window - len(prompt)
            if room < 1:
                raise P.ApiError(
                    f"This model's maximum context length is {window} tokens. However, your "
                    f"request has {len(prompt)} input tokens. Please reduce the length of the "
                    "input messages.",
                    prompt_param,
                )
            max_tokens = g.params.max_tokens or room
            if max_tokens > room:
                raise P.ApiError(
                    f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This "
                    f"model's maximum context length is {window} tokens and your request has "
                    f"{len(prompt)} input tokens ({max_tokens} > {window} - {len(prompt)}).",
                    "max_tokens",
                )
            for j in range(g.n):
                seed = None if g.params.seed is None else g.params.seed + j
                params = replace(g.params, max_tokens=max_tokens, seed=seed)
                idx = len(self.choices)

                def sink(ev: Any, idx: int = idx) -> None:
                    loop.call_soon_threadsafe(self.queue.put_nowait, (idx, ev))

                self.choices.append(Choice(idx, prompt, Request(prompt, params, sink)))

    def start(self) -> None:
        for c in self.choices:
            self.engine.submit(c.request)

    def cancel(self) -> None:
        for c in self.choices:
            c.request.cancel()

    async def events(self) -> AsyncIterator[tuple[Choice, Any]]:
        pending = len(self.choices)
        while pending:
            idx, ev = await self.queue.get()
            choice = self.choices[idx]
            if isinstance(ev, Admitted):
                if self.policy_version is None:
                    self.policy_version = ev.policy_version
            elif isinstance(ev, PromptScored):
                choice.prompt_logprobs = ev.positions
            elif isinstance(ev, TokenEvent):
                choice.events.append(ev)
            elif isinstance(ev, Finished):
                choice.finished = ev
                pending -= 1
            yield choice, ev


def final_text(tokenizer: Any, c: Choice) -> str:
    text = decode_text(tokenizer, c.output_ids)
    stop = c.finished.stop_reason if c.finished else None
    if isinstance(stop, str) and stop in text:
        text = text[: text.find(stop)]
    return text


def safe_len(text: str, holds: tuple[str, ...]) -> int:
    """How much of `text` can be streamed: never a stop string or a tool/think marker, nor
    a suffix that may grow into one, nor a half-decoded UTF-8 character."""
    cut = len(text)
    for h in holds:
        k = text.find(h)
        if k >= 0:
            cut = min(cut, k)
    for h in holds:
        for n in range(min(len(h) - 1, cut), 0, -1):
            if text[:cut].endswith(h[:n]):
                cut -= n
                break
    while cut and text[cut - 1] == "\ufffd":
        cut -= 1
    return cut


class StreamText:
    """What of one choice's text can be streamed as its tokens arrive (see `safe_len`).

    Decoded incrementally and scanned only past what was sent (less a hold's length), so
    each token costs about the same however long the answer grows.
    """

    def __init__(self, tokenizer: Any, holds: tuple[str, ...]) -> None:
        self._detok = IncrementalDetokenizer(tokenizer)
        self._holds = holds
        self._keep = max((len(h) for h in holds), default=0)
        self._sent_tail = ""  # the last `_keep` characters sent: a hold may begin there
        self._unsent = ""
        # A whole hold is in the text: the engine stops at a stop string, and a marker
        # holds the rest for the last chunk, so nothing more streams.
        self._blocked = False

    def add(self, token_id: int) -> str:
        """The text that may be sent now that ``token_id`` arrived ('' for none)."""
        if self._blocked:
            return ""
        new = self._detok.add(token_id)
        if not new:
            return ""
        self._unsent += new
        window = self._sent_tail + self._unsent
        self._blocked = any(h in window for h in self._holds)
        safe = safe_len(window, self._holds) - len(self._sent_tail)
        if safe <= 0:
            return ""
        out, self._unsent = self._unsent[:safe], self._unsent[safe:]
        self._sent_tail = (self._sent_tail + out)[-self._keep :] if self._keep else ""
        return out


async def watch_disconnect(request: web.Request, gen: Generation) -> None:
    # aiohttp does not cancel handlers on disconnect; poll so a gone client stops decoding.
    while True:
        await asyncio.sleep(0.1)
        transport = request.transport
        if transport is None or transport.is_closing():
            gen.cancel()
            return
