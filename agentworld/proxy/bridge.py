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
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from agentworld import records
from agentworld.proxy.app import (
    STATE,
    State,
    agent_for,
    get_trajectory,
    identify,
    read_json,
    upstream_of,
)
from agentworld.proxy.chat_form import chat_usage
from agentworld.proxy.forward import (
    _WRITE_ERRORS,
    _continue,
    _stamp,
    _thread,
    _upstream_error_message,
)
from agentworld.proxy.protocol_adapters import (
    MESSAGES,
    PASSTHROUGH,
    RESPONSES,
    TRANSLATE,
    ProtocolAdapter,
)
from agentworld.proxy.protocols import CHAT, BadRequest, Injected
from agentworld.proxy.recorder import Call, RecordFailed
from agentworld.proxy.response_chains import ResponseChains
from agentworld.proxy.sse import EventSplitter, SSEError, StreamAssembler, event_data
from agentworld.proxy.upstream import (
    Fault,
    classify,
    read_limited,
    timeout_for,
    upstream_headers,
)

CHAINS: web.AppKey[ResponseChains] = web.AppKey("agentworld_response_chains", ResponseChains)


@dataclass
class Ctx:
    """One call in flight: what the agent asked, where it went, and what to record."""

    st: State
    chains: ResponseChains
    adapter: ProtocolAdapter
    call: Call
    body: dict[str, Any]
    mode: str
    rid: str  # the protocol object id a translated answer gets
    prompt_key: bytes | None
    request_record: dict[str, Any]
    seq: int = 0  # last Responses sequence_number seen (pass-through error events continue it)

    @property
    def translate(self) -> bool:
        return self.mode == TRANSLATE


def _error(
    adapter: ProtocolAdapter, status: int, message: str, param: str | None = None
) -> web.Response:
    return web.Response(
        status=status,
        body=adapter.error_body(status, message, param),
        content_type="application/json",
    )


def add_routes(app: web.Application, prefix: str) -> None:
    """Register ``/v1/messages`` and ``/v1/responses`` under one route prefix."""
    if CHAINS not in app:
        app[CHAINS] = ResponseChains()

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
        body = await read_json(request, st.config.max_body_bytes)
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
            adapter.to_chat(body, messages, engine=up.engine, model=up.model)
            if mode == TRANSLATE
            else None
        )
        prompt_key = None
        if t is None:
            t, prompt_key = _thread(st, ident, agent, messages)
    except BadRequest as exc:
        st.stats.error("bad_request")
        st.stats.request(adapter.protocol, exc.status)
        return _error(adapter, exc.status, exc.message, exc.param)

    slot = st.registry.pick_slot(t, len(up.urls))
    base = up.urls[slot]
    index = t.next_index
    t.next_index += 1
    t.inflight += 1
    t.last_active = time.monotonic()
    metadata.update({"upstream": base, "protocol_mode": mode})
    if t.threaded:
        metadata["threading"] = "auto"
    if up.model is not None and body.get("model") not in (None, up.model):
        metadata["requested_model"] = body.get("model")
    request_record: dict[str, Any] = {"messages": messages, "params": adapter.params(body)}
    if chat is not None:
        sent, injected = CHAT.prepare(chat, up)
        url = base + CHAT.path
        request_record["params"]["chat"] = {
            k: v for k, v in sent.items() if k not in ("model", "messages", "tools")
        }
    else:
        sent, injected = dict(body), Injected()
        if up.model is not None:
            sent["model"] = up.model
        url = base + adapter.path
    if isinstance(sent.get("model"), str):
        request_record["model"] = sent["model"]
    tools = adapter.record_tools(body)
    if tools:
        request_record["tools"] = tools
    call = Call(
        trajectory=t,
        index=index,
        adapter=adapter,  # type: ignore[arg-type]
        sent=sent,
        injected=injected,
        policy_version=st.policy_version,
        started_at=started_at,
        t0=t0,
        metadata=metadata,
        messages=messages,
    )
    ctx = Ctx(st, chains, adapter, call, body, mode, adapter.new_id(), prompt_key, request_record)
    headers = upstream_headers(
        request.headers,
        api_key,
        forward_client_auth=not st.config.auth_token,
        extra={
            "Content-Type": "application/json",
            "Accept-Encoding": "identity",
            "X-AW-Trajectory": t.id,
        },
    )
    if adapter is MESSAGES and mode == PASSTHROUGH and api_key is not None:
        del headers["Authorization"]  # Anthropic's API takes its key as x-api-key
        headers["x-api-key"] = api_key
    out_headers = {"X-AW-Trajectory": t.id, "X-AW-Step": str(index)}
    try:
        if body.get("stream") is True:
            resp = await _stream(request, ctx, url, up, headers, out_headers)
        else:
            resp = await _unary(request, ctx, url, up, headers, out_headers)
    finally:
        t.inflight -= 1
        t.last_active = time.monotonic()
    st.stats.request(adapter.protocol, resp.status)
    return resp


