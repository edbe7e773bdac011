"""Bad input, upstream faults, disconnects, recording failures, auth and operations endpoints."""

from __future__ import annotations

import asyncio
import socket
from typing import Any, ClassVar

import aiohttp
import openai
import pytest

from agentworld.errors import PoolError
from agentworld.proxy.config import ProxyConfig, UpstreamConfig
from agentworld.proxy.inprocess import ProxyServer
from tests.proxy.conftest import steps_of

USER = [{"role": "user", "content": "hi"}]


async def raw_post(url: str, data: Any, **kw: Any) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as s, s.post(url, data=data, **kw) as r:
        return r.status, await r.json(content_type=None)


def client(proxy: Any, **kw: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=proxy.base_url, api_key="k", max_retries=0, **kw)


async def still_serves(proxy: Any) -> None:
    c = client(proxy)
    r = await c.chat.completions.create(model="m", messages=USER)
    assert r.choices[0].message.content == "ok 1: hi"
    await c.close()


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        (b"{not json", 400, "not valid JSON"),
        (b"[1, 2]", 400, "must be a JSON object"),
        (b"", 400, "empty"),
        (b'{"model": "m"}', 400, "'messages' is a required property"),
        (b'{"messages": "hi"}', 400, "'messages' must be a non-empty list"),
        (b'{"messages": [{"role": "wizard", "content": "x"}]}', 400, "unknown role"),
        (b'{"messages": [{"role": "user", "content": 5}]}', 400, "messages[0].content"),
        (b'{"messages": [{"role": "user", "content": "x"}], "n": "3"}', 400, "'n' must be"),
        (b'{"messages": [{"role": "user", "content": "x"}], "stream": "yes"}', 400, "'stream'"),
        (
            b'{"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}',
            400,
            "'temperature'",
        ),
        (b'{"messages": [{"role": "user", "content": "x"}], "tools": {}}', 400, "'tools'"),
        # malformed, not merely unusual: each was once a 500 (found by fuzzing the proxy)
        (b'{"messages": [{"role": {}, "content": "x"}]}', 400, "messages[0].role"),
        (b'{"messages": [{"role": ["user"], "content": "x"}]}', 400, "messages[0].role"),
        (
            b'{"messages": [{"role": "assistant", "tool_calls": [7]}]}',
            400,
            "messages[0].tool_calls[0] must be an object",
        ),
        (
            b'{"messages": [{"role": "assistant", "tool_calls": [{"function": 1.5}]}]}',
            400,
            "messages[0].tool_calls[0].function must be an object",
        ),
        # more than a step record keeps of a tool call's name: refused, not served unrecorded
        (
            b'{"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "function":'
            + b' {"name": "'
            + b"f" * 2000
            + b'", "arguments": "{}"}}]}]}',
            400,
            "messages[0].tool_calls[0].function.name: longer than 1024 bytes",
        ),
        (
            b'{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function",'
            + b' "function": {"name": "'
            + b"f" * 2000
            + b'"}}]}',
            400,
            "tools[0].function.name: longer than 1024 bytes",
        ),
    ],
)
async def test_bad_requests_get_openai_shaped_4xx(proxy, pool, body, status, needle):
    got, err = await raw_post(
        proxy.base_url + "/chat/completions", body, headers={"Content-Type": "application/json"}
    )
    assert got == status
    assert needle in err["error"]["message"]
    assert err["error"]["type"] == "invalid_request_error"
    await still_serves(proxy)
    await proxy.stop()
    assert len(steps_of(pool)) == 1  # bad requests are not steps


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"top_logprobs": 3}, "requires 'logprobs' to be true"),
        ({"top_logprobs": 3, "logprobs": False}, "requires 'logprobs' to be true"),
        ({"top_logprobs": -1}, "requires 'logprobs' to be true"),  # vLLM's "all"
        ({"top_logprobs": "3", "logprobs": True}, "must be an integer"),
    ],
)
async def test_top_logprobs_without_logprobs_is_refused_not_dropped(proxy, fake, extra, needle):
    """OpenAI and vLLM refuse it; the proxy, asking for log-probs itself, used to drop it,
    and the agent got an answer without the alternatives it asked for."""
    c = client(proxy)
    with pytest.raises(openai.BadRequestError) as info:
        await c.chat.completions.create(model="m", messages=USER, extra_body=extra)
    assert info.value.body["param"] == "top_logprobs" and needle in info.value.body["message"]
    assert not fake[0].requests  # not forwarded
    await c.chat.completions.create(model="m", messages=USER, extra_body={"top_logprobs": 0})
    r = await c.chat.completions.create(model="m", messages=USER, logprobs=True, top_logprobs=2)
    assert r.choices[0].logprobs.content
    assert fake[0].requests[-1]["top_logprobs"] == 2
    await c.close()


