"""A call answered in one body: the upstream's answer, the agent's, and the step, in durability order.

Strict durability records the step before the answer leaves (a step that cannot
be recorded becomes a 503); batched sends the answer first and builds and
records the step after, so recording never delays the agent.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
from aiohttp import web

from agentworld.proxy.adapters.base import Exchange
from agentworld.proxy.agent_conn import answer_now
from agentworld.proxy.config import UpstreamConfig
from agentworld.proxy.pipeline.call import continue_thread, post_upstream
from agentworld.proxy.pipeline.faults import (
    WRITE_ERRORS,
    answer_fault,
    cancelled,
    malformed,
    not_recorded,
    record_fault,
)
from agentworld.proxy.recorder import RecordFailed, mark_left, retry_later
from agentworld.proxy.sse import MALFORMED
from agentworld.proxy.translate.context_window import retry_within_window
from agentworld.proxy.upstream.faults import Fault, classify, upstream_error_message


async def unary(
    request: web.Request,
    x: Exchange,
    url: str,
    up: UpstreamConfig,
    headers: Any,
    out_headers: dict[str, str],
) -> web.StreamResponse:
    """POST the call upstream and answer the agent; the step recorded as the mode promises."""
    st, call, adapter = x.st, x.call, x.adapter
    assert st.recorder is not None
    t_up = time.perf_counter()
    try:
        raw, status, ctype = await post_upstream(st, call, url, up, headers)
        if (
            status == 400
            and x.translate
            and retry_within_window(call, x.request_record or {}, upstream_error_message(raw))
        ):  # max_tokens was cut to the context window's room: ask again (once)
            raw, status, ctype = await post_upstream(st, call, url, up, headers)
    except asyncio.CancelledError:
        st.recorder.later(call.trajectory, cancelled(x))
        raise
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        return await answer_fault(x, classify(exc, url), out_headers)
    call.upstream_s = call.first_token_s = time.perf_counter() - t_up
    out_headers.update(call.relay)
    if status != 200:
        fault = Fault(status, "upstream_status", upstream_error_message(raw))
        await record_fault(x, fault)
        return adapter.refused(x, fault, raw, ctype, out_headers)
    # The answer waits only for the continuation points the agent's next call needs.
    try:
        answer = adapter.answer(x, raw, ctype)
        continue_thread(x, answer.replies)
    except MALFORMED as exc:
        return await answer_fault(x, malformed(url, exc), out_headers)
    out_headers["Content-Type"] = answer.content_type
    if st.recorder.strict:
        try:
            recs = answer.records()
        except MALFORMED as exc:
            return await answer_fault(x, malformed(url, exc), out_headers)
        try:
            await st.recorder.steps(call.trajectory, recs)
        except RecordFailed as exc:
            st.registry.retract(call.trajectory)
            del out_headers["Content-Type"]
            out_headers.update(retry_later())
            # names the step that failed, as every answer does
            return adapter.server_error(503, not_recorded(exc), "service_unavailable", out_headers)
        return web.Response(body=answer.data, headers=out_headers)
    out = web.Response(body=answer.data, headers=out_headers)
    gone = False
    try:
        await answer_now(request, out)
    except WRITE_ERRORS:
        gone = True
    # Batched durability: the records are built after the answer has left.
    try:
        recs = answer.records()
    except MALFORMED as exc:  # the agent has its answer; the step says why it has no record
        await record_fault(x, malformed(url, exc))
        return out
    if gone:
        mark_left(recs, "the answer")
    await st.recorder.steps(call.trajectory, recs)
    return out
