"""The proxy's aiohttp application: routes, auth, identification of trajectories, and forwarding.

``make_app`` is shared by ``aw proxy``, the in-process ``ProxyServer`` and the tests.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from agentworld.proxy.agent_conn import AgentConnections, read_body
from agentworld.proxy.anthropic import error_body as anthropic_error_body
from agentworld.proxy.body_check import check_body
from agentworld.proxy.config import DEFAULT_AGENT, ProxyConfig, UpstreamConfig
from agentworld.proxy.protocols import CHAT, COMPLETIONS, Adapter, BadRequest
from agentworld.proxy.recorder import Recorder
from agentworld.proxy.redact import KnownKeys
from agentworld.proxy.stats import ProxyStats
from agentworld.proxy.trajectories import Registry, Trajectory, UnknownTrajectory
from agentworld.proxy.upstream_http import UpstreamClient

log = logging.getLogger("agentworld.proxy")
access_log = logging.getLogger("agentworld.proxy.access")

ROUTE_PREFIXES = (
    "",
    "/t/{trajectory}",
    "/t/{trajectory}/g/{group}",
    "/t/{trajectory}/a/{agent}",
    "/t/{trajectory}/g/{group}/a/{agent}",
    # No trajectory: automatic threading, within this agent and group. For agents that
    # take only a base URL (ANTHROPIC_BASE_URL=http://HOST:PORT/a/claude-code).
    "/a/{agent}",
    "/g/{group}",
    "/g/{group}/a/{agent}",
)


@dataclass
class State:
    """Everything a request handler needs, held by the app under STATE."""

    config: ProxyConfig
    pool: Any
    stats: ProxyStats
    registry: Registry
    writer: Any = None
    recorder: Recorder | None = None
    session: aiohttp.ClientSession | None = None  # pass-through routes
    upstream: UpstreamClient | None = None  # generation calls
    policy_version: int = 0
    own_writer: bool = True
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    agent_conns: AgentConnections = field(default_factory=AgentConnections)
    known_keys: KnownKeys = field(default_factory=KnownKeys)  # masked in every record

    def set_policy(self, version: int) -> None:
        self.policy_version = version


STATE: web.AppKey[State] = web.AppKey("agentworld_proxy_state", State)


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


def first_line(exc: BaseException) -> str:
    """What an exception says, in one line (aiohttp's parser errors span several, and a
    payload error's words are its cause's)."""
    text = getattr(exc, "message", None) or getattr(exc.__cause__, "message", None) or str(exc)
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def check_headers(headers: Any) -> None:
    """BadRequest naming the first header whose value is not UTF-8 (aiohttp hands such
    bytes on as lone surrogates, which nothing downstream can encode: not the upstream
    request, not a record)."""
    for name, value in headers.items():
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise BadRequest(f"header {name}: its value is not valid UTF-8", name) from None


async def read_json(request: web.Request, limit: int, timeout_s: float) -> dict[str, Any]:
    """The request body as a JSON object, or BadRequest naming the problem (413 when too
    big, 408 when it stops arriving for ``timeout_s``)."""
    if request.content_length is not None and request.content_length > limit:
        raise BadRequest(f"request body over the {limit}-byte limit", None, 413)
    try:
        raw = await read_body(request, limit, timeout_s)
    except web.HTTPRequestEntityTooLarge:
        raise BadRequest(f"request body over the {limit}-byte limit", None, 413) from None
    except web.RequestPayloadError as exc:  # a body its Content-Encoding does not decode
        raise BadRequest(f"the request body could not be read: {first_line(exc)}") from None
    if not raw:
        raise BadRequest("the request body is empty; expected a JSON object")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest(f"the request body must be a JSON object, got {type(body).__name__}")
    check_body(body, raw)
    return body


# Characters no name may hold: path separators, and what would end or escape a URL path
# segment (a trajectory, group and agent name is one: /t/<trajectory>/g/<group>/a/<agent>).
_UNSAFE = frozenset("/\\?#%") | frozenset(map(chr, range(32))) | {"\x7f"}


def check_name(value: Any, what: str, *, max_chars: int = 200) -> str | None:
    """An id-like field from a path, header, query or body (None when absent).

    ``.`` and ``..`` are refused too: in a base URL (``/t/../v1``) an SDK resolves them
    away, and the agent's calls would silently leave their trajectory.
    """
    if value is None or value == "":
        return None
    if (
        not isinstance(value, str)
        or len(value) > max_chars
        or value.strip() != value
        or value in (".", "..")
        or any(c in _UNSAFE for c in value)
    ):
        raise BadRequest(
            f"{what}: must be a string of at most {max_chars} chars, not '.' or '..', without "
            "slashes, whitespace, control characters or any of ?#%",
            what,
        )
    return value


@dataclass(frozen=True)
class Ident:
    """Who a request belongs to: path and query first, then X-AW-* headers."""

    trajectory: str | None
    group: str | None
    agent: str | None
    task: str | None
    dataset: str | None
    split: str | None


_NO_IDENT = Ident(None, None, None, None, None, None)
_IDENT_HEADERS = (
    "X-AW-Trajectory",
    "X-AW-Group",
    "X-AW-Agent",
    "X-AW-Task",
    "X-AW-Dataset",
    "X-AW-Split",
)


def identify(request: web.Request) -> Ident:
    mi, q, h = request.match_info, request.query, request.headers
    if not mi and not request.query_string and all(x not in h for x in _IDENT_HEADERS):
        return _NO_IDENT  # an agent that says nothing about itself: threading decides

    def pick(key: str, header: str) -> str | None:
        return mi.get(key) or q.get(key) or h.get(header) or None

    return Ident(
        trajectory=check_name(pick("trajectory", "X-AW-Trajectory"), "trajectory"),
        group=check_name(pick("group", "X-AW-Group"), "group"),
        agent=check_name(pick("agent", "X-AW-Agent"), "agent"),
        task=check_name(pick("task", "X-AW-Task"), "task", max_chars=1024),
        dataset=check_name(pick("dataset", "X-AW-Dataset"), "dataset"),
        split=check_name(pick("split", "X-AW-Split"), "split"),
    )


def agent_for(st: State, ident: Ident, model: Any) -> str:
    """The agent a request without a trajectory belongs to."""
    if ident.agent:
        return ident.agent
    if isinstance(model, str) and model in st.config.agents:
        return model  # LiteLLM-style routing by model name
    if st.config.default_upstream is None and len(st.config.agents) == 1:
        return next(iter(st.config.agents))
    return DEFAULT_AGENT


def upstream_of(st: State, agent: str) -> tuple[UpstreamConfig, str | None]:
    found = st.config.upstream_for(agent)
    if found is None:
        raise BadRequest(
            f"no upstream for agent {agent!r}; configured agents: {sorted(st.config.agents)}"
            + (
                " (name one with X-AW-Agent or as the model, or give the proxy --upstream"
                " or an [agents.default])"
                if agent == DEFAULT_AGENT
                else ""
            ),
            "agent",
        )
    return found


def get_trajectory(st: State, tid: str) -> Trajectory:
    try:
        return st.registry.get(tid)
    except UnknownTrajectory as exc:
        if exc.status is not None:
            raise BadRequest(
                f"trajectory {tid!r} has ended ({exc.status})", "trajectory", 409
            ) from None
        raise BadRequest(
            f"unknown trajectory {tid!r}; create one with POST /aw/trajectories",
            "trajectory",
            404,
        ) from None


# -- middlewares --------------------------------------------------------------------------


def _auth_middleware(token: str, stats: ProxyStats) -> Any:
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


def _answer_begun(request: web.Request) -> bool:
    """Whether a response to ``request`` was prepared (its head sent, or held for its body)."""
    w = request.writer
    return bool(
        w.output_size > 0 or getattr(w, "_headers_buf", None) or getattr(w, "_headers_written", 0)
    )


@web.middleware
async def _errors_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
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
        kind = "not_found_error" if exc.status == 404 else "invalid_request_error"
        return error_response(exc.status, f"{exc.reason}: {request.method} {request.path}", kind)
    except BadRequest as exc:
        resp = bad_request(exc)
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception:
        log.exception("internal error serving %s %s", request.method, request.path)
        st.stats.error("internal")
        if _answer_begun(request) and request.transport is not None:
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
async def _access_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
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


# -- app ------------------------------------------------------------------------------------


def make_app(config: ProxyConfig, pool: Any, *, writer: Any = None) -> web.Application:
    """The proxy app over an open Pool; creates (and closes) its own writer unless given one."""
    from agentworld.proxy import (
        bridge,
        count_tokens,
        forward,
        lifecycle,
        passthrough,
        running,
        write_health,
    )

    stats = ProxyStats()
    middlewares: list[Any] = [_errors_middleware]
    if config.log_requests:
        middlewares.insert(0, _access_middleware)
    if config.auth_token:
        middlewares.append(_auth_middleware(config.auth_token, stats))
    middlewares.append(write_health.refuse_while_failing)  # after auth: no probing without it
    app = web.Application(
        client_max_size=config.max_body_bytes,
        middlewares=middlewares,
        handler_args={"logger": ServerLog(logging.getLogger("aiohttp.server"), {})},
    )
    st = State(
        config=config,
        pool=pool,
        stats=stats,
        registry=Registry(max_open=config.max_open_trajectories),
        writer=writer,
        own_writer=writer is None,
        policy_version=config.policy_version,
        known_keys=KnownKeys([config.auth_token, *config.api_keys.values()]),
    )
    app[STATE] = st
    app.cleanup_ctx.append(running.running)

    def bind(adapter: Adapter) -> Any:
        async def handler(request: web.Request) -> web.StreamResponse:
            return await forward.generate(request, adapter)

        return handler

    for prefix in ROUTE_PREFIXES:
        app.router.add_post(prefix + CHAT.path, bind(CHAT))
        app.router.add_post(prefix + COMPLETIONS.path, bind(COMPLETIONS))
        bridge.add_routes(app, prefix)  # Anthropic Messages, OpenAI Responses
        count_tokens.add_routes(app, prefix)  # Anthropic's token count (not recorded)
        app.router.add_get(prefix + "/v1/models", passthrough.models)
        app.router.add_get(prefix + "/v1/models/{model_id:.+}", passthrough.model)
        app.router.add_route("*", prefix + "/v1/{tail:.*}", passthrough.passthrough)
    lifecycle.add_routes(app)
    return app
