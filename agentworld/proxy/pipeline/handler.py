"""The one handler of every recorded generation route, whatever its wire format.

``generate`` reads the request and identifies it, asks the adapter what goes
upstream, threads the call into its trajectory and numbers its step, then
answers it unary or streamed (``unary.py``, ``stream.py``); ``served`` does
the bookkeeping however the call ended.
"""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from agentworld.proxy.adapters.base import PASSTHROUGH, TRANSLATE, Adapter, Exchange
from agentworld.proxy.agent_request import (
    agent_for,
    get_trajectory,
    identify,
    read_json,
    upstream_of,
)
from agentworld.proxy.bad_request import BadRequest
from agentworld.proxy.pipeline.call import call_headers, new_call, seed_call, served, thread_call
from agentworld.proxy.pipeline.stream import stream
from agentworld.proxy.pipeline.unary import unary
from agentworld.proxy.state import CHAINS, STATE


def route(adapter: Adapter) -> Any:
    """The aiohttp handler of ``adapter``'s route."""

    async def handler(request: web.Request) -> web.StreamResponse:
        return await generate(request, adapter)

    return handler


async def generate(request: web.Request, adapter: Adapter) -> web.StreamResponse:
    """POST a generation call in ``adapter``'s wire format (under any trajectory prefix)."""
    app = request.app
    st, chains = app[STATE], app[CHAINS]
    started_at, t0 = time.time(), time.perf_counter()
    metadata: dict[str, Any] = {}
    try:
        body = await read_json(request, st.config.max_body_bytes, st.config.client_timeout_s)
        adapter.check(body)
        ident = identify(request)
        t = get_trajectory(st, ident.trajectory) if ident.trajectory else None
        unknown: BadRequest | None = None
        try:
            history, chained = adapter.history(body, chains)
        except BadRequest as exc:
            history, chained, unknown = [], None, exc
        if t is None and chained is not None and chained in st.registry.open:
            t = st.registry.open[chained]  # a Responses chain continues its trajectory
        agent = t.agent if t is not None else agent_for(st, ident, body.get("model"))
        up, api_key = upstream_of(st, agent)  # fails before a trajectory is opened
        mode = adapter.mode(up)
        if unknown is not None:
            if mode == TRANSLATE:
                raise unknown  # the chat upstream cannot know it: the proxy must rebuild the input
            metadata["history"] = "previous_response_id unknown to the proxy: input only"
        messages = adapter.messages(body, history, strict=mode == TRANSLATE)
        sent = adapter.outbound(body, messages, up, mode, history)
        prompt_key = None
        if t is None:
            t, prompt_key = thread_call(st, request, ident, agent, messages)
    except BadRequest as exc:
        if exc.status != 408:  # the errors middleware counts that one as agent_timeout
            st.stats.error("bad_request")
        st.stats.request(adapter.protocol, exc.status)
        return adapter.refusal(exc)

    metadata.update(sent.metadata)
    call, base = new_call(
        st,
        t,
        up,
        adapter,
        sent.sent,
        sent.injected,
        requested_model=body.get("model"),
        started_at=started_at,
        t0=t0,
        messages=messages,
        metadata=metadata,
    )
    seed_call(call, body, mode)
    x = Exchange(
        st,
        adapter,
        call,
        body,
        mode,
        prompt_key,
        chains,
        threads=prompt_key is not None and t.threaded,
        request_record=sent.request_record,
        history=history,
        rid=sent.rid,
    )
    url = base + sent.path
    headers, out_headers = call_headers(st, request, call, api_key)
    if mode == PASSTHROUGH and api_key is not None and adapter.api_key_header is not None:
        del headers["Authorization"]  # this protocol's API takes its key in a header of its own
        headers[adapter.api_key_header] = api_key
    if sent.stream:
        answer = stream(request, x, url, up, headers, out_headers)
    else:
        answer = unary(request, x, url, up, headers, out_headers)
    return await served(st, call, prompt_key, answer)
