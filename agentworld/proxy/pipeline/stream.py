"""A streamed call: events go to the agent as they arrive; the end waits for the step.

The adapter's ``Relay`` turns each read's events into the agent's (as they came
for chat, translated, or the protocol's own); the pump here does the rest, the
same for every protocol: the first event goes out on its own (the first token is
not held up by the rest of its read) unless the read is the whole stream, the
end ([DONE] or the protocol's final event) and whatever came with it is held
until the step is registered (and durable, in strict mode), and a fault ends the
stream with the protocol's error event and an error step.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
from aiohttp import web

from agentworld.proxy.adapters.base import Answer, Exchange, Relay
from agentworld.proxy.agent_conn import stream_answer
from agentworld.proxy.config import UpstreamConfig
from agentworld.proxy.pipeline.call import continue_thread, open_upstream, stamp
from agentworld.proxy.pipeline.faults import (
    WRITE_ERRORS,
    answer_fault,
    cancelled,
    not_recorded,
    record_fault,
    stream_error,
)
from agentworld.proxy.recorder import Call, RecordFailed, mark_left
from agentworld.proxy.sse import MALFORMED, EventSplitter, SSEError
from agentworld.proxy.translate.context_window import retry_within_window
from agentworld.proxy.upstream.client import UpstreamResponse
from agentworld.proxy.upstream.faults import (
    Fault,
    classify,
    not_a_stream,
    read_limited,
    upstream_error_message,
)

# A first read holding the whole stream (its end included) and no bigger than this goes
# to the agent in one write (see ``_pump``); its first event is then late by the time it
# takes to parse the rest, ~3 us an event.
WHOLE_READ_BYTES = 64 * 1024


async def stream(
    request: web.Request,
    x: Exchange,
    url: str,
    up: UpstreamConfig,
    headers: Any,
    out_headers: dict[str, str],
) -> web.StreamResponse:
    """Stream the call's answer to the agent; the step recorded as the mode promises."""
    out = await _stream_once(request, x, url, up, headers, out_headers)
    if out is None:  # max_tokens was cut to the context window's room: ask again (once)
        out = await _stream_once(request, x, url, up, headers, out_headers)
    assert out is not None, "max_tokens is cut once a call"
    return out


async def _stream_once(
    request: web.Request,
    x: Exchange,
    url: str,
    up: UpstreamConfig,
    headers: Any,
    out_headers: dict[str, str],
) -> web.StreamResponse | None:
    """One upstream request and its answer; None when it should be asked again."""
    st, call, adapter = x.st, x.call, x.adapter
    assert st.recorder is not None
    t_up = time.perf_counter()
    try:
        resp = await open_upstream(st, call, url, up, headers)
        url = resp.url  # another of the agent's URLs, when its own was down
    except asyncio.CancelledError:
        st.recorder.later(call.trajectory, cancelled(x))
        raise
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        return await answer_fault(x, classify(exc, url), out_headers)
    relay = adapter.relay(x, url)
    clean = False  # fully read: the connection can go back to the pool (keep-alive)
    try:
        stamp(st, call, resp.headers)
        out_headers.update(call.relay)
        ctype = resp.headers.get("Content-Type", "")
        if resp.status != 200:  # the upstream's error
            try:
                raw = await read_limited(resp, st.config.max_response_bytes)
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                return await answer_fault(x, classify(exc, url), out_headers)
            message = upstream_error_message(raw)
            if (
                resp.status == 400
                and x.translate
                and retry_within_window(call, x.request_record or {}, message)
            ):
                return None
            fault = Fault(resp.status, "upstream_status", message)
            await record_fault(x, fault)
            return adapter.refused(x, fault, raw, ctype or "application/json", out_headers)
        if not ctype.startswith("text/event-stream"):  # unread: the connection is closed
            return await answer_fault(x, not_a_stream(url, ctype), out_headers)
        out = stream_answer(
            request,
            {
                "Content-Type": relay.content_type(ctype),
                "Cache-Control": "no-cache",
                **out_headers,
            },
        )
        if resp.buffered(b"\n\n"):
            # The first event came with the upstream's headers: ours go out with what it
            # becomes, in one write. Otherwise they go now, as the upstream's did.
            out._send_headers_immediately = False  # type: ignore[attr-defined]
        try:
            await out.prepare(request)
        except WRITE_ERRORS:
            await st.recorder.steps(call.trajectory, cancelled(x))
            return out
        held, gone, fault = await _pump(resp, out, call, relay, url, st.config.max_response_bytes)
        clean = relay.done and not gone and fault is None
        call.upstream_s = time.perf_counter() - t_up
        return await _finish(x, out, relay, held, gone, fault)
    except asyncio.CancelledError:
        st.recorder.later(call.trajectory, cancelled(x, relay.partial()))
        raise
    finally:
        if clean:
            resp.release()
        else:
            resp.close()


