"""Routes the proxy forwards without recording: other /v1/* paths, and /v1/models."""

from __future__ import annotations

import aiohttp
import orjson
from aiohttp import web

from agentworld.proxy.agent_conn import AgentTimeout, read_body
from agentworld.proxy.app import (
    STATE,
    BadRequest,
    State,
    agent_for,
    bad_request,
    error_response,
    get_trajectory,
    identify,
    upstream_of,
)
from agentworld.proxy.calls import WRITE_ERRORS
from agentworld.proxy.config import UpstreamConfig
from agentworld.proxy.upstream import classify, response_headers, upstream_headers


def _target(st: State, request: web.Request) -> tuple[UpstreamConfig, str, str | None]:
    ident = identify(request)
    if ident.trajectory:
        t = get_trajectory(st, ident.trajectory)
        up, key = upstream_of(st, t.agent)
        return up, up.urls[st.registry.pick_slot(t, len(up.urls))], key
    agent = agent_for(st, ident, None)
    up, key = upstream_of(st, agent)
    return up, up.urls[st.registry.first_up(agent, len(up.urls))], key


async def passthrough(request: web.Request) -> web.StreamResponse:
    """Any other /v1/* path: forwarded as is (streamed both ways), not recorded."""
    return await _pass(request, request.match_info["tail"])


async def _pass(request: web.Request, tail: str) -> web.StreamResponse:
    st = request.app[STATE]
    try:
        up, base, api_key = _target(st, request)
    except BadRequest as exc:
        return bad_request(exc)
    url = base + "/v1/" + tail
    try:
        data = (
            await read_body(request, st.config.max_body_bytes, st.config.client_timeout_s)
            if request.can_read_body
            else None
        )
    except AgentTimeout as exc:
        return bad_request(exc)
    return await forward(request, st, up, url, api_key, data)


async def forward(
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
    if request.query_string:
        url += "?" + request.query_string
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
            url,
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


async def models(request: web.Request) -> web.StreamResponse:
    """GET /v1/models: the upstream's list, or the configured agents when several share the proxy."""
    st = request.app[STATE]
    ident = identify(request)
    if not ident.trajectory and not ident.agent and len(st.config.agents) > 1:
        data = [
            {"id": name, "object": "model", "created": 0, "owned_by": "agentworld"}
            for name in sorted(st.config.agents)
        ]
        return web.json_response(
            {"object": "list", "data": data}, dumps=lambda o: orjson.dumps(o).decode()
        )
    return await _pass(request, "models")
