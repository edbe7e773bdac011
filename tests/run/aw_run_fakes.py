"""Test doubles for `aw run`: a fake proxy (lifecycle endpoints + a scripted chat model) so `aw run` is tested end to end.

It runs on its own thread and event loop, so both async tests and the typer
CLI (which calls asyncio.run itself) can use it. It records steps and end
records into a real pool, as the proxy would.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sys
import threading
from pathlib import Path
from typing import Any

from aiohttp import web

from agentworld import records
from agentworld.pool import Pool

HERE = Path(__file__).parent
REPO = HERE.parent.parent


def scripted_reply(body: dict[str, Any]) -> dict[str, Any]:
    """The fake model: computes 'Compute <expr>' prompts, through tools when offered.

    A prompt containing WRONG gets an answer off by one.
    """
    messages = body["messages"]
    prompt = next(m["content"] for m in messages if m["role"] == "user")
    m = re.search(r"Compute (.+?)\?", prompt)
    expr = m.group(1) if m else "0"
    value = eval(expr, {"__builtins__": {}})  # test-controlled prompts only
    if "WRONG" in prompt:
        value += 1
    tool_results = [x for x in messages if x["role"] == "tool"]
    if body.get("tools"):
        if not tool_results:
            call = {"name": "calculator", "arguments": json.dumps({"expression": expr})}
        else:
            answer = int(tool_results[-1]["content"]) + (1 if "WRONG" in prompt else 0)
            call = {"name": "final_answer", "arguments": json.dumps({"answer": str(answer)})}
        n = len(messages)
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": f"call_{n}", "type": "function", "function": call}],
        }
    return {"role": "assistant", "content": f"Let me think.\nFinal answer: {value}"}


class FakeProxy:
    """Implements the proxy lifecycle contract over HTTP; records into ``pool``."""

    def __init__(self, pool_path: Path, token: str | None = None) -> None:
        self.pool = Pool.create(pool_path)
        self.token = token
        self.trajectories: dict[str, dict[str, Any]] = {}
        self.completed: dict[str, dict[str, Any]] = {}
        self.seen_auth: list[str | None] = []
        self.create_delay_s = 0.0  # how long a create call waits before it is answered
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None

    def start(self) -> FakeProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    async def _start(self) -> None:
        self._stopping = asyncio.Event()
        self.writer = self.pool.writer(durability="strict", name="fake")
        app = web.Application()
        app.router.add_get("/aw/health", self.health)
        app.router.add_post("/aw/trajectories", self.create)
        app.router.add_post("/aw/trajectories/{id}/complete", self.complete)
        app.router.add_post("/t/{id}/v1/chat/completions", self.chat)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        async def _stop() -> None:
            assert self._runner is not None
            self._stopping.set()
            await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(_stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
        self.writer.close()
        self.pool.close()

    def _check_auth(self, request: web.Request) -> None:
        self.seen_auth.append(request.headers.get("Authorization"))
        if self.token and request.headers.get("Authorization") != f"Bearer {self.token}":
            raise web.HTTPUnauthorized(text="bad token")

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def create(self, request: web.Request) -> web.Response:
        self._check_auth(request)
        body = await request.json()
        tid = body.pop("trajectory", None) or records.new_id("tr")  # as the proxy does
        if tid in self.trajectories:
            raise web.HTTPConflict(text=f"trajectory {tid} is already open")
        self.trajectories[tid] = {**body, "steps": 0}
        if self.create_delay_s:
            with contextlib.suppress(TimeoutError):  # or until the fake stops
                await asyncio.wait_for(self._stopping.wait(), self.create_delay_s)
        return web.json_response(
            {
                "trajectory": tid,
                "base_url": f"{self.url}/t/{tid}/v1",
                "anthropic_base_url": f"{self.url}/t/{tid}",
            }
        )

    async def complete(self, request: web.Request) -> web.Response:
        self._check_auth(request)
        tid = request.match_info["id"]
        if tid not in self.trajectories:
            raise web.HTTPNotFound(text="no such trajectory")
        body = await request.json()
        self.completed[tid] = body
        t = self.trajectories[tid]
        common = {k: t.get(k) for k in ("group", "dataset", "split", "task")}
        end = records.make_end(
            trajectory=tid,
            agent=t["agent"],
            status=body["status"],
            steps=t["steps"],
            reward=body.get("reward"),
            metadata=body.get("metadata"),
            error=body.get("error"),
            **common,
        )
        self.writer.append(end)
        return web.json_response({"trajectory": tid, "status": body["status"]})

    async def chat(self, request: web.Request) -> web.Response:
        self._check_auth(request)
        tid = request.match_info["id"]
        t = self.trajectories[tid]
        body = await request.json()
        message = scripted_reply(body)
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        norm = {
            "role": "assistant",
            "content": message["content"],
            "tool_calls": [
                {
                    "id": c["id"],
                    "name": c["function"]["name"],
                    "arguments": c["function"]["arguments"],
                }
                for c in message.get("tool_calls") or []
            ],
        }
        step = records.make_step(
            trajectory=tid,
            index=t["steps"],
            agent=t["agent"],
            request={"model": body["model"], "messages": _norm_messages(body["messages"])},
            response={"message": norm, "finish_reason": finish, "usage": usage},
            **{k: t.get(k) for k in ("group", "dataset", "split", "task")},
        )
        self.writer.append(step)
        t["steps"] += 1
        return web.json_response(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage,
            }
        )


def _norm_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for m in messages:
        n = {"role": m["role"], "content": m.get("content") or ""}
        if m.get("tool_calls"):
            n["tool_calls"] = [
                {
                    "id": c["id"],
                    "name": c["function"]["name"],
                    "arguments": c["function"]["arguments"],
                }
                for c in m["tool_calls"]
            ]
        if m.get("tool_call_id"):
            n["tool_call_id"] = m["tool_call_id"]
        out.append(n)
    return out


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def tasks_jsonl(path: Path, prompts: list[tuple[str, str]]) -> Path:
    """A JSONL file of tasks: (prompt, answer) pairs, ids t0, t1, ..."""
    lines = [
        json.dumps({"id": f"t{i}", "question": p, "answer": a}) for i, (p, a) in enumerate(prompts)
    ]
    return write(path, "\n".join(lines) + "\n")


CLI_AGENT = REPO / "agentworld" / "run" / "agents" / "cli_agent.py"
PYTHON = sys.executable