async def test_completions_missing_prompt(proxy):
    got, err = await raw_post(proxy.base_url + "/completions", b'{"model": "m"}')
    assert got == 400 and err["error"]["param"] == "prompt"


@pytest.mark.parametrize(
    ("prompt", "status"),
    [
        (b"[[1, 2], [3]]", 200),  # a batch of tokenized prompts, as OpenAI and vLLM take
        (b'[[1, 2], "x"]', 400),
        (b"[[1], []]", 400),
        (b"[[true]]", 400),
        (b"[]", 400),
    ],
)
async def test_completions_prompt_shapes(proxy, prompt, status):
    body = b'{"model": "m", "max_tokens": 3, "prompt": ' + prompt + b"}"
    got, answer = await raw_post(proxy.base_url + "/completions", body)
    assert got == status
    if status == 400:
        assert answer["error"]["param"] == "prompt"


async def test_body_too_large_is_413(make_proxy):
    proxy = await make_proxy(max_body_bytes=4096)
    body = b'{"messages": [{"role": "user", "content": "' + b"x" * 8000 + b'"}]}'
    got, err = await raw_post(proxy.base_url + "/chat/completions", body)
    assert got == 413 and "limit" in err["error"]["message"]
    await still_serves(proxy)


async def test_unknown_trajectory_and_route(proxy):
    c = openai.AsyncOpenAI(base_url=proxy.trajectory_url("tr_missing"), api_key="k", max_retries=0)
    with pytest.raises(openai.NotFoundError, match="unknown trajectory"):
        await c.chat.completions.create(model="m", messages=USER)
    await c.close()
    got, err = await raw_post(proxy.url + "/aw/trajectories/tr_missing/complete", b"{}")
    assert got == 404 and "tr_missing" in err["error"]["message"]
    got, err = await raw_post(proxy.url + "/nowhere", b"{}")
    assert got == 404 and err["error"]["type"] == "not_found_error"
    got, err = await raw_post(proxy.url + "/aw/trajectories", b'{"group": "a/b"}')
    assert got == 400 and err["error"]["param"] == "group"


