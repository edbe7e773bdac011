"""`/v1/chat/completions` and `/v1/completions`: vLLM-shaped answers, unary or streamed."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from agentworld.serve import protocol as P
from agentworld.serve.chat import parse_assistant_text
from agentworld.serve.engine import Finished, PromptToken, TokenEvent
from agentworld.serve.generation import (
    Choice,
    Generation,
    StreamText,
    final_text,
    watch_disconnect,
)
from agentworld.serve.http_io import (
    ENGINE_KEY,
    MODEL_NAME_KEY,
    POLICY_HEADER,
    json_response,
    read_body,
)
from agentworld.serve.unsupported import warn_ignored

# Text a streamed chat holds back until it can tell whether a tool call or reasoning opens.
_MARKERS = ("<tool_call>", "<think>")


def _sse(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


async def chat(request: web.Request) -> web.StreamResponse:
    """OpenAI chat completions over the engine's chat template."""
    engine, name = request.app[ENGINE_KEY], request.app[MODEL_NAME_KEY]
    tokenizer = engine.tokenizer
    body = await read_body(request)
    g = P.parse_common(body, name, chat=True)
    prompt, parse_tools = P.chat_prompt(body, tokenizer)
    warn_ignored(request.app, body)
    gen = Generation(engine, [prompt], g, "messages")
    if g.stream:
        return await _stream(request, gen, g, chat=True, parse_tools=parse_tools)
    await _collect(request, gen)
    choices = []
    for c in gen.choices:
        parsed = parse_assistant_text(final_text(tokenizer, c), parse_tools)
        message = {
            "role": "assistant",
            "content": parsed.content,
            "refusal": None,
            "annotations": None,
            "audio": None,
            "function_call": None,
            "reasoning": parsed.reasoning,
            # Older vLLM (and many clients) read this name for the same text.
            "reasoning_content": parsed.reasoning,
        }
        if parsed.tool_calls:
            # Absent when there are none, as OpenAI and vLLM (#44104): an SDK loop
            # `while message.tool_calls is not None` indexed an empty list.
            message["tool_calls"] = parsed.tool_calls
        assert c.finished is not None
        choices.append(
            {
                "index": c.index,
                "message": message,
                "logprobs": P.chat_logprobs(tokenizer, c.events, g.tokens_as_ids)
                if g.logprobs
                else None,
                "finish_reason": "tool_calls" if parsed.tool_calls else c.finished.reason,
                "stop_reason": c.finished.stop_reason,
                "token_ids": c.output_ids if g.return_token_ids else None,
            }
        )
    body_out = {
        "id": P.new_id("chatcmpl"),
        "object": "chat.completion",
        "created": P.now(),
        "model": name,
        "choices": choices,
        "service_tier": None,
        "system_fingerprint": None,
        "usage": P.usage(len(prompt), sum(len(c.events) for c in gen.choices)),
        "prompt_logprobs": None,
        "prompt_token_ids": prompt if g.return_token_ids else None,
        "kv_transfer_params": None,
    }
    return json_response(body_out, version=gen.policy_version)


