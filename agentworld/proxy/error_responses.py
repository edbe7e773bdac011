"""The proxy's own error answers in OpenAI's shape, and its refusals of bad requests.

Errors of a route whose protocol has a shape of its own (Anthropic Messages,
OpenAI Responses) come from that protocol's adapter; ``refusal_for`` picks by
path for a refusal made before any route's handler ran.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from agentworld.proxy.bad_request import BadRequest
from agentworld.proxy.translate.anthropic import error_body as anthropic_error_body


def refusal_headers(status: int) -> dict[str, str] | None:
    """The headers of the proxy's own refusal of a request (a BadRequest) with ``status``.

    The OpenAI and Anthropic SDKs retry a 409 (and 408, 429, 5xx) unless the answer
    says not to; a 404 or 409 of the proxy's (an unknown or ended trajectory, an id or
    step index already taken) would come back the same, so it says not to.
    """
    return {"x-should-retry": "false"} if status in (404, 409) else None


def error_response(
    status: int,
    message: str,
    type_: str,
    param: str | None = None,
    code: Any = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    """An error in OpenAI's shape: {"error": {"message", "type", "param", "code"}}."""
    body = {"error": {"message": message, "type": type_, "param": param, "code": code}}
    return web.Response(
        status=status, body=orjson.dumps(body), content_type="application/json", headers=headers
    )


def bad_request(exc: BadRequest) -> web.Response:
    """A refusal in OpenAI's shape (``not_found_error`` for a 404)."""
    kind = "invalid_request_error" if exc.status != 404 else "not_found_error"
    return error_response(
        exc.status, exc.message, kind, exc.param, headers=refusal_headers(exc.status)
    )


def refusal_for(path: str, exc: BadRequest) -> web.Response:
    """``bad_request`` in the protocol's shape of the route ``path`` names (Anthropic's for
    its Messages routes): for a refusal made before any route's handler ran."""
    if "/v1/messages" not in path:
        return bad_request(exc)
    return web.Response(
        status=exc.status,
        body=orjson.dumps(anthropic_error_body(exc.status, exc.message)),
        content_type="application/json",
        headers=refusal_headers(exc.status),
    )
