"""Fake upstreams speaking Anthropic Messages and OpenAI Responses natively (for pass-through tests).

Written by hand from the protocols' documented shapes, independently of the
proxy's translators. Each asks for its tool while the last user turn is a
question, and answers in text once the tool's result is in. The Responses fake
stores responses, so ``previous_response_id`` works against it as against OpenAI.
"""

from __future__ import annotations

import itertools
from typing import Any

import orjson
from aiohttp import web

_ids = itertools.count(1)


def _event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: ".encode() + orjson.dumps(data) + b"\n\n"


class FakeAnthropic:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []

    def _answer(self, body: dict[str, Any]) -> dict[str, Any]:
        last = body["messages"][-1]
        content = last["content"]
        has_result = isinstance(content, list) and any(
            b.get("type") == "tool_result" for b in content
        )
        n = next(_ids)
        if body.get("tools") and not has_result:
            tool = body["tools"][0]
            blocks = [
                {"type": "text", "text": "Let me check."},
                {
                    "type": "tool_use",
                    "id": f"toolu_{n}",
                    "name": tool["name"],
                    "input": {"city": "Paris"},
                },
            ]
            stop = "tool_use"
        else:
            blocks = [{"type": "text", "text": f"Done after {len(body['messages'])} messages."}]
            stop = "end_turn"
        return {
            "id": f"msg_fake{n}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": blocks,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 11, "output_tokens": 7, "cache_read_input_tokens": 2},
        }

    async def models(self, request: web.Request) -> web.Response:
        self.headers.append({k.lower(): v for k, v in request.headers.items()})
        model = {"type": "model", "id": "claude-x", "display_name": "X", "created_at": "2026"}
        return web.json_response(
            {"data": [model], "has_more": False, "first_id": "claude-x", "last_id": "claude-x"}
        )

    async def count_tokens(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append({**body, "_query": request.query_string})
        self.headers.append({k.lower(): v for k, v in request.headers.items()})
        return web.json_response({"input_tokens": 7 * len(body["messages"])})

    async def messages(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self.headers.append({k.lower(): v for k, v in request.headers.items()})
        if body["model"] == "fail-500":
            err = {"type": "error", "error": {"type": "api_error", "message": "engine exploded"}}
            return web.json_response(err, status=500)
        msg = self._answer(body)
        if not body.get("stream"):
            return web.json_response(msg)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        start = {
            **msg,
            "content": [],
            "stop_reason": None,
            "usage": {"input_tokens": 11, "output_tokens": 1, "cache_read_input_tokens": 2},
        }
        await resp.write(_event("message_start", {"type": "message_start", "message": start}))
        await resp.write(_event("ping", {"type": "ping"}))
        for i, b in enumerate(msg["content"]):
            empty = {**b, "text": ""} if b["type"] == "text" else {**b, "input": {}}
            await resp.write(
                _event(
                    "content_block_start",
                    {"type": "content_block_start", "index": i, "content_block": empty},
                )
            )
            if b["type"] == "text":
                for k in range(0, len(b["text"]), 5):
                    delta = {"type": "text_delta", "text": b["text"][k : k + 5]}
                    await resp.write(
                        _event(
                            "content_block_delta",
                            {"type": "content_block_delta", "index": i, "delta": delta},
                        )
                    )
            else:
                js = orjson.dumps(b["input"]).decode()
                for k in range(0, len(js), 6):
                    delta = {"type": "input_json_delta", "partial_json": js[k : k + 6]}
                    await resp.write(
                        _event(
                            "content_block_delta",
                            {"type": "content_block_delta", "index": i, "delta": delta},
                        )
                    )
            await resp.write(
                _event("content_block_stop", {"type": "content_block_stop", "index": i})
            )
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": None},
        }
        await resp.write(_event("message_delta", {**delta, "usage": {"output_tokens": 7}}))
        await resp.write(_event("message_stop", {"type": "message_stop"}))
        await resp.write_eof()
        return resp


class FakeResponses:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.stored: dict[str, list[dict[str, Any]]] = {}  # response id -> full item history

    def _answer(self, body: dict[str, Any]) -> dict[str, Any]:
        inp = body["input"]
        items = (
            [{"type": "message", "role": "user", "content": inp}] if isinstance(inp, str) else inp
        )
        prev = body.get("previous_response_id")
        if prev is not None and prev not in self.stored:
            raise KeyError(prev)
        history = (self.stored.get(prev) or []) + items
        n = next(_ids)
        if body.get("tools") and items[-1].get("type") != "function_call_output":
            output = [
                {
                    "id": f"fc_{n}",
                    "type": "function_call",
                    "call_id": f"call_{n}",
                    "name": body["tools"][0]["name"],
                    "arguments": '{"city":"Paris"}',
                    "status": "completed",
                }
            ]
        else:
            text = f"Done after {len(history)} items."
            output = [
                {
                    "id": f"msg_{n}",
                    "type": "message",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}],
                }
            ]
        rid = f"resp_fake{n}"
        self.stored[rid] = history + output
        return {
            "id": rid,
            "object": "response",
            "created_at": 1700000000,
            "status": "completed",
            "model": body["model"],
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools", []),
            "previous_response_id": prev,
            "usage": {
                "input_tokens": 20,
                "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                "output_tokens": 9,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 29,
            },
        }

    async def responses(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        try:
            r = self._answer(body)
        except KeyError as exc:
            err = {
                "message": f"Previous response with id '{exc.args[0]}' not found.",
                "type": "invalid_request_error",
            }
            return web.json_response(
                {"error": {**err, "param": "previous_response_id", "code": None}}, status=400
            )
        if not body.get("stream"):
            return web.json_response(r)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        seq = itertools.count()

        async def send(kind: str, **fields: Any) -> None:
            await resp.write(_event(kind, {"type": kind, "sequence_number": next(seq), **fields}))

        start = {**r, "status": "in_progress", "output": [], "usage": None}
        await send("response.created", response=start)
        for i, item in enumerate(r["output"]):
            if item["type"] == "message":
                await send(
                    "response.output_item.added",
                    output_index=i,
                    item={**item, "content": [], "status": "in_progress"},
                )
                part = {"type": "output_text", "text": "", "annotations": []}
                await send(
                    "response.content_part.added",
                    item_id=item["id"],
                    output_index=i,
                    content_index=0,
                    part=part,
                )
                text = item["content"][0]["text"]
                for k in range(0, len(text), 4):
                    await send(
                        "response.output_text.delta",
                        item_id=item["id"],
                        output_index=i,
                        content_index=0,
                        delta=text[k : k + 4],
                        logprobs=[],
                    )
                await send(
                    "response.output_text.done",
                    item_id=item["id"],
                    output_index=i,
                    content_index=0,
                    text=text,
                    logprobs=[],
                )
                await send(
                    "response.content_part.done",
                    item_id=item["id"],
                    output_index=i,
                    content_index=0,
                    part={**part, "text": text},
                )
            else:
                await send(
                    "response.output_item.added",
                    output_index=i,
                    item={**item, "arguments": "", "status": "in_progress"},
                )
                await send(
                    "response.function_call_arguments.delta",
                    item_id=item["id"],
                    output_index=i,
                    delta=item["arguments"],
                )
                await send(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=i,
                    arguments=item["arguments"],
                )
            await send("response.output_item.done", output_index=i, item=item)
        await send("response.completed", response=r)
        await resp.write_eof()
        return resp


def make_fake_protocols_app(anthropic: FakeAnthropic, responses: FakeResponses) -> web.Application:
    app = web.Application()
    app.router.add_post("/v1/messages", anthropic.messages)
    app.router.add_post("/v1/messages/count_tokens", anthropic.count_tokens)
    app.router.add_get("/v1/models", anthropic.models)
    app.router.add_post("/v1/responses", responses.responses)
    return app