async def test_a_route_without_its_v1_names_the_route_meant(proxy):
    """An OpenAI client given the proxy's address without /v1 as its base URL is told."""
    c = openai.AsyncOpenAI(base_url=proxy.url, api_key="k", max_retries=0)
    with pytest.raises(openai.NotFoundError, match=r"did you mean /v1/chat/completions\?"):
        await c.chat.completions.create(model="m", messages=USER)
    await c.close()
    got, err = await raw_post(proxy.url + "/a/coder/g/g1/responses", b"{}")
    assert got == 404 and err["error"]["type"] == "not_found_error"
    assert "did you mean /a/coder/g/g1/v1/responses?" in err["error"]["message"]
    got, err = await raw_post(proxy.url + "/nowhere/chat/completions", b"{}")
    assert got == 404 and "did you mean" not in err["error"]["message"]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_upstream_refused_is_502_and_a_failed_step(make_proxy, pool):
    proxy = await make_proxy(UpstreamConfig.single(f"http://127.0.0.1:{closed_port()}"))
    c = client(proxy)
    for stream in (False, True):
        with pytest.raises(openai.APIStatusError) as info:
            await c.chat.completions.create(model="m", messages=USER, stream=stream)
        assert info.value.status_code == 502
    await c.close()
    await proxy.stop()
    steps = steps_of(pool)
    assert [s["status"] for s in steps] == ["error", "error"]
    assert (
        steps[0]["error"]["type"] == "upstream_unreachable" and steps[0]["error"]["status"] == 502
    )


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("model", "status"), [("fail-500", 500), ("fail-400", 400)])
async def test_upstream_error_status_passes_through(proxy, pool, model, status, stream):
    c = client(proxy)
    with pytest.raises(openai.APIStatusError) as info:
        await c.chat.completions.create(model=model, messages=USER, stream=stream)
    assert info.value.status_code == status
    assert info.value.body["message"] in ("engine exploded", "max_tokens is too large")
    await still_serves(proxy)
    await c.close()
    await proxy.stop()
    failed = [s for s in steps_of(pool) if s["status"] == "error"]
    assert (
        failed[0]["error"]["status"] == status and failed[0]["error"]["type"] == "upstream_status"
    )


async def test_upstream_timeout_is_504(make_proxy, pool, fake):
    fake[0].hang_s = 1.0
    proxy = await make_proxy(UpstreamConfig(urls=(fake[1],), timeout_s=0.2))
    c = client(proxy)
    with pytest.raises(openai.APIStatusError) as info:
        await c.chat.completions.create(model="hang", messages=USER)
    assert info.value.status_code == 504
    await still_serves(proxy)
    await c.close()
    await proxy.stop()
    assert steps_of(pool)[0]["error"]["type"] == "upstream_timeout"


async def test_a_passed_through_call_keeps_the_agents_upstream_timeout(make_proxy, fake):
    """Not aiohttp's 5-minute cap on the whole call: the agent's read timeout."""
    fake[0].hang_s = 30.0
    proxy = await make_proxy(UpstreamConfig(urls=(fake[1],), timeout_s=0.2))
    async with aiohttp.ClientSession() as s:
        async with asyncio.timeout(10):
            r = await s.get(proxy.base_url + "/hang")
            assert r.status == 504
            assert "timed out" in (await r.json())["error"]["message"]
    await still_serves(proxy)


@pytest.mark.parametrize("model", ["reset", "break", "bad-json"])
async def test_upstream_reset_or_garbage_is_502(proxy, pool, model):
    c = client(proxy)
    with pytest.raises(openai.APIStatusError) as info:
        await c.chat.completions.create(model=model, messages=USER)
    assert info.value.status_code == 502
    await still_serves(proxy)
    await c.close()
    await proxy.stop()
    assert steps_of(pool)[0]["status"] == "error"


@pytest.mark.parametrize("model", ["bad-json", "no-stream"])
async def test_a_stream_answered_without_an_event_stream_is_the_502_its_step_records(
    proxy, pool, model
):
    """Garbage, or a whole completion from an upstream that ignores ``stream``: relayed as
    a 200, the SDK read it as a stream of no chunks and no error."""
    c = client(proxy)
    with pytest.raises(openai.APIStatusError) as info:
        stream = await c.chat.completions.create(model=model, messages=USER, stream=True)
        async for _ in stream:
            pass
    assert info.value.status_code == 502
    assert info.value.body["type"] == "upstream_error"
    assert "not an event stream" in info.value.body["message"]
    await still_serves(proxy)
    await c.close()
    await proxy.stop()
    failed = steps_of(pool)[0]
    assert failed["status"] == "error"
    assert failed["error"]["status"] == 502 and failed["error"]["type"] == "upstream_invalid"


