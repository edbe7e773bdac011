"""A fake vLLM-compatible upstream for tests, benchmarks and offline demos.

It answers in vLLM's JSON and SSE shapes, including ``return_token_ids``
(``prompt_token_ids`` / ``token_ids``) and log-probs. Tokens are characters
(id = code point) of a rendered prompt, so consecutive turns of one
conversation have prompts that extend each other, as with a real chat template.
Faults are chosen by the request's ``model``: ``fail-500``, ``fail-400``,
``rate-limit``, ``hang``, ``reset``, ``break``, ``slow``, ``bad-json``, and
``no-stream`` (a whole JSON answer to a streamed call, as from an engine that
ignores ``stream``).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Any

import orjson
from aiohttp import web

MODEL = "fake-model"
MAX_MODEL_LEN = 32_768


def render(messages: list[dict[str, Any]]) -> str:
    """The fake chat template: what the prompt token ids spell."""
    out = []
    for m in messages:
        content = m.get("content") or ""
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        out.append(f"<{m.get('role')}>{content}")
        for c in m.get("tool_calls") or ():
            fn = c.get("function", {})
            out.append(f"<call>{fn.get('name')}{fn.get('arguments')}")
    return "".join(out) + "<assistant>"


def ids(text: str) -> list[int]:
    return [ord(c) for c in text]


def logprob(i: int) -> float:
    return -round(0.01 * (i % 50 + 1), 6)


_LOGPROB_ENTRIES: dict[tuple[str, int], dict[str, Any]] = {}


def logprob_entry(token: str, i: int) -> dict[str, Any]:
    """A chat ``logprobs.content`` entry (shared and never mutated: the same few recur)."""
    key = (token, i % 50)
    entry = _LOGPROB_ENTRIES.get(key)
    if entry is None:
        entry = {
            "token": token,
            "logprob": logprob(i),
            "bytes": list(token.encode()),
            "top_logprobs": [],
        }
        if len(_LOGPROB_ENTRIES) < 65536:
            _LOGPROB_ENTRIES[key] = entry
    return entry


def _named_tool(choice: Any, tools: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The tool a ``tool_choice`` names, if it names one."""
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        return next((t for t in tools if t["function"]["name"] == name), None)
    return None


def _arguments(fn: dict[str, Any], text: str, j: int) -> dict[str, Any]:
    """A call's arguments: one free-form ``input`` when that is the tool's one parameter
    (how the proxy gives custom tools to a chat model), else a small fixed object."""
    params = fn.get("parameters") or {}
    if params.get("required") == ["input"]:
        return {"input": f'*** Begin Patch\n{text[:10]} "✓"\n*** End Patch'}
    return {"q": text[:10], "j": j}


def _window_refusal(window: int, prompt: int, max_tokens: Any) -> web.Response | None:
    """vLLM's 400 for a prompt, or a prompt and ``max_tokens``, over its context window."""
    if prompt >= window:
        message = (
            f"This model's maximum context length is {window} tokens. However, your request "
            f"has {prompt} input tokens. Please reduce the length of the input messages."
        )
        param = "input_tokens"
    elif isinstance(max_tokens, int) and prompt + max_tokens > window:
        message = (
            f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's "
            f"maximum context length is {window} tokens and your request has {prompt} input "
            f"tokens ({max_tokens} > {window} - {prompt})."
        )
        param = "max_tokens"
    else:
        return None
    error = {"message": message, "type": "BadRequestError", "param": param, "code": 400}
    return web.json_response({"error": error}, status=400)


def _prompts(prompt: Any) -> list[Any]:
    """A completions ``prompt`` as the prompts it holds, each a string or token ids: a list
    of strings or of token-id lists is a batch."""
    if isinstance(prompt, str) or (prompt and isinstance(prompt[0], int)):
        return [prompt]
    return list(prompt)


def _last_turn(messages: list[dict[str, Any]]) -> Any:
    """Whose turn came last (a system message mid-conversation is an instruction, not a turn)."""
    return next((m.get("role") for m in reversed(messages) if m.get("role") != "system"), None)


