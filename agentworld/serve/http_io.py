"""What every route of `aw serve` shares: the app's typed state, JSON bodies in and out."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from agentworld.serve import protocol as P
from agentworld.serve.engine import Engine

POLICY_HEADER = "X-AW-Policy-Version"

ENGINE_KEY = web.AppKey("engine", Engine)
MODEL_NAME_KEY = web.AppKey("model_name", str)  # the name served (and its alias)
MAX_BODY_KEY = web.AppKey("max_body_bytes", int)


def json_response(body: Any, status: int = 200, version: int | None = None) -> web.Response:
    """``body`` as JSON; ``version`` (the policy that produced it) in the policy header."""
    resp = web.Response(body=orjson.dumps(body), status=status, content_type="application/json")
    if version is not None:
        resp.headers[POLICY_HEADER] = str(version)
    return resp


async def read_body(request: web.Request) -> dict[str, Any]:
    """The request's JSON object, or an ApiError saying why it is not one."""
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge as e:
        limit = request.app[MAX_BODY_KEY]
        raise P.ApiError(f"request body exceeds {limit} bytes", None, 413) from e
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise P.ApiError(f"body is not valid JSON: {e}", "body") from e
    if not isinstance(body, dict):
        raise P.ApiError("body must be a JSON object", "body")
    return body