@pytest.mark.parametrize(
    ("fault", "stream"),
    [
        ("refused", False),
        ("refused", True),
        ("hang", False),
        ("hang", True),
        ("reset", False),
        ("break", False),
        ("bad-json", False),
        ("bad-json", True),
        ("fail-500", False),  # relayed as it came: the headers were always there
    ],
)
async def test_every_failed_call_names_its_step(make_proxy, pool, fake, fault, stream):
    """The proxy's own 502s and 504s name the step they were recorded as, as a relayed
    upstream error does: a harness can label the failed step or close its trajectory."""
    fake[0].hang_s = 1.0
    url = f"http://127.0.0.1:{closed_port()}" if fault == "refused" else fake[1]
    proxy = await make_proxy(UpstreamConfig(urls=(url,), timeout_s=0.2))
    body = {"model": fault, "messages": USER, "stream": stream}
    async with (
        aiohttp.ClientSession() as s,
        s.post(proxy.base_url + "/chat/completions", json=body) as r,
    ):
        status, headers = r.status, r.headers
        assert (await r.json())["error"]["message"]
    assert status >= 500
    await proxy.stop()
    (step,) = steps_of(pool)
    assert step["status"] == "error" and step["error"]["status"] == status
    assert headers["X-AW-Trajectory"] == step["trajectory"]
    assert headers["X-AW-Step"] == str(step["index"])


async def test_stream_broken_midway_reaches_agent_and_is_recorded(proxy, pool):
    c = client(proxy)
    got = []
    with pytest.raises(openai.APIError):
        stream = await c.chat.completions.create(model="break", messages=USER, stream=True)
        async for chunk in stream:
            got.append(chunk)
    assert got  # the first chunks arrived before the break
    await still_serves(proxy)
    await c.close()
    await proxy.stop()
    broken = steps_of(pool)[0]
    assert broken["status"] == "error" and broken["error"]["type"] == "upstream_disconnected"
    assert broken["response"]["message"]["content"]  # what arrived is kept


async def test_an_internal_failure_after_a_stream_began_cuts_the_connection(proxy, monkeypatch):
    """No second response written after the first one's events: the agent sees its stream
    broken (as when an upstream breaks), and its next call, on a new connection, works."""
    from agentworld.proxy.sse import StreamAssembler

    def fail(self: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(StreamAssembler, "result", fail)
    body = {"model": "slow", "messages": USER, "stream": True}  # its first event goes early
    async with aiohttp.ClientSession() as s, asyncio.timeout(10):  # not left waiting
        with pytest.raises(aiohttp.ClientPayloadError):
            async with s.post(proxy.base_url + "/chat/completions", json=body) as r:
                assert r.status == 200
                await r.read()
        monkeypatch.undo()
        async with s.post(proxy.base_url + "/chat/completions", json=body) as r:
            assert r.status == 200 and b"data: [DONE]" in await r.read()
    assert proxy.state.stats.errors["internal"] == 1


async def test_client_disconnect_mid_stream_is_cancelled(proxy, pool):
    body = {"model": "slow", "messages": USER, "stream": True}
    async with aiohttp.ClientSession() as s:
        resp = await s.post(proxy.base_url + "/chat/completions", json=body)
        assert resp.status == 200
        await resp.content.readany()
        resp.close()  # the agent goes away
    for _ in range(300):
        if proxy.state.stats.steps["cancelled"]:
            break
        await asyncio.sleep(0.02)
    await still_serves(proxy)
    await proxy.stop()
    cancelled = [s for s in steps_of(pool) if s["status"] == "cancelled"]
    assert len(cancelled) == 1 and cancelled[0]["error"]["type"] == "client_disconnected"


class BrokenWriter:
    """A pool writer whose disk is full."""

    last_error = None
    stats: ClassVar[dict[str, int]] = {}

    async def append_async(self, rec: dict[str, Any]) -> None:
        raise PoolError("No space left on device")

    def close(self) -> None:
        pass


@pytest.mark.parametrize("stream", [False, True])
async def test_recording_failure_never_breaks_the_agent(pool, fake, stream):
    cfg = ProxyConfig(default_upstream=UpstreamConfig.single(fake[1]))
    async with ProxyServer(cfg, pool, writer=BrokenWriter()) as proxy:
        c = client(proxy)
        r = await c.chat.completions.create(model="m", messages=USER, stream=stream)
        if stream:
            assert [ch async for ch in r]
        else:
            assert r.choices[0].message.content
        await c.close()
        assert proxy.state.stats.errors["record"] == 1


@pytest.mark.parametrize(
    ("ids", "logprob"), [([72, "x"], -0.1), ([72, -5], -0.1), ([72, 2**40], -0.1)]
)
async def test_malformed_token_ids_from_the_upstream_still_leave_a_step(pool, ids, logprob):
    """An engine's ids or log-probs that no step may hold: the step is recorded without them
    (as from an upstream that gives none), saying why, rather than lost."""
    from aiohttp import web
    from aiohttp.test_utils import TestServer

    async def chat(request: web.Request) -> web.Response:
        lps = [{"token": t, "logprob": logprob, "bytes": [], "top_logprobs": []} for t in "Hi"]
        return web.json_response(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "model": "m",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "Hi"},
                        "finish_reason": "stop",
                        "logprobs": {"content": lps},
                        "token_ids": ids,
                    }
                ],
                "prompt_token_ids": [1, 2, 3],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
            }
        )

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    async with TestServer(app) as up:
        cfg = ProxyConfig(default_upstream=UpstreamConfig.single(str(up.make_url("")).rstrip("/")))
        async with ProxyServer(cfg, pool) as proxy:
            c = client(proxy)
            r = await c.chat.completions.create(model="m", messages=USER)
            assert r.choices[0].message.content == "Hi"
            await c.close()
            errors = dict(proxy.state.stats.errors)
    assert errors["upstream_invalid"] == 1 and errors["record"] == 0
    (step,) = steps_of(pool)
    assert step["status"] == "ok" and step["response"]["message"]["content"] == "Hi"
    assert step["tokens"] == {"source": "none"}
    (dropped,) = step["metadata"]["upstream_invalid"]
    assert dropped.startswith("tokens.")