async def completions(request: web.Request) -> web.StreamResponse:
    """OpenAI (legacy) completions: prompts as text or token ids."""
    engine, name = request.app[ENGINE_KEY], request.app[MODEL_NAME_KEY]
    tokenizer = engine.tokenizer
    body = await read_body(request)
    g = P.parse_common(body, name, chat=False)
    if body.get("suffix") is not None:
        # A 400 as vLLM's, so a fill-in-the-middle client falls back to prefix-only rather
        # than take a plain continuation for an infill.
        raise P.ApiError("'suffix' is not supported (nor by vLLM)", "suffix")
    prompts = P.parse_prompts(body, tokenizer)
    warn_ignored(request.app, body)
    gen = Generation(engine, prompts, g)
    if g.echo:
        texts = P.echo_texts(body, prompts, tokenizer)
        for c in gen.choices:
            c.echo_text = texts[c.index // g.n]
    if g.stream:
        return await _stream(request, gen, g, chat=False, parse_tools=False)
    await _collect(request, gen)
    choices = []
    for c in gen.choices:
        assert c.finished is not None
        # vLLM: with echo the prompt's text and tokens come first; `max_tokens: 0` keeps
        # only them (the one token generated is dropped from the text and log-probs).
        events = [] if g.echo_only else c.events
        text = c.echo_text + ("" if g.echo_only else final_text(tokenizer, c))
        choices.append(
            {
                "index": c.index,
                "text": text,
                "logprobs": P.completion_logprobs(
                    tokenizer, events, g.tokens_as_ids, prompt=_echoed(c, g)
                )
                if g.logprobs
                else None,
                "finish_reason": c.finished.reason,
                "stop_reason": c.finished.stop_reason,
                "token_ids": c.output_ids if g.return_token_ids else None,
                "prompt_logprobs": P.prompt_logprobs(tokenizer, c.prompt_logprobs)
                if c.prompt_logprobs is not None
                else None,
                "prompt_token_ids": c.prompt_ids if g.return_token_ids else None,
            }
        )
    n_prompt = sum(len(p) for p in prompts)
    body_out = {
        "id": P.new_id("cmpl"),
        "object": "text_completion",
        "created": P.now(),
        "model": name,
        "choices": choices,
        "service_tier": None,
        "system_fingerprint": None,
        "usage": P.usage(n_prompt, sum(len(c.events) for c in gen.choices)),
        "kv_transfer_params": None,
    }
    return json_response(body_out, version=gen.policy_version)


def _echoed(
    c: Choice, g: P.GenerationRequest
) -> tuple[list[int], list[PromptToken | None], int] | None:
    """The prompt part of an echoed choice's log-probs (see ``P.completion_logprobs``)."""
    # Echo with logprobs always scores the prompt; None only if aborted before prefill.
    if not (g.echo and g.logprobs) or c.prompt_logprobs is None:
        return None
    return c.prompt_ids, c.prompt_logprobs, g.params.top_logprobs


async def _collect(request: web.Request, gen: Generation) -> None:
    """Run a unary generation to the end (cancelled if the client goes away)."""
    gen.start()
    watcher = asyncio.create_task(watch_disconnect(request, gen))
    try:
        async for _ in gen.events():
            pass
    finally:
        watcher.cancel()
        gen.cancel()
    errors = [
        c.finished.stop_reason
        for c in gen.choices
        if c.finished and c.finished.stop_reason and c.finished.reason == "abort"
    ]
    if errors:
        raise P.ApiError(str(errors[0]), None, 500)


@dataclass
class _Chunks:
    """The SSE chunks of one streamed answer: every chunk carries the same id and time."""

    tokenizer: Any
    g: P.GenerationRequest
    name: str
    chat: bool
    rid: str
    created: int

    def chunk(self, choices: list[dict[str, Any]], **extra: Any) -> bytes:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        return _sse(
            {
                "id": self.rid,
                "object": obj,
                "created": self.created,
                "model": self.name,
                "choices": choices,
            }
            | extra
        )

    def usage(self, c: Choice) -> dict[str, Any]:
        """A chunk's ``usage`` of its choice so far, when the client asked for it on every one
        (vLLM's ``continuous_usage_stats``)."""
        if not self.g.continuous_usage:
            return {}
        return {"usage": P.usage(len(c.prompt_ids), len(c.events))}

    def piece(self, c: Choice, text: str) -> dict[str, Any]:
        """One choice's next text, with the log-probs and ids of the tokens not yet sent."""
        g = self.g
        new_events = c.events[c.sent_tokens :]
        c.sent_tokens = len(c.events)
        out: dict[str, Any] = {"index": c.index}
        if self.chat:
            out["delta"] = {"content": text} if text else {}
            out["logprobs"] = (
                P.chat_logprobs(self.tokenizer, new_events, g.tokens_as_ids) if g.logprobs else None
            )
        else:
            # vLLM's echo: the first chunk carries the prompt's text (and log-probs) before
            # the answer's; offsets count the echoed text.
            echo = g.echo and c.first_chunk
            offset = 0 if echo else len(c.echo_text) + c.sent_chars
            out["text"] = c.echo_text + text if echo else text
            out["logprobs"] = (
                P.completion_logprobs(
                    self.tokenizer,
                    [] if g.echo_only else new_events,
                    g.tokens_as_ids,
                    offset,
                    prompt=_echoed(c, g) if echo else None,
                )
                if g.logprobs
                else None
            )
        out["finish_reason"] = None
        out["stop_reason"] = None
        if g.return_token_ids:
            if not self.chat and c.first_chunk:
                out["prompt_token_ids"] = c.prompt_ids
            out["token_ids"] = [ev.token_id for ev in new_events]
        c.first_chunk = False
        return out

    def finish(self, c: Choice, ev: Finished, parse_tools: bool) -> bytes:
        """A choice's last chunk: the text held back, and (chat) its parsed tool calls and
        reasoning."""
        text = final_text(self.tokenizer, c)
        if self.chat:
            parsed = parse_assistant_text(text, parse_tools)
            sent = text[: c.sent_chars]
            rest = (parsed.content or "")[len(sent) :]
            last = self.piece(c, rest)
            if parsed.reasoning is not None:
                last["delta"]["reasoning"] = parsed.reasoning
                last["delta"]["reasoning_content"] = parsed.reasoning
            if parsed.tool_calls:
                last["delta"]["tool_calls"] = [
                    {"index": k, **call} for k, call in enumerate(parsed.tool_calls)
                ]
            last["finish_reason"] = "tool_calls" if parsed.tool_calls else ev.reason
        else:
            last = self.piece(c, "" if self.g.echo_only else text[c.sent_chars :])
            last["finish_reason"] = ev.reason
        last["stop_reason"] = ev.stop_reason
        return self.chunk([last], **self.usage(c))


async def _stream(
    request: web.Request,
    gen: Generation,
    g: P.GenerationRequest,
    *,
    chat: bool,
    parse_tools: bool,
) -> web.StreamResponse:
    tokenizer = request.app[ENGINE_KEY].tokenizer
    out = _Chunks(
        tokenizer,
        g,
        request.app[MODEL_NAME_KEY],
        chat,
        P.new_id("chatcmpl" if chat else "cmpl"),
        P.now(),
    )
    holds = tuple(g.params.stop) + (_MARKERS if chat else ())
    texts = [StreamText(tokenizer, holds) for _ in gen.choices]
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    resp.headers["Cache-Control"] = "no-cache"

    gen.start()
    watcher = asyncio.create_task(watch_disconnect(request, gen))
    prepared = False
    try:
        async for c, ev in gen.events():
            if not prepared:
                resp.headers[POLICY_HEADER] = str(gen.policy_version)
                await resp.prepare(request)
                prepared = True
                if chat:
                    # vLLM opens each choice with the role, and (chat only) puts the prompt
                    # ids on the first chunk's top level.
                    extra = {"prompt_token_ids": c.prompt_ids} if g.return_token_ids else {}
                    first = [
                        {
                            "index": x.index,
                            "delta": {"role": "assistant", "content": ""},
                            "logprobs": None,
                            "finish_reason": None,
                        }
                        for x in gen.choices
                    ]
                    await resp.write(out.chunk(first, **extra, **out.usage(c)))
            if isinstance(ev, TokenEvent):
                if g.echo_only:
                    continue  # the one token generated is not part of the answer
                text = texts[c.index].add(ev.token_id)
                if text:
                    part = out.piece(c, text)
                    c.sent_chars += len(text)
                    await resp.write(out.chunk([part], **out.usage(c)))
            elif isinstance(ev, Finished):
                if ev.reason == "abort":
                    if ev.stop_reason:  # an engine error, not a disconnect
                        err = P.ApiError(str(ev.stop_reason), None, 500)
                        await resp.write(_sse(err.body()))
                    continue
                await resp.write(out.finish(c, ev, parse_tools))
        if g.include_usage:
            n_prompt = sum(len(c.prompt_ids) for c in gen.choices) // max(g.n, 1)
            n_out = sum(len(c.events) for c in gen.choices)
            await resp.write(out.chunk([], usage=P.usage(n_prompt, n_out)))
        await resp.write(b"data: [DONE]\n\n")
    except ConnectionResetError:
        # The client hung up mid-stream (its own choice, every day): generation stops,
        # and the handler ends quietly, not as an aiohttp "Error handling request".
        gen.cancel()
        return resp
    except asyncio.CancelledError:
        gen.cancel()
        raise
    finally:
        watcher.cancel()
        gen.cancel()
    with contextlib.suppress(ConnectionResetError):
        await resp.write_eof()
    return resp
