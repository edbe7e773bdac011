"""``GET /v1/models`` and ``/v1/models/{id}`` in Anthropic's shape, for Anthropic clients of a
chat upstream.

Claude Code discovers a gateway's models with ``GET {base}/v1/models`` and reads
only Anthropic's Models API shape (``type``, ``display_name``, ``created_at``
per model; ``has_more``, ``first_id``, ``last_id`` per page); a chat upstream
(vLLM, ``aw serve``) lists its models in OpenAI's. A request that carries
``anthropic-version`` for an agent in translate mode gets the upstream's list in
Anthropic's shape, paged as Anthropic pages it (``limit``, ``after_id``,
``before_id``), and errors in Anthropic's shape. Everyone else gets the
upstream's own answer (``passthrough``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from agentworld.proxy.config import UpstreamConfig
from agentworld.proxy.translate import anthropic as am
from agentworld.proxy.upstream.faults import classify
from agentworld.proxy.upstream.headers import upstream_headers

DEFAULT_LIMIT = 20  # Anthropic's page size when the client names none
MAX_LIMIT = 1000


def model_info(model: dict[str, Any]) -> dict[str, Any]:
    """One OpenAI-shaped model entry (vLLM's included) as Anthropic's ``ModelInfo``."""
    created = model.get("created")
    try:
        when = datetime.fromtimestamp(created if isinstance(created, int) else 0, UTC)
    except (OverflowError, OSError, ValueError):  # out of range: "unknown", as Anthropic says it
        when = datetime.fromtimestamp(0, UTC)
    info: dict[str, Any] = {
        "type": "model",
        "id": model["id"],
        "display_name": model["id"],
        "created_at": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    if isinstance(model.get("max_model_len"), int):  # vLLM's context length
        info["max_input_tokens"] = model["max_model_len"]
    return info


def page(models: list[dict[str, Any]], query: Any) -> dict[str, Any]:
    """One page of Anthropic's list (``ValueError`` names a bad query parameter)."""
    raw = query.get("limit")
    try:
        limit = DEFAULT_LIMIT if raw is None else int(raw)
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit: must be an integer from 1 to {MAX_LIMIT}, got {raw!r}")
    ids = [m["id"] for m in models]
    after, before = query.get("after_id"), query.get("before_id")
    for name, cursor in (("after_id", after), ("before_id", before)):
        if cursor is not None and cursor not in ids:
            raise ValueError(f"{name}: no model {cursor!r}")
    if before is not None:
        end = ids.index(before)
        chosen = models[max(0, end - limit) : end]
        more = end - limit > 0
    else:
        start = ids.index(after) + 1 if after is not None else 0
        chosen = models[start : start + limit]
        more = start + limit < len(models)
    return {
        "data": chosen,
        "has_more": more,
        "first_id": chosen[0]["id"] if chosen else None,
        "last_id": chosen[-1]["id"] if chosen else None,
    }


def error(status: int, message: str) -> web.Response:
    return web.Response(
        status=status,
        body=orjson.dumps(am.error_body(status, message)),
        content_type="application/json",
    )


async def upstream_models(
    request: web.Request,
    session: aiohttp.ClientSession,
    up: UpstreamConfig,
    base: str,
    api_key: str | None,
    *,
    forward_client_auth: bool,
) -> list[dict[str, Any]] | web.Response:
    """The upstream's models as ``ModelInfo`` entries, or the error response to give."""
    headers = upstream_headers(request.headers, api_key, forward_client_auth=forward_client_auth)
    url = base + "/v1/models"
    try:
        async with session.get(
            url,
            headers=headers,
            timeout=aiohttp.ClientTimeout(
                total=None, sock_connect=up.connect_timeout_s, sock_read=up.timeout_s
            ),
        ) as resp:
            raw = await resp.read()
            status = resp.status
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        fault = classify(exc, url)
        return error(fault.status, fault.message)
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        body = None
    if status != 200:
        err = body.get("error") if isinstance(body, dict) else None
        message = err.get("message") if isinstance(err, dict) else None
        return error(status, str(message or raw[:500].decode("utf-8", "replace")))
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return error(502, f"upstream {url} answered a list of models without 'data'")
    return [model_info(m) for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]


def listing(models: list[dict[str, Any]], request: web.Request) -> web.Response:
    try:
        body = page(models, request.query)
    except ValueError as exc:
        return error(400, str(exc))
    return web.Response(body=orjson.dumps(body), content_type="application/json")


def one(models: list[dict[str, Any]], model_id: str, up: UpstreamConfig | None) -> web.Response:
    """``GET /v1/models/{model_id}``. An agent with a configured ``model`` sends that in place
    of whatever the client names, so every id is served; otherwise only the upstream's."""
    for m in models:
        if m["id"] == model_id:
            return web.Response(body=orjson.dumps(m), content_type="application/json")
    if up is not None and up.model is not None:
        return web.Response(
            body=orjson.dumps(model_info({"id": model_id})), content_type="application/json"
        )
    return error(404, f"model: {model_id}")
