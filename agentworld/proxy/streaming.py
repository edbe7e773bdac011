"""Forwarding SSE streams: events go to the agent as they arrive while the assembler rebuilds
the full response for the record; ``[DONE]`` is released only once the step is
registered (and durable, in strict mode)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from agentworld.proxy import upstream_json
from agentworld.proxy.calls import (
    WRITE_ERRORS,
    add_reply_continuations,
    answer_fault,
    cancelled_steps,
    open_upstream,
    record_fault,
    stamp,
)
from agentworld.proxy.recorder import Call, RecordFailed, mark_left, ok_steps
from agentworld.proxy.sse import (
    MALFORMED,
    EventSplitter,
    SSEError,
    StreamAssembler,
    encode_event,
    event_data,
)
from agentworld.proxy.state import State
from agentworld.proxy.upstream_faults import (
    Fault,
    classify,
    not_a_stream,
    read_limited,
    upstream_error_message,
)
from agentworld.proxy.upstream_http import UpstreamResponse


async def stream(
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
        resp = await open_upstream(st, call, url, up, headers)
        url = resp.url  # another of the agent's URLs, when its own was down
    except asyncio.CancelledError:
        st.recorder.later(call.trajectory, cancelled_steps(call))
        raise
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        return await answer_fault(st, call, classify(exc, url), out_headers)
    asm = StreamAssembler(chat=call.adapter.chat)
    clean = False  # fully read: the connection can go back to the pool (keep-alive)
    try:
        stamp(st, call, resp.headers)
        out_headers.update(call.relay)
        ctype = resp.headers.get("Content-Type", "")
        if resp.status != 200:  # the upstream's error, relayed as it came
            try:
                raw = await read_limited(resp, st.config.max_response_bytes)
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                return await answer_fault(st, call, classify(exc, url), out_headers)
            fault = Fault(resp.status, "upstream_status", upstream_error_message(raw))
            await record_fault(st, call, fault)
            return web.Response(
                status=resp.status,
                body=raw,
                headers={"Content-Type": ctype or "application/json", **out_headers},
            )
        if not ctype.startswith("text/event-stream"):  # unread: the connection is closed
            return await answer_fault(st, call, not_a_stream(url, ctype), out_headers)
        out = web.StreamResponse(
            status=200,
            headers={"Content-Type": ctype, "Cache-Control": "no-cache", **out_headers},
        )
        if resp.buffered(b"\n\n"):
            # The first event came with the upstream's headers: ours go out with it, in
            # one write. Otherwise they go now, as the upstream's did.
            out._send_headers_immediately = False  # type: ignore[attr-defined]
        try:
            await out.prepare(request)
        except WRITE_ERRORS:
            await st.recorder.steps(call.trajectory, cancelled_steps(call))
            return out
        done, cancelled, fault, held = await _pump(
            resp, out, call, asm, url, st.config.max_response_bytes
        )
        clean = done and not cancelled and fault is None
        call.upstream_s = time.perf_counter() - t_up
        return await _finish_stream(st, call, out, asm, done, cancelled, fault, prompt_key, held)
    except asyncio.CancelledError:
        st.recorder.later(call.trajectory, cancelled_steps(call, asm.result()))
        raise
    finally:
        if clean:
            resp.release()
        else:
            resp.close()


# A first read holding the whole stream (up to [DONE]) and no bigger than this goes to the
# agent in one write (see ``_pump``); its first event is then late by the time it takes
# to parse the rest, ~3 us an event.
WHOLE_READ_BYTES = 64 * 1024


async def _pump(
    resp: UpstreamResponse,
    out: web.StreamResponse,
    call: Call,
    asm: StreamAssembler,
    url: str,
    limit_bytes: int,
) -> tuple[bool, bool, Fault | None, bytes]:
    """Forward events as they arrive, feeding the assembler; hold back [DONE].

    Returns (saw [DONE], agent gone, fault, held): ``held`` is the events that
    came with [DONE] (and after it), sent by ``_finish_stream`` in one write with
    [DONE] and the end of the body (the agent sees them no later: [DONE] waits
    for the step to be registered anyway), or, in strict mode, ahead of [DONE],
    which alone waits for the disk. The first event goes out on its own,
    ahead of the rest of its read, so the first token is not held up by them;
    unless that read is the whole stream (a short answer, [DONE] included, in
    under ``WHOLE_READ_BYTES``): then the agent gets it all in one write, a few
    microseconds an event later than the first event alone would have left.
    """
    splitter = EventSplitter()
    size = 0
    strip = call.injected.any
    adapter = call.adapter
    injected = call.injected
    add = asm.add
    loads = upstream_json.loads
    done = False
    first = True
    held: list[bytes] = []
    try:
        async for data in resp.content.iter_any():
            if first:
                if call.first_token_s is None:
                    call.first_token_s = time.perf_counter() - call.t0
                if len(data) <= WHOLE_READ_BYTES and b"data: [DONE]" in data:
                    first = False  # the whole stream: no early write for its first event
            size += len(data)
            if size > limit_bytes:  # an endless stream must not grow the assembler without bound
                return (
                    done,
                    False,
                    Fault(
                        502, "upstream_invalid", f"upstream {url}: stream over {limit_bytes} bytes"
                    ),
                    b"",
                )
            parts: list[bytes] = []
            for ev in splitter.split(data):
                if ev[:6] == b"data: " and b"\n" not in ev:
                    payload: bytes | None = ev[6:]  # the usual one-line event, inline
                else:
                    payload = event_data(ev)
                if payload is None:
                    parts.append(ev + b"\n\n")
                elif payload[:1] != b"{" and payload.strip() == b"[DONE]":
                    done = True  # released after the step is registered (and durable, if strict)
                    continue
                else:
                    try:
                        obj = loads(payload)
                    except orjson.JSONDecodeError:
                        # Not an event of this protocol: the agent gets the protocol's error
                        # event (not garbage and [DONE]), and the step its error.
                        msg = f"upstream {url} sent an event that is not JSON: {payload[:80]!r}"
                        fault = Fault(502, "upstream_invalid", msg)
                        return done, False, fault, b"".join([*held, *parts])
                    else:
                        try:
                            add(obj)
                            if strip and obj.__class__ is dict:
                                adapter.strip(obj, injected)
                                parts.append(encode_event(obj))
                            else:
                                parts.append(ev + b"\n\n")
                        except MALFORMED as exc:
                            msg = f"upstream {url} sent a malformed event: {exc}"
                            fault = Fault(502, "upstream_invalid", msg)
                            return done, False, fault, b"".join([*held, *parts])
                if first:
                    first = False
                    try:
                        await out.write(b"".join(parts))
                    except WRITE_ERRORS:
                        return done, True, None, b""
                    parts = []
            if done:
                # Read on to the end of the body (its last chunk), so the upstream
                # connection can serve another call; what came with [DONE] waits.
                held += parts
            elif parts:
                try:
                    await out.write(parts[0] if len(parts) == 1 else b"".join(parts))
                except WRITE_ERRORS:
                    return done, True, None, b""
    except SSEError as exc:
        fault = Fault(502, "upstream_invalid", f"upstream {url}: {exc}")
        return done, False, fault, b"".join(held)
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        return done, False, classify(exc, url), b"".join(held)
    if done and asm.error is None and not asm.chunks:  # [DONE] after nothing of the protocol's
        msg = f"upstream {url} sent [DONE] without any chat event before it"
        return done, False, Fault(502, "upstream_invalid", msg), b"".join(held)
    if not done and asm.error is None:
        return (
            done,
            False,
            Fault(502, "upstream_disconnected", f"upstream {url} ended the stream before [DONE]"),
            b"",
        )
    return done, False, None, b"".join(held)


async def _finish_stream(
    st: State,
    call: Call,
    out: web.StreamResponse,
    asm: StreamAssembler,
    done: bool,
    cancelled: bool,
    fault: Fault | None,
    prompt_key: bytes | None,
    held: bytes = b"",
) -> web.StreamResponse:
    assert st.recorder is not None
    body = asm.result()
    if cancelled:
        await st.recorder.steps(call.trajectory, cancelled_steps(call, body))
        return out
    if fault is not None or asm.error is not None:
        if fault is None:
            err = asm.error or {}
            fault = Fault(
                err.get("code") if isinstance(err.get("code"), int) else 502,
                "upstream_stream_error",
                str(err.get("message") or err)[:4000],
            )
            tail = b""
        else:
            error = {"message": fault.message, "type": "upstream_error", "code": fault.status}
            tail = encode_event({"error": error})
        try:
            await out.write_eof(held + tail)
        except WRITE_ERRORS:
            pass
        await record_fault(st, call, fault, partial=body)
        return out
    # [DONE] waits only for the continuation points the agent's next call needs (and, in
    # strict mode, for the step to be durable); batched records are built after it left.
    replies = add_reply_continuations(st, call, prompt_key, body)
    tail = b"data: [DONE]\n\n"
    recs = None
    gone = False
    if st.recorder.strict:
        if held:  # the answer's events go now, as a longer stream's would have: only [DONE]
            try:  # waits for the disk (a whole-read stream's first token must not)
                await out.write(held)
            except WRITE_ERRORS:
                gone = True
            held = b""
        recs = ok_steps(call, body, replies)
        try:
            await st.recorder.steps(call.trajectory, recs)
        except RecordFailed as exc:
            st.registry.retract(call.trajectory)
            error = {
                "message": f"the step could not be recorded durably: {exc}",
                "type": "service_unavailable",
                "code": 503,
            }
            tail = encode_event({"error": error})
    if not gone:
        try:
            await out.write_eof(held + tail)  # one write: the held events, [DONE], the body's end
        except WRITE_ERRORS:
            gone = True
    if recs is None:
        recs = ok_steps(call, body, replies)
        if gone:
            mark_left(recs, "[DONE]")
        await st.recorder.steps(call.trajectory, recs)
    return out