class FakeUpstream:
    """State and handlers of one fake server (``name`` tells servers apart in affinity tests)."""

    def __init__(
        self,
        name: str = "fake",
        *,
        reply: str | None = None,
        policy_version: int | None = None,
        history: int | None = None,
    ) -> None:
        self.name = name
        self.reply = reply
        self.policy_version = policy_version
        # Every request's body and headers, for tests to look at; ``history`` keeps only
        # the last so many (a benchmark's millions of calls would otherwise pile up).
        self.requests: deque[dict[str, Any]] = deque(maxlen=history)
        self.headers: deque[dict[str, str]] = deque(maxlen=history)
        self.started = 0
        self.finished = 0
        self.hang_s = 30.0  # how long "hang" hangs
        self.response_headers: dict[str, str] = {}  # sent with every generation's answer
        self.overloaded = 0  # the next this many generation calls get vLLM's 503
        # When set, requests are checked against this context window as vLLM checks them
        # (a 400 in its words), and answers are cut at max_tokens (finish_reason "length").
        self.max_model_len: int | None = None

    # -- what to answer ------------------------------------------------------------------

    def _choices(self, body: dict[str, Any], chat: bool) -> list[dict[str, Any]]:
        n = body.get("n") or 1
        if chat:
            msgs = body["messages"]
            last = next((m for m in reversed(msgs) if m.get("role") == "user"), {})
            text = last.get("content") or ""
            if isinstance(text, list):
                text = "".join(p.get("text", "") for p in text if isinstance(p, dict))
        else:
            text = body["prompt"] if isinstance(body["prompt"], str) else "tokens"
        users = sum(1 for m in body.get("messages", []) if m.get("role") == "user")
        base = self.reply if self.reply is not None else f"ok {users}: {text[:24]}"
        fmt = (body.get("response_format") or {}).get("type")
        out = []
        for i in range(n):
            content = base + (f" #{i}" if i else "")
            if fmt in ("json_object", "json_schema"):
                content = orjson.dumps({"answer": content}).decode()
            calls = []
            tools = body.get("tools") or []
            if chat and tools and body.get("tool_choice") != "none" and _last_turn(msgs) == "user":
                k = 2 if "parallel" in text else 1
                named = _named_tool(body.get("tool_choice"), tools)
                for j in range(k):
                    fn = (named if named is not None and j == 0 else tools[j % len(tools)])[
                        "function"
                    ]
                    args = orjson.dumps(_arguments(fn, text, j)).decode()
                    calls.append(
                        {
                            "id": f"call_{i}_{j}",
                            "type": "function",
                            "function": {"name": fn["name"], "arguments": args},
                        }
                    )
                content = None
            reasoning = "Let me think." if chat and "think" in text else None
            if reasoning and not content:
                content = None  # vLLM's reasoning parsers leave an empty rest null
            out.append({"content": content, "calls": calls, "reasoning": reasoning})
        return out

    @staticmethod
    def _pieces(c: dict[str, Any]) -> list[tuple[str, str]]:
        """(kind, text) pieces in generation order; one token per character."""
        pieces = []
        if c["reasoning"]:
            pieces.append(("reasoning", c["reasoning"]))
        if c["content"]:
            pieces.append(("content", c["content"]))
        for j, call in enumerate(c["calls"]):
            pieces.append((f"call{j}", call["function"]["arguments"]))
        return pieces

    # -- handlers ---------------------------------------------------------------------------

    async def _fault(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse | None:
        if self.overloaded > 0:  # as a busy engine answers; SDKs retry it
            self.overloaded -= 1
            return web.json_response(
                {
                    "error": {
                        "message": "The engine is overloaded, try again later",
                        "type": "ServiceUnavailableError",
                        "param": None,
                        "code": 503,
                    }
                },
                status=503,
            )
        model = body.get("model")
        if model == "fail-500":
            return web.json_response(
                {
                    "error": {
                        "message": "engine exploded",
                        "type": "InternalServerError",
                        "param": None,
                        "code": 500,
                    }
                },
                status=500,
            )
        if model == "fail-400":
            return web.json_response(
                {
                    "error": {
                        "message": "max_tokens is too large",
                        "type": "BadRequestError",
                        "param": "max_tokens",
                        "code": 400,
                    }
                },
                status=400,
            )
        if model == "rate-limit":  # as OpenAI sends a 429, back-off headers included
            return web.json_response(
                {
                    "error": {
                        "message": "Rate limit reached for requests",
                        "type": "requests",
                        "param": None,
                        "code": "rate_limit_exceeded",
                    }
                },
                status=429,
                headers={
                    "retry-after": "7",
                    "x-ratelimit-remaining-requests": "0",
                    "x-request-id": "req-limited",
                    "x-engine-internal": "not for agents",
                },
            )
        if model == "hang":
            await asyncio.sleep(self.hang_s)
        if model == "reset":
            assert request.transport is not None
            request.transport.close()
            return web.Response()
        if model == "bad-json":
            return web.Response(body=b"this is not json", content_type="application/json")
        if model == "break" and not body.get("stream"):
            resp = web.StreamResponse(
                headers={"Content-Type": "application/json", "Content-Length": "1000"}
            )
            await resp.prepare(request)
            await resp.write(b'{"id": "x", "choi')
            assert request.transport is not None
            request.transport.close()
            return resp
        return None

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def _generate(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        body = await request.json(loads=orjson.loads)
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        self.started += 1
        number = self.started
        fault = await self._fault(request, body)
        if fault is not None:
            return fault
        if chat:
            prompts = [ids(render(body["messages"]))]
            choices = self._choices(body, chat)
            for c in choices:
                c["prompt_ids"] = prompts[0]
        else:  # a batch answers each prompt with n choices, numbered on (as vLLM does)
            batch = _prompts(body["prompt"])
            prompts = [ids(p) if isinstance(p, str) else list(p) for p in batch]
            choices = []
            for p, p_ids in zip(batch, prompts, strict=True):
                for c in self._choices({**body, "prompt": p}, chat):
                    c["prompt_ids"] = p_ids
                    choices.append(c)
        if self.max_model_len is not None:
            longest = max(len(p) for p in prompts)
            refused = _window_refusal(self.max_model_len, longest, body.get("max_tokens"))
            if refused is not None:
                return refused
        prompt_tokens = sum(len(p) for p in prompts)
        limit = body.get("max_tokens")
        if self.max_model_len is not None and isinstance(limit, int):
            for c in choices:
                if c["content"] and not c["calls"] and len(c["content"]) > limit:
                    c["content"], c["finish"] = c["content"][:limit], "length"
        headers = dict(self.response_headers)
        if self.policy_version is not None:
            headers["X-AW-Policy-Version"] = str(self.policy_version)
        if body.get("stream") and body.get("model") != "no-stream":
            return await self._stream(request, body, chat, prompt_tokens, choices, headers, number)
        out_choices = []
        completion_tokens = 0
        for i, c in enumerate(choices):
            toks = "".join(t for _, t in self._pieces(c))
            completion_tokens += len(toks)
            choice: dict[str, Any] = {
                "index": i,
                "finish_reason": c.get("finish") or ("tool_calls" if c["calls"] else "stop"),
                "stop_reason": None,
            }
            lp = None
            if chat:
                msg: dict[str, Any] = {
                    "role": "assistant",
                    "content": c["content"],
                    "refusal": None,
                    "reasoning": c["reasoning"],
                    "reasoning_content": c["reasoning"],
                }
                if c["calls"]:
                    msg["tool_calls"] = c["calls"]
                choice["message"] = msg
                if body.get("logprobs"):
                    lp = {"content": [logprob_entry(ch, k) for k, ch in enumerate(toks)]}
            else:
                choice["text"] = c["content"]
                if body.get("logprobs") is not None:
                    lp = {
                        "text_offset": list(range(len(toks))),
                        "token_logprobs": [logprob(k) for k in range(len(toks))],
                        "tokens": list(toks),
                        "top_logprobs": None,
                    }
            choice["logprobs"] = lp
            if body.get("return_token_ids"):
                choice["token_ids"] = ids(toks)
                if not chat:
                    choice["prompt_token_ids"] = c["prompt_ids"]
            else:
                choice["token_ids"] = None
            out_choices.append(choice)
        resp: dict[str, Any] = {
            "id": f"{'chatcmpl' if chat else 'cmpl'}-{self.name}-{number}",
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": body.get("model") or MODEL,
            "choices": out_choices,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
                "completion_tokens": completion_tokens,
                "prompt_tokens_details": None,
            },
        }
        if chat:
            resp["prompt_logprobs"] = None
            resp["prompt_token_ids"] = prompts[0] if body.get("return_token_ids") else None
        self.finished += 1
        return web.Response(
            body=orjson.dumps(resp), content_type="application/json", headers=headers
        )

    async def _stream(
        self,
        request: web.Request,
        body: dict[str, Any],
        chat: bool,
        prompt_tokens: int,
        choices: list[dict[str, Any]],
        headers: dict[str, str],
        number: int,
    ) -> web.StreamResponse:
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", **headers}
        )
        await resp.prepare(request)
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{self.name}-{number}"
        obj = "chat.completion.chunk" if chat else "text_completion"
        created = int(time.time())
        want_ids = bool(body.get("return_token_ids"))
        slow = body.get("model") == "slow"
        model = body.get("model") or MODEL

        async def send(choices_part: list[dict[str, Any]], **extra: Any) -> None:
            chunk = {
                "id": rid,
                "object": obj,
                "created": created,
                "model": model,
                "choices": choices_part,
                **extra,
            }
            await resp.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
            if slow:
                await asyncio.sleep(0.05)

        first_extra = {"prompt_token_ids": choices[0]["prompt_ids"]} if want_ids and chat else {}
        sent = 0
        total = 0
        for i, c in enumerate(choices):
            if chat:
                await send(
                    [
                        {
                            "index": i,
                            "delta": {"role": "assistant", "content": ""},
                            "logprobs": None,
                            "finish_reason": None,
                        }
                    ],
                    **first_extra,
                )
                first_extra = {}
            k = 0
            for kind, text in self._pieces(c):
                j = int(kind[4:]) if kind.startswith("call") else None
                if j is not None:
                    call = c["calls"][j]
                    head = {
                        "index": j,
                        "id": call["id"],
                        "type": "function",
                        "function": {"name": call["function"]["name"], "arguments": ""},
                    }
                    await send(
                        [{"index": i, "delta": {"tool_calls": [head]}, "finish_reason": None}]
                    )
                for pos in range(0, len(text), 3):
                    piece = text[pos : pos + 3]
                    ch: dict[str, Any] = {"index": i, "finish_reason": None}
                    if chat:
                        if j is not None:
                            ch["delta"] = {
                                "tool_calls": [{"index": j, "function": {"arguments": piece}}]
                            }
                        elif kind == "reasoning":
                            ch["delta"] = {"reasoning": piece, "reasoning_content": piece}
                        else:
                            ch["delta"] = {"content": piece}
                        if body.get("logprobs"):
                            ch["logprobs"] = {
                                "content": [logprob_entry(x, k + q) for q, x in enumerate(piece)]
                            }
                    else:
                        ch["text"] = piece
                        if body.get("logprobs") is not None:
                            ch["logprobs"] = {
                                "text_offset": [k + q for q in range(len(piece))],
                                "token_logprobs": [logprob(k + q) for q in range(len(piece))],
                                "tokens": list(piece),
                                "top_logprobs": None,
                            }
                        if want_ids and k == 0:
                            ch["prompt_token_ids"] = c["prompt_ids"]
                    if want_ids:
                        ch["token_ids"] = ids(piece)
                    k += len(piece)
                    await send([ch])
                    sent += 1
                    if body.get("model") == "break" and sent >= 2:
                        assert request.transport is not None
                        request.transport.close()
                        return resp
            total += k
            last: dict[str, Any] = {
                "index": i,
                "finish_reason": c.get("finish") or ("tool_calls" if c["calls"] else "stop"),
                "stop_reason": None,
            }
            last["delta" if chat else "text"] = {} if chat else ""
            if want_ids:
                last["token_ids"] = []
            await send([last])
        if (body.get("stream_options") or {}).get("include_usage"):
            await send(
                [],
                usage={
                    "prompt_tokens": prompt_tokens,
                    "total_tokens": prompt_tokens + total,
                    "completion_tokens": total,
                },
            )
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        self.finished += 1
        return resp

    async def tokenize(self, request: web.Request) -> web.StreamResponse:
        """vLLM's ``POST /tokenize``: the ids a chat call's prompt (or a ``prompt``) would have."""
        body = await request.json(loads=orjson.loads)
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        fault = await self._fault(request, body)
        if fault is not None:
            return fault
        if "messages" in body:
            text = render(body["messages"])
            if not body.get("add_generation_prompt", True):
                text = text[: -len("<assistant>")]
        else:
            text = body.get("prompt") or ""
        toks = ids(text)
        return web.json_response(
            {"count": len(toks), "max_model_len": 32768, "tokens": toks, "token_strs": None}
        )

    async def models(self, request: web.Request) -> web.Response:
        card = {  # vLLM's ModelCard
            "id": MODEL,
            "object": "model",
            "created": 1_790_000_000,
            "owned_by": self.name,
            "root": MODEL,
            "parent": None,
            "max_model_len": MAX_MODEL_LEN,
            "permission": [],
        }
        return web.json_response({"object": "list", "data": [card]})

    async def echo(self, request: web.Request) -> web.Response:
        data = await request.read()
        if request.path.endswith("/hang"):
            await asyncio.sleep(self.hang_s)
        return web.json_response(
            {
                "path": request.path,
                "method": request.method,
                "query": request.query_string,
                "body": data.decode(),
                "server": self.name,
            }
        )


def make_fake_app(fake: FakeUpstream | None = None) -> web.Application:
    """The fake upstream as an aiohttp app (``app["fake"]`` is its state)."""
    fake = fake or FakeUpstream()
    app = web.Application()
    app[FAKE] = fake
    app.router.add_post("/v1/chat/completions", fake.chat)
    app.router.add_post("/v1/completions", fake.completions)
    app.router.add_get("/v1/models", fake.models)
    app.router.add_post("/tokenize", fake.tokenize)
    app.router.add_route("*", "/v1/{tail:.*}", fake.echo)
    return app


FAKE: web.AppKey[FakeUpstream] = web.AppKey("fake_upstream", FakeUpstream)
