"""Forwarding generation calls upstream and recording them: unary JSON, SSE streams, pass-through.

What the agent receives is what the upstream sent (status, body shape, SSE
framing), minus the token-id and log-prob fields the proxy asked for on its
own. Chunks are forwarded as they arrive; the step is recorded after the
response (batched durability) or before its last byte (strict).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from agentworld.proxy.app import (
    STATE,
    BadRequest,
    State,
    agent_for,
    bad_request,
    error_response,
    get_trajectory,
    identify,
    read_json,
    upstream_of,
)
from agentworld.proxy.protocols import Adapter
from agentworld.proxy.recorder import Call, RecordFailed, failed_step, ok_steps
from agentworld.proxy.sse import EventSplitter, SSEError, StreamAssembler, encode_event, event_data
from agentworld.proxy.trajectories import Trajectory, prefix_keys
from agentworld.proxy.upstream import (
    Fault,
    classify,
    policy_from,
    read_limited,
    response_headers,
    timeout_for,
    upstream_headers,
)

_WRITE_ERRORS = (ConnectionResetError, ConnectionError)


def _upstream_error_message(raw: bytes) -> str:
    try:
        obj = orjson.loads(raw)
        err = obj.get("error") if isinstance(obj, dict) else None
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return err["message"][:4000]
        if isinstance(err, str):
            return err[:4000]
        if isinstance(obj, dict) and isinstance(obj.get("message"), str):
            return obj["message"][:4000]
    except orjson.JSONDecodeError:
        pass
    return raw[:4000].decode("utf-8", "replace") or "(empty body)"


async def generate(request: web.Request, adapter: Adapter) -> web.StreamResponse:
    """POST /v1/chat/completions and /v1/completions (under any trajectory prefix)."""
    st = request.app[STATE]
    started_at, t0 = time.time(), time.perf_counter()
    try:
        body = await read_json(request, st.config.max_body_bytes)
        adapter.check(body)
        ident = identify(request)
        messages = adapter.messages(body) if adapter.chat else None
        if ident.trajectory:
            t = get_trajectory(st, ident.trajectory)
            prompt_key = None
        else:
            agent = agent_for(st, ident, body.get("model"))
            upstream_of(st, agent)  # fail before opening a trajectory
            t, prompt_key = _thread(st, ident, agent, messages)
        up, api_key = upstream_of(st, t.agent)
    except BadRequest as exc:
        st.stats.error("bad_request")
        st.stats.request(adapter.protocol, exc.status)
        return bad_request(exc)

    slot = st.registry.pick_slot(t, len(up.urls))
    url = up.urls[slot] + adapter.path
    index = t.next_index
    t.next_index += 1
    t.inflight += 1
    t.last_active = time.monotonic()
    sent, injected = adapter.prepare(body, up)
    metadata: dict[str, Any] = {"upstream": up.urls[slot]}
    if t.threaded:
        metadata["threading"] = "auto"
    if up.model is not None and body.get("model") not in (None, up.model):
        metadata["requested_model"] = body.get("model")
    call = Call(
        trajectory=t,
        index=index,
        adapter=adapter,
        sent=sent,
        injected=injected,
        policy_version=st.policy_version,
        started_at=started_at,
        t0=t0,
        metadata=metadata,
        messages=messages,
    )
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
    out_headers = {"X-AW-Trajectory": t.id, "X-AW-Step": str(index)}
    try:
        if sent.get("stream") is True:
            resp = await _stream(request, st, call, url, up, headers, out_headers, prompt_key)
        else:
            resp = await _unary(request, st, call, url, up, headers, out_headers, prompt_key)
    finally:
        t.inflight -= 1
        t.last_active = time.monotonic()
    st.stats.request(adapter.protocol, resp.status)
    return resp


def _thread(
    st: State, ident: Any, agent: str, messages: list[dict[str, Any]] | None
) -> tuple[Trajectory, bytes | None]:
    """Join the open trajectory this conversation continues, or start one."""
    keys = prefix_keys(agent, messages) if messages is not None else None
    t = st.registry.find_thread(keys) if keys else None
    if t is not None:
        st.registry.continue_thread(t)
    else:
        t = st.registry.create(
            agent,
            group=ident.group,
            task=ident.task,
            dataset=ident.dataset,
            split=ident.split,
            threaded=messages is not None,
            policy_version=st.policy_version,
        )
    return t, keys[-1] if keys else None


def _continue(st: State, call: Call, prompt_key: bytes | None, recs: list[dict[str, Any]]) -> None:
    if prompt_key is None or not call.trajectory.threaded:
        return
    msgs = [r["response"]["message"] for r in recs if r["status"] == "ok" and r.get("response")]
    st.registry.add_continuations(call.trajectory, prompt_key, [m for m in msgs if m])


def _stamp(st: State, call: Call, headers: Any) -> None:
    pv = policy_from(headers)
    if pv is not None:
        st.set_policy(pv)
        call.policy_version = pv
    call.trajectory.policy_version = call.policy_version


async def _record_fault(st: State, call: Call, fault: Fault, partial: Any = None) -> None:
    st.stats.error("upstream")
    recs = failed_step(
        call,
        status="error",
        error={"type": fault.type, "message": fault.message, "status": fault.status},
        partial=partial,
    )
    try:
        await st.recorder.steps(call.trajectory, recs)  # type: ignore[union-attr]
    except RecordFailed:
        pass  # the agent already gets an error; the failure is counted and logged


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
        st.recorder.later(call.trajectory, _cancelled(call))
        raise
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        fault = classify(exc, url)
        await _record_fault(st, call, fault)
        return error_response(fault.status, fault.message, "upstream_error", code=fault.status)
    call.upstream_s = call.first_token_s = time.perf_counter() - t_up
    if status != 200:
        fault = Fault(status, "upstream_status", _upstream_error_message(raw))
        await _record_fault(st, call, fault)
        return web.Response(status=status, body=raw, headers={"Content-Type": ctype, **out_headers})
    try:
        obj = orjson.loads(raw)
        if not isinstance(obj, dict):
            raise ValueError("not a JSON object")
    except ValueError as exc:
        fault = Fault(
            502, "upstream_invalid", f"upstream {url} sent a body that is not a JSON object: {exc}"
        )
        await _record_fault(st, call, fault)
        return error_response(502, fault.message, "upstream_error", code=502)
    recs = ok_steps(call, obj)
    if call.injected.any:
        call.adapter.strip(obj, call.injected)
        raw = orjson.dumps(obj)
    out_headers["Content-Type"] = ctype
    _continue(st, call, prompt_key, recs)
    if st.recorder.strict:
        try:
            await st.recorder.steps(call.trajectory, recs)
        except RecordFailed as exc:
            return error_response(
                503,
                f"the step could not be recorded durably: {exc}",
                "service_unavailable",
                code=503,
            )
        return web.Response(body=raw, headers=out_headers)
    out = web.Response(body=raw, headers=out_headers)
    try:
        await out.prepare(request)
        await out.write_eof()
    except _WRITE_ERRORS:
        for r in recs:
            r["status"] = "cancelled"
            r["error"] = {
                "type": "client_disconnected",
                "message": "the agent left before the answer",
            }
    await st.recorder.steps(call.trajectory, recs)
    return out


def _cancelled(call: Call, partial: Any = None) -> list[dict[str, Any]]:
    return failed_step(
        call,
        status="cancelled",
        error={"type": "client_disconnected", "message": "the agent disconnected mid-call"},
        partial=partial,
    )


async def _stream(
    request: web.Request,
    st: State,
    call: Call,
    url: str,
    up: Any,
    headers: Any,
    out_headers: dict[str, str],
    prompt_key: bytes | None,
) -> web.StreamResponse:
    assert st.session is not None and st.recorder is not None
    t_up = time.perf_counter()
    try:
        resp = await st.session.post(
            url, data=orjson.dumps(call.sent), headers=headers, timeout=timeout_for(up)
        )
    except asyncio.CancelledError:
        st.recorder.later(call.trajectory, _cancelled(call))
        raise
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        fault = classify(exc, url)
        await _record_fault(st, call, fault)
        return error_response(fault.status, fault.message, "upstream_error", code=fault.status)
    asm = StreamAssembler(chat=call.adapter.chat)
    try:
        _stamp(st, call, resp.headers)
        ctype = resp.headers.get("Content-Type", "")
        if resp.status != 200 or not ctype.startswith("text/event-stream"):
            try:
                raw = await read_limited(resp, st.config.max_response_bytes)
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                fault = classify(exc, url)
                await _record_fault(st, call, fault)
                return error_response(
                    fault.status, fault.message, "upstream_error", code=fault.status
                )
            msg = _upstream_error_message(raw) if resp.status != 200 else "not an event stream"
            fault = Fault(resp.status if resp.status != 200 else 502, "upstream_status", msg)
            await _record_fault(st, call, fault)
            return web.Response(
                status=resp.status,
                body=raw,
                headers={"Content-Type": ctype or "application/json", **out_headers},
            )
        out = web.StreamResponse(
            status=200,
            headers={"Content-Type": ctype, "Cache-Control": "no-cache", **out_headers},
        )
        try:
            await out.prepare(request)
        except _WRITE_ERRORS:
            await st.recorder.steps(call.trajectory, _cancelled(call))
            return out
        done, cancelled, fault = await _pump(resp, out, call, asm, url)
        call.upstream_s = time.perf_counter() - t_up
        return await _finish_stream(st, call, out, asm, done, cancelled, fault, prompt_key)
    except asyncio.CancelledError:
        st.recorder.later(call.trajectory, _cancelled(call, asm.result()))
        raise
    finally:
        resp.close()


async def _pump(
    resp: aiohttp.ClientResponse,
    out: web.StreamResponse,
    call: Call,
    asm: StreamAssembler,
    url: str,
) -> tuple[bool, bool, Fault | None]:
    """Forward events as they arrive, feeding the assembler; hold back [DONE]."""
    splitter = EventSplitter()
    strip = call.injected.any
    done = False
    try:
        async for data in resp.content.iter_any():
            if call.first_token_s is None:
                call.first_token_s = time.perf_counter() - call.t0
            parts = []
            for ev in splitter.feed(data):
                payload = event_data(ev)
                if payload is None:
                    parts.append(ev + b"\n\n")
                    continue
                if payload.strip() == b"[DONE]":
                    done = True  # released after the step is registered (and durable, if strict)
                    continue
                try:
                    obj = orjson.loads(payload)
                except orjson.JSONDecodeError:
                    parts.append(ev + b"\n\n")
                    continue
                asm.add(obj)
                if strip and isinstance(obj, dict):
                    call.adapter.strip(obj, call.injected)
                    parts.append(encode_event(obj))
                else:
                    parts.append(ev + b"\n\n")
            if parts:
                try:
                    await out.write(b"".join(parts))
                except _WRITE_ERRORS:
                    return done, True, None
    except SSEError as exc:
        return done, False, Fault(502, "upstream_invalid", f"upstream {url}: {exc}")
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        return done, False, classify(exc, url)
    if not done and asm.error is None:
        return (
            done,
            False,
            Fault(502, "upstream_disconnected", f"upstream {url} ended the stream before [DONE]"),
        )
    return done, False, None


async def _finish_stream(
    st: State,
    call: Call,
    out: web.StreamResponse,
    asm: StreamAssembler,
    done: bool,
    cancelled: bool,
    fault: Fault | None,
    prompt_key: bytes | None,
) -> web.StreamResponse:
    assert st.recorder is not None
    body = asm.result()
    if cancelled:
        await st.recorder.steps(call.trajectory, _cancelled(call, body))
        return out
    if fault is not None or asm.error is not None:
        if fault is None:
            err = asm.error or {}
            fault = Fault(
                err.get("code") if isinstance(err.get("code"), int) else 502,
                "upstream_stream_error",
                str(err.get("message") or err)[:4000],
            )
        else:
            try:
                error = {"message": fault.message, "type": "upstream_error", "code": fault.status}
                await out.write(encode_event({"error": error}))
            except _WRITE_ERRORS:
                pass
        await _record_fault(st, call, fault, partial=body)
        try:
            await out.write_eof()
        except _WRITE_ERRORS:
            pass
        return out
    recs = ok_steps(call, body)
    _continue(st, call, prompt_key, recs)
    tail = b"data: [DONE]\n\n"
    if st.recorder.strict:
        try:
            await st.recorder.steps(call.trajectory, recs)
        except RecordFailed as exc:
            error = {
                "message": f"the step could not be recorded durably: {exc}",
                "type": "service_unavailable",
                "code": 503,
            }
            tail = encode_event({"error": error})
    try:
        await out.write(tail)
        await out.write_eof()
    except _WRITE_ERRORS:
        for r in recs:
            r["status"] = "cancelled"
            r["error"] = {"type": "client_disconnected", "message": "the agent left before [DONE]"}
    if not st.recorder.strict:
        await st.recorder.steps(call.trajectory, recs)
    return out


# -- unrecorded routes ---------------------------------------------------------------------


def _target(st: State, request: web.Request) -> tuple[str, str | None]:
    ident = identify(request)
    if ident.trajectory:
        t = get_trajectory(st, ident.trajectory)
        up, key = upstream_of(st, t.agent)
        return up.urls[t.slot or 0], key
    up, key = upstream_of(st, agent_for(st, ident, None))
    return up.urls[0], key


async def passthrough(request: web.Request) -> web.StreamResponse:
    """Any other /v1/* path: forwarded as is (streamed both ways), not recorded."""
    return await _pass(request, request.match_info["tail"])


async def _pass(request: web.Request, tail: str) -> web.StreamResponse:
    st = request.app[STATE]
    assert st.session is not None
    try:
        base, api_key = _target(st, request)
    except BadRequest as exc:
        return bad_request(exc)
    url = base + "/v1/" + tail
    if request.query_string:
        url += "?" + request.query_string
    headers = upstream_headers(
        request.headers, api_key, forward_client_auth=not st.config.auth_token
    )
    data = await request.read() if request.can_read_body else None
    try:
        async with st.session.request(
            request.method, url, data=data, headers=headers, allow_redirects=False
        ) as resp:
            out = web.StreamResponse(
                status=resp.status, reason=resp.reason, headers=response_headers(resp.headers)
            )
            await out.prepare(request)
            try:
                async for chunk in resp.content.iter_any():
                    await out.write(chunk)
                await out.write_eof()
            except _WRITE_ERRORS:
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
