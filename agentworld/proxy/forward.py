"""Forwarding generation calls upstream and recording them (the unary path; streams in streaming.py).

What the agent receives is what the upstream sent (status, body shape), minus
the token-id and log-prob fields the proxy asked for on its own. The step is
recorded after the response is sent (batched durability) or before (strict).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
from aiohttp import web

from agentworld import raw_ids
from agentworld.proxy import upstream_json
from agentworld.proxy.adapters.openai import Adapter
from agentworld.proxy.agent_request import (
    agent_for,
    get_trajectory,
    identify,
    read_json,
    upstream_of,
)
from agentworld.proxy.bad_request import BadRequest
from agentworld.proxy.calls import (
    WRITE_ERRORS,
    add_reply_continuations,
    answer_fault,
    call_headers,
    cancelled_steps,
    new_call,
    post_upstream,
    record_fault,
    served,
    thread_call,
)
from agentworld.proxy.error_responses import bad_request, error_response
from agentworld.proxy.recorder import Call, RecordFailed, mark_left, ok_steps
from agentworld.proxy.sse import MALFORMED
from agentworld.proxy.state import STATE, State
from agentworld.proxy.streaming import stream
from agentworld.proxy.upstream_faults import Fault, classify, upstream_error_message


async def generate(request: web.Request, adapter: Adapter) -> web.StreamResponse:
    """POST /v1/chat/completions and /v1/completions (under any trajectory prefix)."""
    st = request.app[STATE]
    started_at, t0 = time.time(), time.perf_counter()
    try:
        body = await read_json(request, st.config.max_body_bytes, st.config.client_timeout_s)
        adapter.check(body)
        ident = identify(request)
        messages = adapter.messages(body) if adapter.chat else None
        if ident.trajectory:
            t = get_trajectory(st, ident.trajectory)
            prompt_key = None
        else:
            agent = agent_for(st, ident, body.get("model"))
            upstream_of(st, agent)  # fail before opening a trajectory
            t, prompt_key = thread_call(st, request, ident, agent, messages)
        up, api_key = upstream_of(st, t.agent)
    except BadRequest as exc:
        if exc.status != 408:  # the errors middleware counts that one as agent_timeout
            st.stats.error("bad_request")
        st.stats.request(adapter.protocol, exc.status)
        return bad_request(exc)

    sent, injected = adapter.prepare(body, up)
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
    )
    url = base + adapter.path
    headers, out_headers = call_headers(st, request, call, api_key)
    if sent.get("stream") is True:
        answer = stream(request, st, call, url, up, headers, out_headers, prompt_key)
    else:
        answer = _unary(request, st, call, url, up, headers, out_headers, prompt_key)
    return await served(st, call, prompt_key, answer)


async def _unary(
    request: web.Request,
    st: State,
    call: Call,
    url: str,
    up: Any,
    headers: Any,
    out_headers: dict[str, str],
    prompt_key: bytes | None,
) -> web.StreamResponse:
    assert st.upstream is not None and st.recorder is not None
    t_up = time.perf_counter()
    try:
        raw, status, ctype = await post_upstream(st, call, url, up, headers)
    except asyncio.CancelledError:
        st.recorder.later(call.trajectory, cancelled_steps(call))
        raise
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        return await answer_fault(st, call, classify(exc, url), out_headers)
    call.upstream_s = call.first_token_s = time.perf_counter() - t_up
    out_headers.update(call.relay)
    if status != 200:
        fault = Fault(status, "upstream_status", upstream_error_message(raw))
        await record_fault(st, call, fault)
        return web.Response(status=status, body=raw, headers={"Content-Type": ctype, **out_headers})
    try:
        obj = upstream_json.loads(raw)
        if not isinstance(obj, dict):
            raise ValueError("not a JSON object")
    except ValueError as exc:
        fault = Fault(
            502, "upstream_invalid", f"upstream {url} sent a body that is not a JSON object: {exc}"
        )
        return await answer_fault(st, call, fault, out_headers)
    # The answer waits only for the continuation points the agent's next call needs; the
    # parsed body stays whole (the agent's copy is stripped) for the records.
    try:
        if call.injected.any:
            raw = raw_ids.dumps(call.adapter.stripped(obj, call.injected))
        replies = add_reply_continuations(st, call, prompt_key, obj)
    except MALFORMED as exc:
        return await answer_fault(st, call, _malformed(url, exc), out_headers)
    if st.recorder.strict:
        try:
            recs = ok_steps(call, obj, replies)
        except MALFORMED as exc:
            return await answer_fault(st, call, _malformed(url, exc), out_headers)
        try:
            await st.recorder.steps(call.trajectory, recs)
        except RecordFailed as exc:
            st.registry.retract(call.trajectory)
            return error_response(
                503,
                f"the step could not be recorded durably: {exc}",
                "service_unavailable",
                code=503,
                headers=out_headers,  # names the step that failed, as every answer does
            )
        out_headers["Content-Type"] = ctype
        return web.Response(body=raw, headers=out_headers)
    out_headers["Content-Type"] = ctype
    out = web.Response(body=raw, headers=out_headers)
    gone = False
    try:
        await out.prepare(request)
        await out.write_eof()
    except WRITE_ERRORS:
        gone = True
    # Batched durability: the records are built after the answer has left.
    try:
        recs = ok_steps(call, obj, replies)
    except MALFORMED as exc:  # the agent has its answer; the step says why it has no record
        await record_fault(st, call, _malformed(url, exc))
        return out
    if gone:
        mark_left(recs, "the answer")
    await st.recorder.steps(call.trajectory, recs)
    return out


def _malformed(url: str, exc: Exception) -> Fault:
    """A body of the wrong shape from the upstream: a 502, and an error step."""
    return Fault(502, "upstream_invalid", f"upstream {url} sent a malformed answer: {exc}")
