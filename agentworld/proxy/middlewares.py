"""The proxy app's middlewares: its errors as answers, auth, the access log, aiohttp's own log.

``errors`` turns what a handler raises into an answer in the route's shape (a
``BadRequest`` into a 4xx, anything unexpected into a 500 that never follows a
response already begun); ``auth`` checks the proxy token when one is set.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import sys
import time
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from agentworld.proxy.agent_conn import answer_begun
from agentworld.proxy.agent_request import check_headers, first_line
from agentworld.proxy.bad_request import BadRequest
from agentworld.proxy.error_responses import bad_request, error_response, refusal_for
from agentworld.proxy.state import STATE
from agentworld.proxy.stats import ProxyStats
from agentworld.server_url import not_found_message

log = logging.getLogger("agentworld.proxy")
access_log = logging.getLogger("agentworld.proxy.access")


def auth_middleware(token: str, stats: ProxyStats) -> Any:
    expected = token.encode()

    @web.middleware
    async def auth(request: web.Request, handler: Any) -> web.StreamResponse:
        got = request.headers.get("Authorization", "")
        bearer = got[7:].strip() if got[:7].lower() == "bearer " else ""
        key = request.headers.get("x-api-key", "")
        if not (
            (bearer and hmac.compare_digest(bearer.encode(), expected))
            or (key and hmac.compare_digest(key.encode(), expected))
        ):
            stats.error("auth")
            return error_response(
                401,
                "missing or wrong proxy token (Authorization: Bearer ...)",
                "authentication_error",
            )
        return await handler(request)

    return auth


@web.middleware
async def errors_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    st = request.app[STATE]
    st.agent_conns.add(request.protocol)  # for an agent that stops reading
    try:
        check_headers(request.headers)
        st.known_keys.saw(request.headers)
    except BadRequest as exc:
        st.stats.error("bad_request")
        return refusal_for(request.path, exc)
    try:
        resp = await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        if exc.status == 404:
            message = not_found_message(request.method, request.path)
            return error_response(404, message, "not_found_error")
        message = f"{exc.reason}: {request.method} {request.path}"
        return error_response(exc.status, message, "invalid_request_error")
    except BadRequest as exc:
        resp = bad_request(exc)
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception:
        log.exception("internal error serving %s %s", request.method, request.path)
        st.stats.error("internal")
        if answer_begun(request) and request.transport is not None:
            # A second response on this connection would be garbage to the agent (a
            # stream's first events went out): the connection is cut instead, and the
            # error response below goes nowhere.
            request.transport.close()
        return error_response(500, "internal proxy error (see the proxy's log)", "server_error")
    if resp.status == 408 and not request.content.is_eof():  # a stalled body (read_body)
        st.stats.error("agent_timeout")
        resp.force_close()  # its rest may still come: not another request
    elif request.content.exception() is not None:  # a body that does not decode (gzip)
        resp.force_close()  # its rest cannot be read past: nor can another request
    return resp


class ServerLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """aiohttp's own log for a connection (``handler_args={"logger": ...}``): a request
    that is not HTTP (a bad request line, a header over 8 kB, a body that does not
    decode) is the client's fault, answered with a 400 by aiohttp, and logged here in
    one line; a fuzzing client made hundreds of full tracebacks at ERROR before."""

    def exception(self, msg: object, *args: object, exc_info: Any = True, **kw: Any) -> None:
        exc = exc_info if isinstance(exc_info, BaseException) else sys.exc_info()[1]
        if isinstance(exc, web.RequestPayloadError):
            # The handler has answered it (a 400, counted as bad_request); aiohttp meets
            # the same error again reading past the body.
            self.logger.debug(f"{msg}: %s", *args, first_line(exc))
        elif isinstance(exc, HttpProcessingError):
            self.logger.warning(f"{msg}: %s", *args, first_line(exc))
        else:
            self.logger.error(msg, *args, exc_info=exc_info, **kw)


@web.middleware
async def access_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    t0 = time.perf_counter()
    resp = await handler(request)
    access_log.info(
        "%s %s %d %.1fms trajectory=%s",
        request.method,
        request.path,
        resp.status,
        (time.perf_counter() - t0) * 1000,
        resp.headers.get("X-AW-Trajectory", "-"),
    )
    return resp