async def test_strict_recording_failure_is_503(pool, fake):
    cfg = ProxyConfig(default_upstream=UpstreamConfig.single(fake[1]), durability="strict")
    async with ProxyServer(cfg, pool, writer=BrokenWriter()) as proxy:
        c = client(proxy)
        with pytest.raises(openai.APIStatusError) as info:
            await c.chat.completions.create(model="m", messages=USER)
        assert info.value.status_code == 503 and "recorded" in info.value.message
        # every answer names its step, a refused one too
        assert info.value.response.headers["X-AW-Step"] == "0"
        assert info.value.response.headers["X-AW-Trajectory"].startswith("tr_")
        with pytest.raises(openai.APIError, match="recorded"):
            stream = await c.chat.completions.create(model="m", messages=USER, stream=True)
            [ch async for ch in stream]
        await c.close()
        body = {"model": "m", "max_tokens": 5, "messages": USER}
        async with (
            aiohttp.ClientSession() as s,
            s.post(proxy.url + "/v1/messages", json=body) as r,
        ):
            assert r.status == 503 and (await r.json())["type"] == "error"
            assert r.headers["X-AW-Step"].isdigit() and r.headers["X-AW-Trajectory"].startswith(
                "tr_"
            )


class DiskFullOnce:
    """A real pool writer whose disk is full for the ``fail_at``-th record (1-based)."""

    def __init__(self, inner: Any, fail_at: int) -> None:
        self.inner, self.fail_at, self.n = inner, fail_at, 0

    async def append_async(self, rec: dict[str, Any]) -> None:
        self.n += 1
        if self.n == self.fail_at:
            raise PoolError("No space left on device")
        await self.inner.append_async(rec)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.mark.parametrize("api", ["chat", "chat-stream", "anthropic"])
