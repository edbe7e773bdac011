"""Routes the proxy forwards without recording: other /v1/* paths, and /v1/models."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import aiohttp
import orjson
from aiohttp import web
from yarl import URL

from agentworld.proxy.adapters.base import TRANSLATE
from agentworld.proxy.agent_conn import AgentTimeout, read_body
from agentworld.proxy.agent_request import (
    agent_for,
    first_line,
    get_trajectory,
    identify,
    upstream_of,
)
from agentworld.proxy.bad_request import BadRequest
from agentworld.proxy.config import UpstreamConfig
from agentworld.proxy.error_responses import bad_request, error_response
from agentworld.proxy.pipeline.faults import WRITE_ERRORS
from agentworld.proxy.state import STATE, State
from agentworld.proxy.translate import anthropic_models
from agentworld.proxy.upstream.faults import classify
from agentworld.proxy.upstream.headers import response_headers, upstream_headers


def make_session() -> aiohttp.ClientSession:
    """The proxy's one upstream session (connection pooling per upstream host)."""
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, ttl_dns_cache=300)
    return aiohttp.ClientSession(
        connector=connector,
        auto_decompress=False,
        skip_auto_headers=("User-Agent",),
    )


def _target(st: State, request: web.Request) -> tuple[UpstreamConfig, str, str | None]:
    ident = identify(request)
    if ident.trajectory:
        t = get_trajectory(st, ident.trajectory)
        up, key = upstream_of(st, t.agent)
        return up, up.urls[st.registry.pick_slot(t, len(up.urls))], key
    agent = agent_for(st, ident, None)
    up, key = upstream_of(st, agent)
    return up, up.urls[st.registry.first_up(agent, len(up.urls))], key


async def relay_v1(request: web.Request) -> web.StreamResponse:
    """Any other /v1/* path: forwarded as is (streamed both ways), not recorded."""
    return await _pass(request, request.match_info["tail"])


def confined(tail: str) -> str:
    """``tail`` (decoded, from the route) as the path under the upstream's ``/v1/``,
    percent-encoded again; BadRequest when it would leave ``/v1``.

    aiohttp resolves the dot-segments of a path before routing, but not encoded ones:
    ``/v1/%2e%2e/tokenize`` arrives as the tail ``../tokenize``, and the client would
    resolve it to the upstream's ``/tokenize`` (with the proxy's upstream key). So no
    segment may be ``.`` or ``..``, and what was encoded stays encoded (an encoded ``?``
    or ``#`` is part of the path, not a query).
    """
    if any(part in (".", "..") for part in tail.replace("\\", "/").split("/")):
        raise BadRequest(
            f"path /v1/{tail}: a '.' or '..' segment would leave /v1 (only /v1/* is forwarded)",
            "path",
        )
    return quote(tail, safe="/:@!$&'()*+,;=~")


async def _pass(request: web.Request, tail: str) -> web.StreamResponse:
    st = request.app[STATE]
    try:
        up, base, api_key = _target(st, request)
        url = base + "/v1/" + confined(tail)
    except BadRequest as exc:
        return bad_request(exc)
    try:
        data = (
            await read_body(request, st.config.max_body_bytes, st.config.client_timeout_s)
            if request.can_read_body
            else None
        )
    except AgentTimeout as exc:
        return bad_request(exc)
    except web.HTTPRequestEntityTooLarge:
        return bad_request(
            BadRequest(f"request body over the {st.config.max_body_bytes}-byte limit", None, 413)
        )
    except web.RequestPayloadError as exc:  # a body its Content-Encoding does not decode
        return bad_request(BadRequest(f"the request body could not be read: {first_line(exc)}"))
    return await relay_request(request, st, up, url, api_key, data)


