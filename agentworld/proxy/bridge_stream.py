"""Streamed Anthropic / Responses calls: chat chunks translated event by event, or the protocol's
own events forwarded as they come; the closing event waits until the step is recorded."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from agentworld.proxy import upstream_json
from agentworld.proxy.adapters.openai import CHAT
from agentworld.proxy.bridge_calls import (
    Ctx,
    answer,
    answer_fault,
    cancelled_step,
    deliver,
    error_event,
    record_fault,
    upstream_refused,
)
from agentworld.proxy.calls import WRITE_ERRORS, open_upstream, stamp
from agentworld.proxy.sse import MALFORMED, EventSplitter, SSEError, StreamAssembler, event_data
from agentworld.proxy.translate.chat_form import chat_usage, name_calls
from agentworld.proxy.translate.context_window import clamped, retry_within_window
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
    ctx: Ctx,
    url: str,
    up: Any,
    headers: Any,
    out_headers: dict[str, str],
) -> web.StreamResponse:
    out = await _stream_once(request, ctx, url, up, headers, out_headers)
    if out is None:  # max_tokens was cut to the context window's room: ask again (once)
        out = await _stream_once(request, ctx, url, up, headers, out_headers)
    assert out is not None, "max_tokens is cut once a call"
    return out


async def _stream_once(
    request: web.Request,
    ctx: Ctx,
    url: str,
    up: Any,
    headers: Any,
    out_headers: dict[str, str],
) -> web.StreamResponse | None:
    """One upstream request and its answer; None when it should be asked again."""
    st, call, adapter = ctx.st, ctx.call, ctx.adapter
    assert st.upstream is not None and st.recorder is not None
    t_up = time.perf_counter()
    try:
        resp = await open_upstream(st, call, url, up, headers)
        url = resp.url  # another of the agent's URLs, when its own was down
    except asyncio.CancelledError:
        st.recorder.later(call.trajectory, cancelled_step(ctx))
        raise
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        return await answer_fault(ctx, classify(exc, url), out_headers)
    asm: Any = StreamAssembler(chat=True) if ctx.translate else adapter.assembler()
    tr = (
        adapter.translator(ctx.body, ctx.rid, clamped(call), ctx.history) if ctx.translate else None
    )
    try:
        stamp(st, call, resp.headers)
        out_headers.update(call.relay)
        ctype = resp.headers.get("Content-Type", "")
        if resp.status != 200:  # the upstream's error
            try:
                raw = await read_limited(resp, st.config.max_response_bytes)
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                return await answer_fault(ctx, classify(exc, url), out_headers)
            message = upstream_error_message(raw)
            if (
                resp.status == 400
                and ctx.translate
                and retry_within_window(call, ctx.request_record, message)
            ):
                return None
            fault = Fault(resp.status, "upstream_status", message)
            await record_fault(ctx, fault)
            if ctx.translate:
                return upstream_refused(ctx, fault.status, fault.message)
            return web.Response(
                status=resp.status,
                body=raw,
                headers={"Content-Type": ctype or "application/json", **out_headers},
            )
        if not ctype.startswith("text/event-stream"):  # unread: the connection is closed
            return await answer_fault(ctx, not_a_stream(url, ctype), out_headers)
        out = web.StreamResponse(
            status=200,
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                **out_headers,
            },
        )
        if resp.buffered(b"\n\n"):
            # The first event came with the upstream's headers: ours go out with what it
            # becomes, in one write (``_pump`` sends them alone if it becomes nothing).
            out._send_headers_immediately = False  # type: ignore[attr-defined]
        try:
            await out.prepare(request)
        except WRITE_ERRORS:
            await st.recorder.steps(call.trajectory, cancelled_step(ctx))
            return out
        held, final, cancelled, fault = await _pump(resp, out, ctx, asm, tr, url)
        call.upstream_s = time.perf_counter() - t_up
        return await _finish(ctx, out, asm, tr, held, final, cancelled, fault)
    except asyncio.CancelledError:
        st.recorder.later(call.trajectory, cancelled_step(ctx, asm.result()))
        raise
    finally:
        resp.release()  # back to the pool when the body was read to its end, else closed


async def _pump(
    resp: UpstreamResponse,
    out: web.StreamResponse,
    ctx: Ctx,
    asm: Any,
    tr: Any,
    url: str,
) -> tuple[bytes, bytes, bool, Fault | None]:
    """Forward (or translate) events as they arrive; hold back the end until the step is recorded.

    Returns (held, final event, agent gone, fault): ``held`` is what came with the
    end of the stream ([DONE] or the protocol's final event), which ``_finish``
    sends in one write with the closing events once the step is recorded; a
    stream read whole in one read thus reaches the agent in one write.
    """
    call = ctx.call
    splitter = EventSplitter()
    done = False
    held: list[bytes] = []  # what came with the end (the final event is kept apart)
    final = b""
    first = True
    final_events = ctx.adapter.final_events
    try:
        async for data in resp.content.iter_any():
            if call.first_token_s is None:
                call.first_token_s = time.perf_counter() - call.t0
            parts: list[bytes] = []
            for ev in splitter.split(data):
                payload = event_data(ev)
                if payload is None:
                    if tr is None:
                        parts.append(ev + b"\n\n")
                    continue
                if tr is not None and payload.strip() == b"[DONE]":
                    done = True  # the protocol's own closing events follow the record
                    continue
                try:
                    obj = upstream_json.loads(payload)
                except orjson.JSONDecodeError:
                    if tr is None:
                        parts.append(ev + b"\n\n")
                    continue
                try:
                    asm.add(obj)
                    if not isinstance(obj, dict):
                        continue
                    if tr is not None:
                        if "error" not in obj or "choices" in obj:
                            parts += tr.feed(obj)
                        continue
                    if isinstance(obj.get("sequence_number"), int):
                        ctx.seq = obj["sequence_number"]
                    is_final = obj.get("type") in final_events
                except MALFORMED as exc:
                    fault = Fault(
                        502, "upstream_invalid", f"upstream {url} sent a malformed event: {exc}"
                    )
                    return b"".join([*held, *parts]), final, False, fault
                if is_final:
                    done = True
                    # Released once the step is registered (and durable, if strict).
                    final = ev + b"\n\n"
                else:
                    parts.append(ev + b"\n\n")
            if done:
                held += parts  # goes with the closing events
            elif parts or first:  # the first read sends the headers even if it made no event
                try:
                    await out.write(b"".join(parts))
                except WRITE_ERRORS:
                    return b"", b"", True, None
            first = False
    except SSEError as exc:
        fault = Fault(502, "upstream_invalid", f"upstream {url}: {exc}")
        return b"".join(held), final, False, fault
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        return b"".join(held), final, False, classify(exc, url)
    if not done and asm.error is None:
        fault = Fault(502, "upstream_disconnected", f"upstream {url} ended the stream early")
        return b"".join(held), final, False, fault
    return b"".join(held), final, False, None


async def _finish(
    ctx: Ctx,
    out: web.StreamResponse,
    asm: Any,
    tr: Any,
    held: bytes,
    final: bytes,
    cancelled: bool,
    fault: Fault | None,
) -> web.StreamResponse:
    """Record the step; send ``held`` and the closing events (or an error) in one write."""
    st = ctx.st
    assert st.recorder is not None
    try:
        partial = asm.result()
    except MALFORMED as exc:  # events that each passed, together of the wrong shape
        partial = None
        if fault is None:
            fault = Fault(502, "upstream_invalid", f"the upstream's answer is malformed: {exc}")
    if cancelled:
        await st.recorder.steps(ctx.call.trajectory, cancelled_step(ctx, partial))
        return out
    notify = (
        fault is not None or tr is not None
    )  # a pass-through error event already reached the agent
    if fault is None and asm.error is not None:
        err = asm.error
        code = err.get("code")
        fault = Fault(
            code if isinstance(code, int) else 502,
            "upstream_stream_error",
            str(err.get("message") or err)[:4000],
        )
    recs: list[dict[str, Any]] = []
    if fault is None:
        try:
            if tr is not None:
                name_calls(partial, ctx.adapter.call_prefix, tr.call_ids())
                got = CHAT.choices(partial)
                if not got:
                    raise ValueError("the stream has no choices")
                tokens = got[0][2]
                counts = chat_usage(partial, tokens)
                tail = held + b"".join(tr.finish(*counts))
                proto = ctx.adapter.streamed(tr, partial, ctx.body, tokens, counts)
                recs, _ = answer(ctx, partial, proto)
            elif partial is None:
                raise ValueError("the stream never started a message")
            else:
                tail = held + final
                recs, _ = answer(ctx, partial)
        except MALFORMED as exc:
            fault = Fault(502, "upstream_invalid", f"unreadable stream: {exc}")
    if fault is not None:
        try:
            error = error_event(ctx, tr, fault.status, fault.message) if notify else b""
            await out.write_eof(held + error)
        except WRITE_ERRORS:
            pass
        await record_fault(ctx, fault, partial)
        return out

    async def send() -> None:
        await out.write_eof(tail)

    async def fail(message: str) -> None:
        try:
            await out.write_eof(held + error_event(ctx, tr, 503, message))
        except WRITE_ERRORS:
            pass

    await deliver(ctx, recs, send, fail)
    return out