async def test_a_retry_after_a_strict_recording_failure_stays_in_its_trajectory(pool, fake, api):
    """Strict mode answers 503 when the step cannot be made durable: the continuation points
    its answer left are taken back, so the agent's retry of the same request goes on in the
    trajectory instead of starting a new one."""
    import anthropic

    cfg = ProxyConfig(default_upstream=UpstreamConfig.single(fake[1]), durability="strict")
    writer = pool.writer(durability="strict")
    messages: list[dict[str, Any]] = [{"role": "user", "content": "a task"}]
    async with ProxyServer(cfg, pool, writer=DiskFullOnce(writer, fail_at=2)) as proxy:
        c = client(proxy)
        claude = anthropic.AsyncAnthropic(base_url=proxy.url, api_key="k", max_retries=0)
        for turn in range(3):
            for attempt in range(2):  # the agent's own retry of the failed call
                try:
                    if api == "anthropic":
                        r = await claude.messages.create(
                            model="m", max_tokens=64, messages=messages
                        )
                        text = r.content[0].text
                    elif api == "chat-stream":
                        chunks = await c.chat.completions.create(
                            model="m", messages=messages, stream=True
                        )
                        text = "".join(
                            [ch.choices[0].delta.content or "" async for ch in chunks if ch.choices]
                        )
                    else:
                        r = await c.chat.completions.create(model="m", messages=messages)
                        text = r.choices[0].message.content
                    break
                except (openai.APIError, anthropic.APIError) as exc:
                    assert turn == 1 and attempt == 0 and "recorded" in str(exc), exc
            messages += [
                {"role": "assistant", "content": text},
                {"role": "user", "content": "more"},
            ]
        await c.close()
        await claude.close()
    writer.close()
    steps = sorted(steps_of(pool), key=lambda s: s["index"])
    assert len({s["trajectory"] for s in steps}) == 1
    assert [s["index"] for s in steps] == [0, 2, 3]  # step 1 never became durable


async def test_auth_token_guards_every_route(make_proxy, pool, fake):
    proxy = await make_proxy(auth_token="proxy-secret")
    async with aiohttp.ClientSession() as s:
        for path in ("/aw/health", "/aw/stats", "/metrics", "/v1/models"):
            async with s.get(proxy.url + path) as r:
                assert r.status == 401, path
            async with s.get(
                proxy.url + path, headers={"Authorization": "Bearer proxy-secret"}
            ) as r:
                assert r.status == 200, path
    bad = client(proxy)
    with pytest.raises(openai.AuthenticationError):
        await bad.chat.completions.create(model="m", messages=USER)
    good = openai.AsyncOpenAI(base_url=proxy.base_url, api_key="proxy-secret", max_retries=0)
    await good.chat.completions.create(model="m", messages=USER)
    await bad.close()
    await good.close()
    assert "Authorization" not in fake[0].headers[-1]  # the proxy's token stays with the proxy
    await proxy.stop()
    assert len(steps_of(pool)) == 1


async def test_without_auth_the_agents_key_reaches_a_keyless_upstream(proxy, fake):
    await still_serves(proxy)
    assert fake[0].headers[-1]["Authorization"] == "Bearer k"


async def test_health_stats_and_metrics(proxy):
    await still_serves(proxy)
    async with aiohttp.ClientSession() as s:
        async with s.get(proxy.url + "/aw/health") as r:
            health = await r.json()
        async with s.get(proxy.url + "/aw/stats") as r:
            stats = await r.json()
        async with s.get(proxy.url + "/metrics") as r:
            metrics = await r.text()
            assert r.headers["Content-Type"].startswith("text/plain")
    assert health["status"] == "ok" and health["open_trajectories"] == 1
    assert stats["steps"]["ok"] == 1 and stats["trajectories"]["open"] == 1
    assert stats["tokens"]["completion"] == len("ok 1: hi")
    assert stats["rates"]["steps_per_s"] > 0
    assert 'aw_proxy_steps_total{status="ok"} 1.0' in metrics
    assert "aw_proxy_trajectories_open 1.0" in metrics
    assert 'aw_proxy_requests_total{route="openai.chat",status="200"} 1.0' in metrics
    assert f'aw_proxy_tokens_total{{kind="completion"}} {len("ok 1: hi")}.0' in metrics
    # the one generation call's upstream time, in the buckets and the count
    assert "aw_proxy_upstream_seconds_count 1.0" in metrics
    assert 'aw_proxy_upstream_seconds_bucket{le="+Inf"} 1.0' in metrics
    assert 'aw_proxy_upstream_seconds_bucket{le="300.0"} 1.0' in metrics