# -- records ----------------------------------------------------------------------------------


def _step(
    ctx: Ctx,
    *,
    status: str = "ok",
    response: dict[str, Any] | None = None,
    tokens: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
    raw_response: Any = None,
) -> dict[str, Any]:
    call = ctx.call
    return records.make_step(
        **call.trajectory.common(),
        index=call.index,
        protocol=ctx.adapter.protocol,
        policy_version=call.policy_version,
        timings=call.timings(),
        metadata=call.metadata or None,
        request=ctx.request_record,
        response=response,
        tokens=tokens,
        status=status,
        error=error,
        raw={"request": ctx.body, "response": raw_response},
    )


def _partial(ctx: Ctx, partial: Any) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(response, tokens) for what arrived before a failure, if anything did."""
    if not isinstance(partial, dict):
        return None, None
    if ctx.translate:
        got = CHAT.choices(partial)
        return (got[0][1], got[0][2]) if got else (None, None)
    return ctx.adapter.response_record(partial), None


def _failed(
    ctx: Ctx, status: str, error: dict[str, Any], partial: Any = None
) -> list[dict[str, Any]]:
    response, tokens = _partial(ctx, partial)
    return [_step(ctx, status=status, response=response, tokens=tokens, error=error)]


def _cancelled(ctx: Ctx, partial: Any = None) -> list[dict[str, Any]]:
    error = {"type": "client_disconnected", "message": "the agent disconnected mid-call"}
    return _failed(ctx, "cancelled", error, partial)


async def _record_fault(ctx: Ctx, fault: Fault, partial: Any = None) -> None:
    ctx.st.stats.error("upstream")
    error = {"type": fault.type, "message": fault.message, "status": fault.status}
    try:
        await ctx.st.recorder.steps(ctx.call.trajectory, _failed(ctx, "error", error, partial))  # type: ignore[union-attr]
    except RecordFailed:
        pass  # the agent already gets an error; the failure is counted and logged


def _answer(ctx: Ctx, obj: dict[str, Any], proto: Any = None) -> tuple[list[dict[str, Any]], Any]:
    """The ok step for an upstream answer, and the protocol object the agent gets."""
    if ctx.translate:
        got = CHAT.choices(obj)
        if not got:
            raise ValueError("the chat answer has no choices")
        _, response, tokens = got[0]
        if proto is None:
            proto = ctx.adapter.from_chat(obj, ctx.body, ctx.rid, tokens)
        if isinstance(obj.get("id"), str):
            ctx.call.metadata["upstream_id"] = obj["id"]
    else:
        proto = obj
        response, tokens = ctx.adapter.response_record(obj), None
    if isinstance(proto, dict) and isinstance(proto.get("id"), str):
        response["id"] = proto["id"]
    rec = _step(ctx, response=response, tokens=tokens, raw_response=proto)
    ctx.adapter.remember(ctx.chains, ctx.call.trajectory.id, ctx.body, proto)
    _continue(ctx.st, ctx.call, ctx.prompt_key, [rec])
    return [rec], proto


def _error_event(ctx: Ctx, tr: Any, status: int, message: str) -> bytes:
    seq = tr.seq if hasattr(tr, "seq") else ctx.seq + 1
    return ctx.adapter.error_event(status, message, seq)


async def _deliver(ctx: Ctx, recs: list[dict[str, Any]], send: Any, on_fail: Any) -> None:
    """Record and send in the order the durability mode promises (strict: record first)."""
    st = ctx.st
    assert st.recorder is not None
    if st.recorder.strict:
        try:
            await st.recorder.steps(ctx.call.trajectory, recs)
        except RecordFailed as exc:
            await on_fail(f"the step could not be recorded durably: {exc}")
            return
    try:
        await send()
    except _WRITE_ERRORS:
        for r in recs:
            r["status"] = "cancelled"
            r["error"] = {
                "type": "client_disconnected",
                "message": "the agent left before the answer",
            }
    if not st.recorder.strict:
        await st.recorder.steps(ctx.call.trajectory, recs)


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
    assert st.session is not None and st.recorder is not None
    t_up = time.perf_counter()
    try:
        async with st.session.post(
            url, data=orjson.dumps(call.sent), headers=headers, timeout=timeout_for(up)
        ) as resp:
            raw = await read_limited(resp, st.config.max_response_bytes)
            status, ctype = resp.status, resp.headers.get("Content-Type", "application/json")
            _stamp(st, call, resp.headers)
    except asyncio.CancelledError:
        st.recorder.later(call.trajectory, _cancelled(ctx))
        raise
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        fault = classify(exc, url)
        await _record_fault(ctx, fault)
        return _error(adapter, fault.status, fault.message)
    call.upstream_s = call.first_token_s = time.perf_counter() - t_up
    if status != 200:
        fault = Fault(status, "upstream_status", _upstream_error_message(raw))
        await _record_fault(ctx, fault)
        if ctx.translate:
            return _error(adapter, status, fault.message)
        return web.Response(status=status, body=raw, headers={"Content-Type": ctype, **out_headers})
    try:
        obj = orjson.loads(raw)
        if not isinstance(obj, dict):
            raise ValueError("not a JSON object")
        recs, proto = _answer(ctx, obj)
    except ValueError as exc:
        fault = Fault(502, "upstream_invalid", f"upstream {url} sent an unreadable answer: {exc}")
        await _record_fault(ctx, fault)
        return _error(adapter, 502, fault.message)
    data = orjson.dumps(proto) if ctx.translate else raw
    out_headers["Content-Type"] = "application/json" if ctx.translate else ctype
    out: web.StreamResponse = web.Response(body=data, headers=out_headers)

    async def send() -> None:
        await out.prepare(request)
        await out.write_eof()

    async def fail(message: str) -> None:
        nonlocal out
        out = _error(adapter, 503, message)

    await _deliver(ctx, recs, send, fail)
    return out


# -- streams ----------------------------------------------------------------------------------


async def _stream(
    request: web.Request,
    ctx: Ctx,
    url: str,
    up: Any,
    headers: Any,
    out_headers: dict[str, str],
) -> web.StreamResponse:
    st, call, adapter = ctx.st, ctx.call, ctx.adapter
    assert st.session is not None and st.recorder is not None
    t_up = time.perf_counter()
    try:
        resp = await st.session.post(
            url, data=orjson.dumps(call.sent), headers=headers, timeout=timeout_for(up)
        )
    except asyncio.CancelledError:
        st.recorder.later(call.trajectory, _cancelled(ctx))
        raise
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        fault = classify(exc, url)
        await _record_fault(ctx, fault)
        return _error(adapter, fault.status, fault.message)
    asm: Any = StreamAssembler(chat=True) if ctx.translate else adapter.assembler()
    tr = adapter.translator(ctx.body, ctx.rid) if ctx.translate else None
    try:
        _stamp(st, call, resp.headers)
        ctype = resp.headers.get("Content-Type", "")
        if resp.status != 200 or not ctype.startswith("text/event-stream"):
            try:
                raw = await read_limited(resp, st.config.max_response_bytes)
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                fault = classify(exc, url)
                await _record_fault(ctx, fault)
                return _error(adapter, fault.status, fault.message)
            ok = resp.status == 200
            fault = Fault(
                502 if ok else resp.status,
                "upstream_status",
                "the upstream answered without an event stream"
                if ok
                else _upstream_error_message(raw),
            )
            await _record_fault(ctx, fault)
            if ctx.translate or ok:
                return _error(adapter, fault.status, fault.message)
            return web.Response(
                status=resp.status,
                body=raw,
                headers={"Content-Type": ctype or "application/json", **out_headers},
            )
        out = web.StreamResponse(
            status=200,
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                **out_headers,
            },
        )
        try:
            await out.prepare(request)
        except _WRITE_ERRORS:
            await st.recorder.steps(call.trajectory, _cancelled(ctx))
            return out
        held, cancelled, fault = await _pump(resp, out, ctx, asm, tr, url)
        call.upstream_s = time.perf_counter() - t_up
        return await _finish(ctx, out, asm, tr, held, cancelled, fault)
    except asyncio.CancelledError:
        st.recorder.later(call.trajectory, _cancelled(ctx, asm.result()))
        raise
    finally:
        resp.close()


async def _pump(
    resp: aiohttp.ClientResponse,
    out: web.StreamResponse,
    ctx: Ctx,
    asm: Any,
    tr: Any,
    url: str,
) -> tuple[bytes, bool, Fault | None]:
    """Forward (or translate) events as they arrive; hold back the end until the step is recorded.

    Returns (held-back final event, agent gone, fault).
    """
    call = ctx.call
    splitter = EventSplitter()
    done = False
    held = b""
    final_events = ctx.adapter.final_events
    try:
        async for data in resp.content.iter_any():
            if call.first_token_s is None:
                call.first_token_s = time.perf_counter() - call.t0
            parts: list[bytes] = []
            for ev in splitter.feed(data):
                payload = event_data(ev)
                if payload is None:
                    if tr is None:
                        parts.append(ev + b"\n\n")
                    continue
                if tr is not None and payload.strip() == b"[DONE]":
                    done = True  # the protocol's own closing events follow the record
                    continue
                try:
                    obj = orjson.loads(payload)
                except orjson.JSONDecodeError:
                    if tr is None:
                        parts.append(ev + b"\n\n")
                    continue
                asm.add(obj)
                if not isinstance(obj, dict):
                    continue
                if tr is not None:
                    if "error" not in obj or "choices" in obj:
                        parts += tr.feed(obj)
                    continue
                if isinstance(obj.get("sequence_number"), int):
                    ctx.seq = obj["sequence_number"]
                if obj.get("type") in final_events:
                    done = True
                    held = ev + b"\n\n"  # released once the step is registered (durable, if strict)
                else:
                    parts.append(ev + b"\n\n")
            if parts:
                try:
                    await out.write(b"".join(parts))
                except _WRITE_ERRORS:
                    return held, True, None
    except SSEError as exc:
        return held, False, Fault(502, "upstream_invalid", f"upstream {url}: {exc}")
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        return held, False, classify(exc, url)
    if not done and asm.error is None:
        return (
            held,
            False,
            Fault(502, "upstream_disconnected", f"upstream {url} ended the stream early"),
        )
    return held, False, None


async def _finish(
    ctx: Ctx,
    out: web.StreamResponse,
    asm: Any,
    tr: Any,
    held: bytes,
    cancelled: bool,
    fault: Fault | None,
) -> web.StreamResponse:
    st = ctx.st
    assert st.recorder is not None
    partial = asm.result()
    if cancelled:
        await st.recorder.steps(ctx.call.trajectory, _cancelled(ctx, partial))
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
                got = CHAT.choices(partial)
                if not got:
                    raise ValueError("the stream has no choices")
                tokens = got[0][2]
                counts = chat_usage(partial, tokens)
                tail = b"".join(tr.finish(*counts))
                proto = ctx.adapter.streamed(tr, partial, ctx.body, tokens, counts)
                recs, _ = _answer(ctx, partial, proto)
            elif partial is None:
                raise ValueError("the stream never started a message")
            else:
                tail = held
                recs, _ = _answer(ctx, partial)
        except ValueError as exc:
            fault = Fault(502, "upstream_invalid", f"unreadable stream: {exc}")
    if fault is not None:
        if notify:
            try:
                await out.write(_error_event(ctx, tr, fault.status, fault.message))
            except _WRITE_ERRORS:
                pass
        await _record_fault(ctx, fault, partial)
        try:
            await out.write_eof()
        except _WRITE_ERRORS:
            pass
        return out

    async def send() -> None:
        await out.write(tail)
        await out.write_eof()

    async def fail(message: str) -> None:
        try:
            await out.write(_error_event(ctx, tr, 503, message))
            await out.write_eof()
        except _WRITE_ERRORS:
            pass

    await _deliver(ctx, recs, send, fail)
    return out