async def relay_request(
    request: web.Request,
    st: State,
    up: UpstreamConfig,
    url: str,
    api_key: str | None,
    data: bytes | None,
    *,
    anthropic: bool = False,
) -> web.StreamResponse:
    """Send the agent's request (its method, query and ``data``) to ``url``; stream back the
    answer as it comes, status and headers included. The configured key goes as Anthropic's
    API takes it (``x-api-key``) for ``anthropic`` routes and for any request an Anthropic
    client sent (it carries ``anthropic-version``)."""
    assert st.session is not None
    if request.rel_url.raw_query_string:
        url += "?" + request.rel_url.raw_query_string
    target = URL(url, encoded=True)  # as built: encoded once, never resolved again
    headers = upstream_headers(
        request.headers, api_key, forward_client_auth=not st.config.auth_token
    )
    # The body comes back as the upstream encodes it (the session does not decompress):
    # only in an encoding the agent itself accepts.
    headers["Accept-Encoding"] = request.headers.get("Accept-Encoding", "identity")
    if api_key is not None and (anthropic or "anthropic-version" in request.headers):
        del headers["Authorization"]
        headers["x-api-key"] = api_key
    try:
        async with st.session.request(
            request.method,
            target,
            data=data,
            headers=headers,
            allow_redirects=False,
            # The agent's own upstream timeouts, as for its generation calls (no cap on
            # the whole call: a long stream may take as long as it keeps sending).
            timeout=aiohttp.ClientTimeout(
                total=None, sock_connect=up.connect_timeout_s, sock_read=up.timeout_s
            ),
        ) as resp:
            out = web.StreamResponse(
                status=resp.status, reason=resp.reason, headers=response_headers(resp.headers)
            )
            await out.prepare(request)
            try:
                async for chunk in resp.content.iter_any():
                    await out.write(chunk)
                await out.write_eof()
            except WRITE_ERRORS:
                pass
            return out
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        fault = classify(exc, url)
        st.stats.error("upstream")
        return error_response(fault.status, fault.message, "upstream_error", code=fault.status)


def _agents_listed(st: State, request: web.Request) -> list[dict[str, Any]] | None:
    """The configured agents as models, when several share the proxy and the call names none."""
    ident = identify(request)
    if ident.trajectory or ident.agent or len(st.config.agents) <= 1:
        return None
    return [
        {"id": name, "object": "model", "created": 0, "owned_by": "agentworld"}
        for name in sorted(st.config.agents)
    ]


async def _anthropic_models(
    request: web.Request, st: State
) -> tuple[list[dict[str, Any]], UpstreamConfig | None] | web.StreamResponse | None:
    """For an Anthropic client of a chat upstream: the models in Anthropic's shape (and the
    agent's upstream), or the error to answer; None for everyone else."""
    if "anthropic-version" not in request.headers:
        return None
    agents = _agents_listed(st, request)
    if agents is not None:
        return [anthropic_models.model_info(m) for m in agents], None
    try:
        up, base, api_key = _target(st, request)
    except BadRequest as exc:
        return anthropic_models.error(exc.status, str(exc))
    if (up.protocol_mode or TRANSLATE) != TRANSLATE:  # an Anthropic upstream answers itself
        return None
    assert st.session is not None
    got = await anthropic_models.upstream_models(
        request, st.session, up, base, api_key, forward_client_auth=not st.config.auth_token
    )
    return got if isinstance(got, web.StreamResponse) else (got, up)


async def models(request: web.Request) -> web.StreamResponse:
    """GET /v1/models: the upstream's list, or the configured agents when several share the
    proxy; in Anthropic's shape for an Anthropic client of a chat upstream."""
    st = request.app[STATE]
    got = await _anthropic_models(request, st)
    if isinstance(got, web.StreamResponse):
        return got
    if got is not None:
        return anthropic_models.listing(got[0], request)
    agents = _agents_listed(st, request)
    if agents is not None:
        return web.json_response(
            {"object": "list", "data": agents}, dumps=lambda o: orjson.dumps(o).decode()
        )
    return await _pass(request, "models")


async def model(request: web.Request) -> web.StreamResponse:
    """GET /v1/models/{model_id}: the upstream's answer; Anthropic's for an Anthropic client
    of a chat upstream."""
    st = request.app[STATE]
    model_id = request.match_info["model_id"]
    got = await _anthropic_models(request, st)
    if isinstance(got, web.StreamResponse):
        return got
    if got is not None:
        return anthropic_models.one(got[0], model_id, got[1])
    return await _pass(request, "models/" + model_id)
