"""The HTTP face of the embedded engine: vLLM-shaped OpenAI routes plus a weight-reload admin route.

aiohttp's own style: module-level handlers, state under typed ``web.AppKey``s
(``http_io``), and one ``make_app`` that wires them. The generating routes live in
``generate_routes``; the model's cards, tokenizer and policy routes here.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from aiohttp import web

from agentworld.errors import AgentWorldError
from agentworld.serve import protocol as P
from agentworld.serve.engine import Engine
from agentworld.serve.generate_routes import chat, completions
from agentworld.serve.http_io import (
    ENGINE_KEY,
    MAX_BODY_KEY,
    MODEL_NAME_KEY,
    POLICY_HEADER,
    json_response,
    read_body,
)
from agentworld.serve.unsupported import WARNED_KEY
from agentworld.server_url import not_found_message


def make_app(
    engine: Engine, *, max_body_bytes: int = 8 * 1024 * 1024, model_name: str | None = None
) -> web.Application:
    """The aiohttp application serving `engine` (shared by `aw serve` and tests)."""
    app = web.Application(client_max_size=max_body_bytes, middlewares=[_errors])
    app[ENGINE_KEY] = engine
    app[MODEL_NAME_KEY] = model_name or engine.model_name
    app[MAX_BODY_KEY] = max_body_bytes
    app[WARNED_KEY] = set()
    app.on_response_prepare.append(_stamp_policy)
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_post("/detokenize", detokenize)
    app.router.add_post("/aw/reload", reload)
    app.router.add_get("/aw/version", version)
    return app


async def _stamp_policy(request: web.Request, response: web.StreamResponse) -> None:
    """Every answer says which policy served it (a generation sets the one it ran on)."""
    response.headers.setdefault(POLICY_HEADER, str(request.app[ENGINE_KEY].policy_version))


@web.middleware
async def _errors(request: web.Request, handler: Any) -> web.StreamResponse:
    """Errors in vLLM's shape: the caller's as 4xx naming the field, the engine's as 500."""
    try:
        return await handler(request)
    except P.ApiError as e:
        return json_response(e.body(), e.status)
    except AgentWorldError as e:
        return json_response(P.ApiError(str(e)).body(), 400)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        reason = not_found_message(request.method, request.path) if e.status == 404 else e.reason
        return json_response(P.ApiError(reason, None, e.status).body(), e.status)


async def health(request: web.Request) -> web.Response:
    """vLLM's ``GET /health``: 200 while serving."""
    return web.Response(status=200)


async def models(request: web.Request) -> web.Response:
    """``GET /v1/models``: the served name and the default alias, one card each."""
    engine, name = request.app[ENGINE_KEY], request.app[MODEL_NAME_KEY]
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
    return json_response({"object": "list", "data": cards})


async def version(request: web.Request) -> web.Response:
    """``GET /aw/version``: the policy version now served."""
    engine = request.app[ENGINE_KEY]
    return json_response(
        {"policy_version": engine.policy_version, "model": request.app[MODEL_NAME_KEY]}
    )


async def reload(request: web.Request) -> web.Response:
    """``POST /aw/reload``: load a checkpoint folder's weights (a new policy version)."""
    engine = request.app[ENGINE_KEY]
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
    return json_response({"policy_version": new}, version=new)


async def tokenize(request: web.Request) -> web.Response:
    """vLLM's ``POST /tokenize``: a chat (``messages``, ``tools``) or a ``prompt`` as the
    token ids generation would see; the proxy counts Anthropic tokens with it."""
    engine = request.app[ENGINE_KEY]
    tokenizer = engine.tokenizer
    body = await read_body(request)
    P.check_model(body, request.app[MODEL_NAME_KEY])
    strs = P.parse_flag(body, "return_token_strs", False)
    if "messages" in body:
        tokens, _ = P.chat_prompt(body, tokenizer)
    elif isinstance(body.get("prompt"), str):
        special = P.parse_flag(body, "add_special_tokens", True)
        tokens = tokenizer.encode(body["prompt"], add_special_tokens=special)
    else:
        raise P.ApiError("give 'messages' (a chat) or 'prompt' (a string)", "messages")
    return json_response(
        {
            "count": len(tokens),
            "max_model_len": engine.max_model_len,
            "tokens": tokens,
            "token_strs": tokenizer.convert_ids_to_tokens(tokens) if strs else None,
        }
    )


async def detokenize(request: web.Request) -> web.Response:
    """vLLM's ``POST /detokenize``: token ids back to text."""
    tokenizer = request.app[ENGINE_KEY].tokenizer
    body = await read_body(request)
    P.check_model(body, request.app[MODEL_NAME_KEY])
    tokens = P.parse_token_ids(body, len(tokenizer))
    return json_response({"prompt": tokenizer.decode(tokens)})