def spin(seconds: float) -> None:
    """What a CPU-bound proxy looks like to its timers: its thread on a core, not waiting."""
    import time

    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


async def test_a_blocked_event_loop_shows_in_stats_metrics_and_the_log(make_proxy, caplog):
    """The proxy serves from one event loop; when it is busy, operators must be able to see it."""
    caplog.set_level("WARNING", logger="agentworld.proxy")
    proxy = await make_proxy(loop_check_interval_s=0.02)
    await asyncio.sleep(0.1)  # a few on-time checks
    spin(0.6)
    await asyncio.sleep(0.1)
    async with aiohttp.ClientSession() as s:
        async with s.get(proxy.url + "/aw/stats") as r:
            stats = await r.json()
        async with s.get(proxy.url + "/metrics") as r:
            metrics = await r.text()
    loop = stats["event_loop"]
    assert loop["checks"] >= 3
    assert loop["lag_ms_max"] >= 550 and loop["lag_ms_p50"] < 100
    assert stats["process_cpu_s"] > 0
    assert 'aw_proxy_event_loop_lag_seconds_bucket{le="0.5"}' in metrics
    over = [ln for ln in metrics.splitlines() if ln.startswith("aw_proxy_event_loop_lag_seconds_")]
    late = next(
        ln for ln in over if ln.startswith('aw_proxy_event_loop_lag_seconds_bucket{le="0.5"}')
    )
    total = next(ln for ln in over if ln.startswith("aw_proxy_event_loop_lag_seconds_count"))
    assert float(late.split()[-1]) < float(total.split()[-1])  # one check fell past 0.5 s
    assert "aw_proxy_process_cpu_seconds_total" in metrics
    warnings = [r.getMessage() for r in caplog.records if "event loop ran" in r.getMessage()]
    assert len(warnings) == 1 and "this proxy is CPU-bound" in warnings[0]


async def test_a_loop_held_up_without_using_a_core_is_not_called_cpu_bound(make_proxy, caplog):
    """A loop that waited (a blocking call, the GIL held by an engine in the same process, a
    busy machine) is late too; the warning must not send its operator to add proxies."""
    import time

    caplog.set_level("WARNING", logger="agentworld.proxy")
    proxy = await make_proxy(loop_check_interval_s=0.02)
    await asyncio.sleep(0.1)
    time.sleep(0.6)  # the loop's thread off the CPU
    await asyncio.sleep(0.1)
    await still_serves(proxy)
    warnings = [r.getMessage() for r in caplog.records if "event loop ran" in r.getMessage()]
    assert len(warnings) == 1
    assert "held up, not CPU-bound" in warnings[0] and "more proxies" not in warnings[0]