async def _pump(
    resp: UpstreamResponse,
    out: web.StreamResponse,
    call: Call,
    relay: Relay,
    url: str,
    limit_bytes: int,
) -> tuple[bytes, bool, Fault | None]:
    """Forward events as they arrive through ``relay``; hold back the end.

    Returns (held, agent gone, fault): ``held`` is what came with the end (and
    after it), sent by ``_finish`` in one write with the closing events (the
    agent sees them no later: the end waits for the step to be registered
    anyway), or, in strict mode, ahead of the end, which alone waits for the
    disk. The first event goes out on its own, ahead of the rest of its read, so
    the first token is not held up by them; unless that read is the whole stream
    (a short answer, its end included, in under ``WHOLE_READ_BYTES``): then the
    agent gets it all in one write, a few microseconds an event later than the
    first event alone would have left.
    """
    splitter = EventSplitter()
    feed = relay.feed
    size = 0
    first = True
    held: list[bytes] = []
    try:
        async for data in resp.content.iter_any():
            size += len(data)
            if size > limit_bytes:  # an endless stream must not grow the assembler without bound
                msg = f"upstream {url}: stream over {limit_bytes} bytes"
                return b"", False, Fault(502, "upstream_invalid", msg)
            events = splitter.split(data)
            parts: list[bytes] = []
            if call.first_token_s is None:
                call.first_token_s = time.perf_counter() - call.t0
            if first and events:
                first = False
                if not (len(data) <= WHOLE_READ_BYTES and relay.ends_in(data)):
                    fault = feed(events[:1], parts)
                    if fault is not None:
                        return b"".join(parts), False, fault
                    if not relay.done:
                        try:  # even if it became no event: the headers go
                            await out.write(b"".join(parts))
                        except WRITE_ERRORS:
                            return b"", True, None
                        parts = []
                    events = events[1:]
            fault = feed(events, parts)
            if fault is not None:
                return b"".join([*held, *parts]), False, fault
            if relay.done:
                # Read on to the end of the body (its last chunk), so the upstream
                # connection can serve another call; what came with the end waits.
                held += parts
            elif parts:
                try:
                    await out.write(parts[0] if len(parts) == 1 else b"".join(parts))
                except WRITE_ERRORS:
                    return b"", True, None
    except SSEError as exc:
        return b"".join(held), False, Fault(502, "upstream_invalid", f"upstream {url}: {exc}")
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        return b"".join(held), False, classify(exc, url)
    return b"".join(held), False, relay.end_fault()


async def _finish(
    x: Exchange,
    out: web.StreamResponse,
    relay: Relay,
    held: bytes,
    gone: bool,
    fault: Fault | None,
) -> web.StreamResponse:
    """Record the step; send ``held`` and the closing events (or an error event)."""
    st, call = x.st, x.call
    assert st.recorder is not None
    try:
        partial = relay.partial()
    except MALFORMED as exc:  # events that each passed, together of the wrong shape
        partial = None
        if fault is None:
            fault = Fault(502, "upstream_invalid", f"the upstream's answer is malformed: {exc}")
    if gone:
        await st.recorder.steps(call.trajectory, cancelled(x, partial))
        return out
    from_upstream = fault is None and relay.error is not None
    if from_upstream:
        fault = stream_error(relay.error or {})
    answer: Answer | None = None
    if fault is None:
        # The end waits only for the continuation points the agent's next call needs
        # (and, in strict mode, for the step to be durable).
        try:
            answer = relay.close(partial)
            continue_thread(x, answer.replies)
        except MALFORMED as exc:
            fault = Fault(502, "upstream_invalid", f"unreadable stream: {exc}")
    if fault is not None:
        try:
            await out.write_eof(held + relay.fault_event(fault, from_upstream))
        except WRITE_ERRORS:
            pass
        await record_fault(x, fault, partial)
        return out
    assert answer is not None
    tail = answer.data
    recs = None
    left = False
    if st.recorder.strict:
        if held:  # the answer's events go now, as a longer stream's would have: only the
            try:  # end waits for the disk (a whole-read stream's first token must not)
                await out.write(held)
            except WRITE_ERRORS:
                left = True
            held = b""
        recs = answer.records()
        try:
            await st.recorder.steps(call.trajectory, recs)
        except RecordFailed as exc:
            st.registry.retract(call.trajectory)
            tail = relay.error_event(503, not_recorded(exc), "service_unavailable")
    if not left:
        try:
            await out.write_eof(held + tail)  # one write: the held events, the end, the body's end
        except WRITE_ERRORS:
            left = True
    if recs is None:
        recs = answer.records()
        if left:
            mark_left(recs, "the end of the stream")
        await st.recorder.steps(call.trajectory, recs)
    return out
