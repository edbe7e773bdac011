"""``POST /v1/messages/count_tokens``: Anthropic's token count, from the engine's own tokenizer.

Claude Code and other Anthropic SDK agents call it often (to manage their
context window); without an answer they fall back to estimates. With a
chat-completions upstream (``protocol_mode = "translate"``) the proxy asks
the same question it would send for generation (messages, tools, thinking
switch) of vLLM's ``POST /tokenize``, which `aw serve` also answers, so the
count is the prompt the engine would see. A passthrough agent's call goes to
its Anthropic upstream as it is (and, like other pass-through paths, is not
counted in ``/aw/stats``). Nothing is recorded: no model ran.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson
from aiohttp import web

from agentworld.proxy.adapters.base import PASSTHROUGH, TRANSLATE
from agentworld.proxy.adapters.translated import MESSAGES
from agentworld.proxy.agent_request import (
    agent_for,
    get_trajectory,
    identify,
    read_json,
    upstream_of,
)
from agentworld.proxy.bad_request import BadRequest
from agentworld.proxy.config import UpstreamConfig
from agentworld.proxy.error_responses import refusal_headers
from agentworld.proxy.relay import relay_request
from agentworld.proxy.state import STATE
from agentworld.proxy.translate import anthropic as am
from agentworld.proxy.upstream.faults import classify, upstream_error_message
from agentworld.proxy.upstream.headers import upstream_headers

PATH = "/v1/messages/count_tokens"
ROUTE = "anthropic.count_tokens"  # in /aw/stats and /metrics request counts
TOKENIZE = "/tokenize"  # vLLM's (and `aw serve`'s), at the server's root


def add_routes(app: web.Application, prefix: str) -> None:
    app.router.add_post(prefix + PATH, count_tokens)


def _error(status: int, message: str) -> web.Response:
    return MESSAGES.error_response(status, message)


def tokenize_body(body: dict[str, Any], up: UpstreamConfig) -> dict[str, Any]:
    """vLLM's ``/tokenize`` request for the prompt a Messages call would be sent as."""
    prompt = am.chat_prompt(body, am.messages(body), engine=up.engine, model=up.model)
    return {"add_generation_prompt": True, **prompt}  # a prefill's prompt has none


async def count_tokens(request: web.Request) -> web.StreamResponse:
    st = request.app[STATE]
    try:
        raw_body = await read_json(request, st.config.max_body_bytes, st.config.client_timeout_s)
        am.check(raw_body, count_only=True)
        ident = identify(request)
        t = get_trajectory(st, ident.trajectory) if ident.trajectory else None
        agent = t.agent if t is not None else agent_for(st, ident, raw_body.get("model"))
        up, api_key = upstream_of(st, agent)
        slot = (
            st.registry.pick_slot(t, len(up.urls))
            if t is not None
            else st.registry.first_up(agent, len(up.urls))
        )
        base = up.urls[slot]
        if (up.protocol_mode or TRANSLATE) == PASSTHROUGH:
            data = orjson.dumps(raw_body)
            return await relay_request(request, st, up, base + PATH, api_key, data, anthropic=True)
        if up.engine != "vllm":
            raise BadRequest(
                f"counting tokens needs a tokenizer: agent {agent!r}'s upstream is "
                f"engine {up.engine!r}, which has no /tokenize",
                None,
                404,
            )
        asked = tokenize_body(raw_body, up)
    except BadRequest as exc:
        if exc.status != 408:  # the errors middleware counts that one as agent_timeout
            st.stats.error("bad_request")
        st.stats.request(ROUTE, exc.status)
        return MESSAGES.error_response(exc.status, exc.message, headers=refusal_headers(exc.status))
    url = base + TOKENIZE
    headers = upstream_headers(
        request.headers, api_key, forward_client_auth=not st.config.auth_token
    )
    headers["Content-Type"] = "application/json"
    headers["Accept-Encoding"] = "identity"  # read here, and the session does not decompress
    assert st.session is not None
    try:
        async with st.session.post(
            url,
            data=orjson.dumps(asked),
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=up.timeout_s, sock_connect=up.connect_timeout_s),
        ) as resp:
            raw = await resp.read()
            status = resp.status
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        fault = classify(exc, url)
        st.stats.error("upstream")
        st.stats.request(ROUTE, fault.status)
        return _error(fault.status, fault.message)
    count = _count(raw) if status == 200 else None
    if count is None:
        if _no_route(status, raw):
            out, why = (
                404,
                f"the upstream {base} has no {TOKENIZE} endpoint (vLLM and `aw serve` do)",
            )
        else:  # its own refusal (a prompt over the model's length, say) keeps its status
            out = status if 400 <= status < 500 else 502
            why = (
                f"the upstream's {TOKENIZE} answered {status}: {upstream_error_message(raw)[:500]}"
            )
        if out == 502:
            st.stats.error("upstream")
        st.stats.request(ROUTE, out)
        return _error(out, f"cannot count tokens: {why}")
    st.stats.request(ROUTE, 200)
    return web.Response(body=orjson.dumps({"input_tokens": count}), content_type="application/json")


def _no_route(status: int, raw: bytes) -> bool:
    """The upstream has no such endpoint (rather than refusing this request, say for a
    model it does not serve: vLLM's 404s carry an error object)."""
    if status == 405:
        return True
    if status != 404:
        return False
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return True
    return not (isinstance(body, dict) and isinstance(body.get("error"), dict | str))


def _count(raw: bytes) -> int | None:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    count = body.get("count") if isinstance(body, dict) else None
    return count if isinstance(count, int) and not isinstance(count, bool) else None
