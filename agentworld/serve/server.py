"""The HTTP face of the embedded engine: vLLM-shaped OpenAI routes plus a weight-reload admin route."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from agentworld.errors import AgentWorldError
from agentworld.serve import protocol as P
from agentworld.serve.chat import parse_assistant_text, render_prompt
from agentworld.serve.engine import Engine, Finished, TokenEvent
from agentworld.serve.generation import (
    Choice,
    Generation,
    final_text,
    safe_len,
    watch_disconnect,
)

POLICY_HEADER = "X-AW-Policy-Version"
ENGINE_KEY = web.AppKey("engine", Engine)
_MARKERS = ("<tool_call>", "<think>")


def _json(body: Any, status: int = 200, version: int | None = None) -> web.Response:
    resp = web.Response(body=orjson.dumps(body), status=status, content_type="application/json")
    if version is not None:
        resp.headers[POLICY_HEADER] = str(version)
    return resp


def _sse(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def make_app(
    engine: Engine, *, max_body_bytes: int = 8 * 1024 * 1024, model_name: str | None = None
) -> web.Application:
    """The aiohttp application serving `engine` (shared by `aw serve` and tests)."""
    name = model_name or engine.model_name
    app = web.Application(client_max_size=max_body_bytes)
    app[ENGINE_KEY] = engine
    tokenizer = engine.tokenizer

    async def on_prepare(request: web.Request, response: web.StreamResponse) -> None:
        response.headers.setdefault(POLICY_HEADER, str(engine.policy_version))

    app.on_response_prepare.append(on_prepare)

    async def read_body(request: web.Request) -> dict[str, Any]:
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge as e:
            raise P.ApiError(
                f"request body exceeds {max_body_bytes} bytes", None, 413, code="request_too_large"
            ) from e
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            raise P.ApiError(f"body is not valid JSON: {e}", "body") from e
        if not isinstance(body, dict):
            raise P.ApiError("body must be a JSON object", "body")
        return body

    @web.middleware
    async def errors(request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            return await handler(request)
        except P.ApiError as e:
            return _json(e.body(), e.status)
        except AgentWorldError as e:
            return _json(P.ApiError(str(e)).body(), 400)
        except web.HTTPException as e:
            if e.status < 400:
                raise
            err = P.ApiError(e.reason, None, e.status, code=None)
            return _json(err.body(), e.status)

    app.middlewares.append(errors)

    async def health(request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def models(request: web.Request) -> web.Response:
        cards = [
            {
                "id": served,
                "object": "model",
                "created": P.now(),
                "owned_by": "agentworld",
                "root": str(engine.model_dir),
                "parent": None,
                "max_model_len": engine.max_model_len,
            }
            for served in (name, P.DEFAULT_ALIAS)
        ]
        return _json({"object": "list", "data": cards})

    async def version(request: web.Request) -> web.Response:
        return _json({"policy_version": engine.policy_version, "model": name})

    async def reload(request: web.Request) -> web.Response:
        body = await read_body(request)
        path = body.get("path")
        if not isinstance(path, str) or not path:
            raise P.ApiError("'path' must be a checkpoint folder", "path")
        if not Path(path).is_dir():
            raise P.ApiError(f"'path' {path!r} is not a folder", "path")
        pv = body.get("policy_version")
        if pv is not None and (not isinstance(pv, int) or isinstance(pv, bool)):
            raise P.ApiError("'policy_version' must be an integer", "policy_version")
        loop = asyncio.get_running_loop()
        new = await loop.run_in_executor(None, engine.reload, path, pv)
        return _json({"policy_version": new}, version=new)

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await read_body(request)
        g = P.parse_common(body, name, chat=True)
        messages = P.parse_messages(body)
        tools, parse_tools = P.parse_tools(body)
        kwargs = body.get("chat_template_kwargs")
        if kwargs is not None and not isinstance(kwargs, dict):
            raise P.ApiError("'chat_template_kwargs' must be an object", "chat_template_kwargs")
        try:
            prompt = render_prompt(tokenizer, messages, tools, True, kwargs)
        except Exception as e:  # template errors are the caller's messages
            raise P.ApiError(f"cannot apply the chat template: {e}", "messages") from e
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
                "tool_calls": parsed.tool_calls,
                "reasoning": parsed.reasoning,
                # Older vLLM (and many clients) read this name for the same text.
                "reasoning_content": parsed.reasoning,
            }
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
        return _json(body_out, version=gen.policy_version)

    async def tokenize(request: web.Request) -> web.Response:
        """vLLM's ``POST /tokenize``: a chat (``messages``, ``tools``) or a ``prompt`` as the
        token ids generation would see; the proxy counts Anthropic tokens with it."""
        body = await read_body(request)
        P.check_model(body, name)
        strs = P.parse_flag(body, "return_token_strs", False)
        if "messages" in body:
            messages = P.parse_messages(body)
            tools, _ = P.parse_tools(body)
            kwargs = body.get("chat_template_kwargs") or {}
            if not isinstance(kwargs, dict):
                raise P.ApiError("'chat_template_kwargs' must be an object", "chat_template_kwargs")
            add_prompt = P.parse_flag(body, "add_generation_prompt", True)
            if P.parse_flag(body, "continue_final_message", False):
                if add_prompt:
                    raise P.ApiError(
                        "Cannot set both `continue_final_message` and `add_generation_prompt` "
                        "to True.",
                        "continue_final_message",
                    )
                kwargs = {**kwargs, "continue_final_message": True}
            try:
                tokens = render_prompt(tokenizer, messages, tools, add_prompt, kwargs)
            except Exception as e:  # template errors are the caller's messages
                raise P.ApiError(f"cannot apply the chat template: {e}", "messages") from e
            if P.parse_flag(body, "add_special_tokens", False):
                bos = tokenizer.bos_token_id
                if bos is not None and tokens[:1] != [bos]:
                    tokens = [bos, *tokens]
        elif isinstance(body.get("prompt"), str):
            special = P.parse_flag(body, "add_special_tokens", True)
            tokens = tokenizer.encode(body["prompt"], add_special_tokens=special)
        else:
            raise P.ApiError("give 'messages' (a chat) or 'prompt' (a string)", "messages")
        return _json(
            {
                "count": len(tokens),
                "max_model_len": engine.max_model_len,
                "tokens": tokens,
                "token_strs": tokenizer.convert_ids_to_tokens(tokens) if strs else None,
            }
        )

    async def detokenize(request: web.Request) -> web.Response:
        """vLLM's ``POST /detokenize``: token ids back to text."""
        body = await read_body(request)
        P.check_model(body, name)
        tokens = P.parse_token_ids(body, len(tokenizer))
        return _json({"prompt": tokenizer.decode(tokens)})

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await read_body(request)
        g = P.parse_common(body, name, chat=False)
        if body.get("echo"):
            raise P.ApiError("'echo' is not supported by the embedded engine", "echo")
        prompts = P.parse_prompts(body, tokenizer)
        gen = Generation(engine, prompts, g)
        if g.stream:
            return await _stream(request, gen, g, chat=False, parse_tools=False)
        await _collect(request, gen)
        choices = []
        for c in gen.choices:
            assert c.finished is not None
            text = final_text(tokenizer, c)
            choices.append(
                {
                    "index": c.index,
                    "text": text,
                    "logprobs": P.completion_logprobs(tokenizer, c.events, g.tokens_as_ids)
                    if g.logprobs
                    else None,
                    "finish_reason": c.finished.reason,
                    "stop_reason": c.finished.stop_reason,
                    "token_ids": c.output_ids if g.return_token_ids else None,
                    "prompt_logprobs": None,
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
        return _json(body_out, version=gen.policy_version)

    async def _collect(request: web.Request, gen: Generation) -> None:
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
            raise P.ApiError(str(errors[0]), None, 500, type_="server_error")

    async def _stream(
        request: web.Request,
        gen: Generation,
        g: P.GenerationRequest,
        *,
        chat: bool,
        parse_tools: bool,
    ) -> web.StreamResponse:
        rid = P.new_id("chatcmpl" if chat else "cmpl")
        created = P.now()
        obj = "chat.completion.chunk" if chat else "text_completion"
        holds = tuple(g.params.stop) + (_MARKERS if chat else ())
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        resp.headers["Cache-Control"] = "no-cache"

        def chunk(choices: list[dict[str, Any]], **extra: Any) -> bytes:
            return _sse(
                {"id": rid, "object": obj, "created": created, "model": name, "choices": choices}
                | extra
            )

        def piece(c: Choice, text: str, final: bool) -> dict[str, Any]:
            new_events = c.events[c.sent_tokens :]
            c.sent_tokens = len(c.events)
            out: dict[str, Any] = {"index": c.index}
            if chat:
                out["delta"] = {"content": text} if text else {}
                out["logprobs"] = (
                    P.chat_logprobs(tokenizer, new_events, g.tokens_as_ids) if g.logprobs else None
                )
            else:
                out["text"] = text
                out["logprobs"] = (
                    P.completion_logprobs(tokenizer, new_events, g.tokens_as_ids, c.sent_chars)
                    if g.logprobs
                    else None
                )
            out["finish_reason"] = None
            out["stop_reason"] = None
            if g.return_token_ids:
                if not chat and c.first_chunk:
                    out["prompt_token_ids"] = c.prompt_ids
                out["token_ids"] = [ev.token_id for ev in new_events]
            c.first_chunk = False
            return out

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
                        await resp.write(chunk(first, **extra))
                if isinstance(ev, TokenEvent):
                    text = tokenizer.decode(c.output_ids, skip_special_tokens=True)
                    safe = safe_len(text, holds)
                    if safe > c.sent_chars:
                        part = piece(c, text[c.sent_chars : safe], False)
                        c.sent_chars = safe
                        await resp.write(chunk([part]))
                elif isinstance(ev, Finished):
                    if ev.reason == "abort":
                        if ev.stop_reason:  # an engine error, not a disconnect
                            err = P.ApiError(str(ev.stop_reason), None, 500, type_="server_error")
                            await resp.write(_sse(err.body()))
                        continue
                    await resp.write(_finish_chunks(c, ev, piece, chunk, chat, parse_tools))
            if g.include_usage:
                n_prompt = sum(len(c.prompt_ids) for c in gen.choices) // max(g.n, 1)
                n_out = sum(len(c.events) for c in gen.choices)
                await resp.write(chunk([], usage=P.usage(n_prompt, n_out)))
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

    def _finish_chunks(
        c: Choice, ev: Finished, piece: Any, chunk: Any, chat: bool, parse_tools: bool
    ) -> bytes:
        text = final_text(tokenizer, c)
        out = b""
        if chat:
            parsed = parse_assistant_text(text, parse_tools)
            sent = text[: c.sent_chars]
            rest = (parsed.content or "")[len(sent) :]
            last = piece(c, rest, True)
            if parsed.reasoning is not None:
                last["delta"]["reasoning"] = parsed.reasoning
                last["delta"]["reasoning_content"] = parsed.reasoning
            if parsed.tool_calls:
                last["delta"]["tool_calls"] = [
                    {"index": k, **call} for k, call in enumerate(parsed.tool_calls)
                ]
            last["finish_reason"] = "tool_calls" if parsed.tool_calls else ev.reason
        else:
            last = piece(c, text[c.sent_chars :], True)
            last["finish_reason"] = ev.reason
        last["stop_reason"] = ev.stop_reason
        out += chunk([last])
        return out

    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_post("/detokenize", detokenize)
    app.router.add_post("/aw/reload", reload)
    app.router.add_get("/aw/version", version)
    return app
