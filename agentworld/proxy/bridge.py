"""Forwarding Anthropic Messages and OpenAI Responses calls, and recording them as normalised steps.

Per agent, ``protocol_mode`` says where a call goes: ``translate`` (the default)
asks a chat-completions upstream (vLLM, ``aw serve``) the same question and
translates its answer and stream back, which is where exact token ids come
from; ``passthrough`` forwards to an upstream speaking the same protocol and
records its answer as it is. Either way the step holds normalised messages,
the protocol name, and the agent's own request and answer under ``raw``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection
from typing import Any

import aiohttp
from aiohttp import web

from agentworld import raw_ids
from agentworld.proxy import upstream_json
from agentworld.proxy.adapters.openai import CHAT, Injected
from agentworld.proxy.adapters.translated import (
    MESSAGES,
    PASSTHROUGH,
    RESPONSES,
    TRANSLATE,
    ProtocolAdapter,
)
from agentworld.proxy.agent_request import (
    agent_for,
    get_trajectory,
    identify,
    read_json,
    upstream_of,
)
from agentworld.proxy.bad_request import BadRequest
from agentworld.proxy.bridge_calls import (
    Ctx,
    answer,
    answer_fault,
    cancelled_step,
    deliver,
    error_response,
    record_fault,
    upstream_refused,
)
from agentworld.proxy.bridge_stream import stream
from agentworld.proxy.calls import call_headers, new_call, post_upstream, served, thread_call
from agentworld.proxy.error_responses import refusal_headers
from agentworld.proxy.sse import MALFORMED
from agentworld.proxy.state import CHAINS, STATE
from agentworld.proxy.translate.context_window import retry_within_window
from agentworld.proxy.translate.response_chains import ResponseChains
from agentworld.proxy.upstream_faults import Fault, classify, upstream_error_message

log = logging.getLogger("agentworld.proxy")


def restore_chains(chains: ResponseChains, pool: Any, trajectories: Collection[str]) -> int:
    """After a restart: the Responses answers of the re-opened trajectories go back into the
    chain store, from what their steps keep (``raw``: the agent's request and the answer it
    got), so a ``previous_response_id`` an agent got before the restart still finds its
    conversation. The newest ``chains.max_responses`` at most; returns how many."""
    if not trajectories:
        return 0
    steps = pool.index().steps_of(list(trajectories))
    rows = [
        r
        for rows in steps.values()
        for r in rows
        if r.get("protocol") == RESPONSES.protocol and r.get("status") == "ok"
    ]
    rows.sort(key=lambda r: r.get("started_at") or 0.0)
    rows = rows[-chains.max_responses :]
    got = pool.read_steps(rows)  # each shard or journal read once
    n = 0
    for row in rows:
        try:
            step = got[row["id"]]
            if isinstance(step, Exception):
                raise step
            raw = step.get("raw") or {}
            body, answer = raw.get("request"), raw.get("response")
            if isinstance(body, dict) and isinstance(answer, dict):
                before = len(chains)
                RESPONSES.remember(chains, row["trajectory"], body, answer)
                n += len(chains) > before
        except Exception as exc:  # the index is a cache; a bad row must not stop the proxy
            log.warning("restore: cannot read Responses step %s: %s", row.get("id"), exc)
    return n


def add_routes(app: web.Application, prefix: str) -> None:
    """Register ``/v1/messages`` and ``/v1/responses`` under one route prefix."""

    def bind(adapter: ProtocolAdapter) -> Any:
        async def handler(request: web.Request) -> web.StreamResponse:
            return await generate(request, adapter)

        return handler

    app.router.add_post(prefix + MESSAGES.path, bind(MESSAGES))
    app.router.add_post(prefix + RESPONSES.path, bind(RESPONSES))


async def generate(request: web.Request, adapter: ProtocolAdapter) -> web.StreamResponse:
    """POST /v1/messages or /v1/responses (under any trajectory prefix)."""
    st = request.app[STATE]
    chains = request.app[CHAINS]
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
            t = st.registry.open[chained]
        agent = t.agent if t is not None else agent_for(st, ident, body.get("model"))
        up, api_key = upstream_of(st, agent)
        mode = up.protocol_mode or TRANSLATE
        if unknown is not None:
            if mode == TRANSLATE:
                raise unknown  # the chat upstream cannot know it: the proxy must rebuild the input
            metadata["history"] = "previous_response_id unknown to the proxy: input only"
        messages = adapter.messages(body, history, strict=mode == TRANSLATE)
        chat = (
            adapter.to_chat(body, messages, engine=up.engine, model=up.model, history=history)
            if mode == TRANSLATE
            else None
        )
        prompt_key = None
        if t is None:
            t, prompt_key = thread_call(st, request, ident, agent, messages)
    except BadRequest as exc:
        if exc.status != 408:  # the errors middleware counts that one as agent_timeout
            st.stats.error("bad_request")
        st.stats.request(adapter.protocol, exc.status)
        return error_response(
            adapter,
            exc.status,
            exc.message,
            exc.param,
            headers=refusal_headers(exc.status),
            code=exc.code,
        )

    metadata["protocol_mode"] = mode
    request_record: dict[str, Any] = {"messages": messages, "params": adapter.params(body)}
    if chat is not None:
        sent, injected = CHAT.prepare(chat, up)
        path = CHAT.path
        request_record["params"]["chat"] = {
            k: v for k, v in sent.items() if k not in ("model", "messages", "tools")
        }
    else:
        sent, injected = dict(body), Injected()
        if up.model is not None:
            sent["model"] = up.model
        path = adapter.path
    if isinstance(sent.get("model"), str):
        request_record["model"] = sent["model"]
    # A translated step records the tools the chat model was given.
    tools = chat.get("tools") if chat is not None else adapter.record_tools(body)
    if tools:
        request_record["tools"] = tools
    if chat is not None and (left := adapter.left_out(body)):
        metadata["tools_left_out"] = left  # hosted/server tools a chat upstream cannot run
    call, base = new_call(
        st,
        t,
        up,
        adapter,
        sent,
        injected,
        requested_model=body.get("model"),
        started_at=started_at,
        t0=t0,
        messages=messages,
        metadata=metadata,
    )
    url = base + path
    ctx = Ctx(
        st, chains, adapter, call, body, mode, adapter.new_id(), prompt_key, request_record, history
    )
    headers, out_headers = call_headers(st, request, call, api_key)
    if adapter is MESSAGES and mode == PASSTHROUGH and api_key is not None:
        del headers["Authorization"]  # Anthropic's API takes its key as x-api-key
        headers["x-api-key"] = api_key
    if body.get("stream") is True:
        answer = stream(request, ctx, url, up, headers, out_headers)
    else:
        answer = _unary(request, ctx, url, up, headers, out_headers)
    return await served(st, call, prompt_key, answer)


# -- unary ------------------------------------------------------------------------------------


async def _unary(
    request: web.Request,
    ctx: Ctx,
    url: str,
    up: Any,
    headers: Any,
    out_headers: dict[str, str],
) -> web.StreamResponse:
    st, call, adapter = ctx.st, ctx.call, ctx.adapter
    assert st.upstream is not None and st.recorder is not None
    t_up = time.perf_counter()
    try:
        raw, status, ctype = await post_upstream(st, call, url, up, headers)
        if (
            status == 400
            and ctx.translate
            and retry_within_window(call, ctx.request_record, upstream_error_message(raw))
        ):
            raw, status, ctype = await post_upstream(st, call, url, up, headers)
    except asyncio.CancelledError:
        st.recorder.later(call.trajectory, cancelled_step(ctx))
        raise
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        return await answer_fault(ctx, classify(exc, url), out_headers)
    call.upstream_s = call.first_token_s = time.perf_counter() - t_up
    out_headers.update(call.relay)
    if status != 200:
        fault = Fault(status, "upstream_status", upstream_error_message(raw))
        await record_fault(ctx, fault)
        if ctx.translate:
            return upstream_refused(ctx, status, fault.message)
        return web.Response(status=status, body=raw, headers={"Content-Type": ctype, **out_headers})
    try:
        obj = upstream_json.loads(raw)
        if not isinstance(obj, dict):
            raise ValueError("not a JSON object")
        recs, proto = answer(ctx, obj)
    except MALFORMED as exc:
        fault = Fault(502, "upstream_invalid", f"upstream {url} sent an unreadable answer: {exc}")
        return await answer_fault(ctx, fault, out_headers)
    data = raw_ids.dumps(proto) if ctx.translate else raw
    out_headers["Content-Type"] = "application/json" if ctx.translate else ctype
    out: web.StreamResponse = web.Response(body=data, headers=out_headers)

    async def send() -> None:
        await out.prepare(request)
        await out.write_eof()

    async def fail(message: str) -> None:
        nonlocal out
        out_headers.pop("Content-Type", None)
        out = error_response(adapter, 503, message, headers=out_headers)  # names its step

    await deliver(ctx, recs, send, fail)
    return out