async def test_an_in_process_proxy_says_its_lateness_once_with_its_own_remedy(
    make_proxy, caplog, monkeypatch
):
    """`aw demo` logged "this proxy is CPU-bound; spread the agents over more proxies" eight
    times: each `aw run` session started an in-process proxy on the loop its agents and the
    engine ran on. Such a proxy says it once a process, naming `aw proxy --proxy` instead."""
    from agentworld.proxy import lifespan

    monkeypatch.setattr(lifespan, "_said_in_process", False)
    caplog.set_level("WARNING", logger="agentworld.proxy")
    for _ in range(2):  # two sessions, a proxy each
        proxy = await make_proxy(loop_check_interval_s=0.02, in_process=True)
        await asyncio.sleep(0.1)
        spin(0.6)
        await asyncio.sleep(0.1)
        await still_serves(proxy)
    warnings = [r.getMessage() for r in caplog.records if "event loop ran" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "shares that loop, and one core, with the agents it runs" in warnings[0]
    assert "pass --proxy URL" in warnings[0] and "more proxies" not in warnings[0]


async def test_one_log_line_per_request_only_when_asked(make_proxy, caplog):
    caplog.set_level("INFO", logger="agentworld.proxy.access")
    quiet = await make_proxy()
    await still_serves(quiet)
    assert not [r for r in caplog.records if r.name == "agentworld.proxy.access"]
    loud = await make_proxy(log_requests=True)
    await still_serves(loud)
    lines = [r.getMessage() for r in caplog.records if r.name == "agentworld.proxy.access"]
    assert len(lines) == 1 and lines[0].startswith("POST /v1/chat/completions 200")
    assert "trajectory=tr_" in lines[0]


async def test_endless_stream_is_cut_at_the_response_limit(make_proxy, pool):
    proxy = await make_proxy(max_response_bytes=1500)
    c = client(proxy)
    with pytest.raises(openai.APIError, match="stream over 1500 bytes"):
        stream = await c.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x" * 24}], stream=True
        )
        [ch async for ch in stream]
    await c.close()
    await proxy.stop()
    (step,) = steps_of(pool)
    assert step["status"] == "error" and step["error"]["type"] == "upstream_invalid"


async def test_too_many_open_trajectories_close_the_idlest(make_proxy, pool):
    proxy = await make_proxy(max_open_trajectories=2, idle_timeout_s=600, sweep_interval_s=0.02)
    c = client(proxy)
    for i in range(4):
        await c.chat.completions.create(model="m", messages=[{"role": "user", "content": f"q{i}"}])
    await c.close()
    for _ in range(200):
        if proxy.state.stats.trajectories_done >= 2 and len(proxy.state.registry) <= 2:
            break
        await asyncio.sleep(0.01)
    assert len(proxy.state.registry) == 2
    await proxy.stop()
    ends = [r for r in pool.iter_records() if r["kind"] == "end"]
    assert len(ends) == 2 and {e["status"] for e in ends} == {"timeout"}
    first_two = {
        s["trajectory"]
        for s in steps_of(pool)
        if s["request"]["messages"][0]["content"] in ("q0", "q1")
    }
    assert {e["trajectory"] for e in ends} == first_two  # the idlest went first


async def test_agent_hanging_up_on_a_unary_call_cancels_it_upstream(proxy, pool, fake):
    """The call is cancelled at once (the upstream connection closes, so vLLM stops
    generating) and recorded as cancelled, instead of waiting out the upstream."""
    fake[0].hang_s = 30.0
    body = {"model": "hang", "messages": USER}
    async with aiohttp.ClientSession() as s:
        with pytest.raises(TimeoutError):
            await s.post(
                proxy.base_url + "/chat/completions",
                json=body,
                timeout=aiohttp.ClientTimeout(total=0.3),
            )
    for _ in range(100):
        if proxy.state.stats.steps.get("cancelled"):
            break
        await asyncio.sleep(0.02)
    assert proxy.state.stats.steps.get("cancelled") == 1
    await still_serves(proxy)
    await proxy.stop()
    (step,) = [s for s in steps_of(pool) if s["status"] == "cancelled"]
    assert step["error"]["type"] == "client_disconnected"


def test_rates_cover_the_time_since_start_within_the_first_minute():
    from agentworld.proxy.stats import RATE_WINDOW_S, _Rate

    rate = _Rate(started=1000.0)
    for sec in range(10):  # 10 steps in the proxy's first 10 s: 1 step/s, not 10/60
        rate.add(1, now=1000.0 + sec)
    assert rate.per_s(now=1010.0) == 1.0
    # past the first minute: the last minute's count over the minute (older buckets age out)
    for sec in range(10, 130):
        rate.add(2, now=1000.0 + sec)
    assert rate.per_s(now=1130.0) == pytest.approx(2.0, abs=2 / RATE_WINDOW_S)
    assert _Rate(started=1000.0).per_s(now=1000.2) == 0.0  # no division by ~0 at start
