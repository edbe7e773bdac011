"""Odd, malformed and hostile requests: each answered with a 400 naming what is wrong (in the
route's protocol shape), before the upstream is called; never a 200 without its step, never a
500 of the proxy's own, never a forwarded path outside /v1."""

from __future__ import annotations

import asyncio
import gzip
import logging
from typing import Any

import aiohttp
import orjson
import pytest

from agentworld.proxy.body_check import MAX_BODY_DEPTH
from agentworld.records import MAX_STRING_BYTES
from tests.proxy.conftest import steps_of
from tests.proxy.test_proxy_faults import still_serves
from tests.proxy.test_proxy_trajectories import post

USER = [{"role": "user", "content": "hi"}]
CHAT = {"model": "m", "messages": USER}


def nested(depth: int) -> Any:
    """An object ``depth`` levels deep: {"a": {"a": ... 1}}."""
    out: Any = 1
    for _ in range(depth):
        out = {"a": out}
    return out


async def raw_http(proxy: Any, data: bytes, read: int = 4096) -> bytes:
    """Send ``data`` on a fresh connection; what comes back before it closes (or 5 s)."""
    host, port = proxy.url.split("//")[1].rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(data)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(read), 5)
    finally:
        writer.close()


def http_post(path: str, body: bytes, *headers: bytes) -> bytes:
    head = b"".join(h + b"\r\n" for h in headers)
    return (
        b"POST "
        + path.encode()
        + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + head
        + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
        + body
    )


# -- item 3: nothing a record cannot keep gets a 200 ---------------------------------------


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"seed": 9223372036854775808}, "seed"),
        ({"metadata": nested(70)}, "metadata" + ".a" * MAX_BODY_DEPTH),
        ({"metadata": "1,000 deep"}, "metadata" + ".a" * MAX_BODY_DEPTH),
        ({"logit_bias": {"50256": 18446744073709551615}}, "logit_bias.50256"),
    ],
)
async def test_a_body_no_record_can_keep_is_a_400_naming_the_field(proxy, pool, fake, extra, param):
    body = orjson.dumps({**CHAT, **extra})
    if extra.get("metadata") == "1,000 deep":  # deeper than orjson writes: written by hand
        body = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"metadata":'
        body += b'{"a":' * 1000 + b"1" + b"}" * 1000 + b"}"
    calls = len(fake[0].requests)
    status, got = await post(
        proxy.url + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    assert status == 400, got
    assert got["error"]["param"] == param
    assert len(fake[0].requests) == calls  # refused before the upstream was called
    await still_serves(proxy)


async def test_the_deepest_body_accepted_is_recorded(proxy, pool):
    status, _ = await post(
        proxy.url + "/v1/chat/completions", {**CHAT, "metadata": nested(MAX_BODY_DEPTH)}
    )
    assert status == 200
    status, got = await post(
        proxy.url + "/v1/responses",
        {"model": "m", "input": "hi", "metadata": nested(MAX_BODY_DEPTH)},
    )
    assert status == 200, got
    await proxy.stop()
    assert len(steps_of(pool)) == 2  # every 200 has its step


async def test_a_string_over_the_record_limit_is_a_400(make_proxy):
    proxy = await make_proxy(max_body_bytes=32 * 1024 * 1024)
    text = "x" * (MAX_STRING_BYTES + 1)
    status, got = await post(
        proxy.url + "/v1/chat/completions",
        {"model": "m", "messages": [{"role": "user", "content": text}]},
    )
    assert status == 400
    assert got["error"]["param"] == "messages[0].content"


@pytest.mark.parametrize("header", [b"X-AW-Task", b"X-AW-Dataset", b"User-Agent"])
async def test_a_header_that_is_not_utf8_is_a_400_naming_it(proxy, pool, fake, header):
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "fresh"}]})
    got = await raw_http(proxy, http_post("/v1/chat/completions", body, header + b": caf\xe9"))
    head, _, answer = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), got
    assert orjson.loads(answer)["error"]["param"] == header.decode()
    assert not fake[0].requests
    # on an Anthropic route, Anthropic's error shape
    got = await raw_http(proxy, http_post("/v1/messages", body, header + b": caf\xe9"))
    assert orjson.loads(got.partition(b"\r\n\r\n")[2])["type"] == "error"
    await proxy.stop()
    assert steps_of(pool) == []


# -- item 7: pass-through stays under /v1 --------------------------------------------------


@pytest.mark.parametrize(
    "path",
    ["/v1/%2e%2e/tokenize", "/v1/%2E%2E/aw/reload", "/v1/a/%2e%2e/%2e%2e/admin", "/v1/./%2e/x"],
)
async def test_an_encoded_dot_segment_never_leaves_v1(proxy, fake, path):
    got = await raw_http(proxy, http_post(path, b'{"prompt": "x"}'))
    assert got.startswith(b"HTTP/1.1 400"), got
    assert not fake[0].requests and not fake[0].headers


async def test_encoded_characters_stay_in_the_forwarded_path(proxy):
    async with aiohttp.ClientSession() as s:
        url = proxy.url + "/v1/files/a%3Fb%23c%2520?purpose=x%26y"
        async with s.get(aiohttp.client.URL(url, encoded=True)) as r:
            got = await r.json()
    assert got["path"] == "/v1/files/a?b#c%20"  # the upstream decodes what we encoded once
    assert got["query"] == "purpose=x%26y"  # as sent


# -- item 8: names that are not path-safe ----------------------------------------------------


@pytest.mark.parametrize("field", ["trajectory", "group", "agent"])
@pytest.mark.parametrize("name", [".", "..", "a?b", "a#b", "a%2fb", "a\x1bb"])
async def test_path_unsafe_names_are_refused(proxy, field, name):
    status, got = await post(proxy.url + "/aw/trajectories", {field: name})
    assert status == 400, got
    assert got["error"]["param"] == field


async def test_a_dot_dot_trajectory_in_the_path_is_refused(proxy, fake):
    got = await raw_http(proxy, http_post("/t/%2e%2e/v1/chat/completions", orjson.dumps(CHAT)))
    assert got.startswith(b"HTTP/1.1 400") and b'"param":"trajectory"' in got
    assert not fake[0].requests


# -- item 10: 400s, not 500s ---------------------------------------------------------------


async def test_gzip_declared_on_a_plain_body_is_a_400(proxy, caplog):
    got = await raw_http(
        proxy, http_post("/v1/chat/completions", orjson.dumps(CHAT), b"Content-Encoding: gzip")
    )
    assert got.startswith(b"HTTP/1.1 400"), got
    assert b"content-encoding" in got.lower()
    assert not [r for r in caplog.records if r.exc_info]  # no traceback logged
    # a real gzip body is read
    got = await raw_http(
        proxy,
        http_post(
            "/v1/chat/completions", gzip.compress(orjson.dumps(CHAT)), b"Content-Encoding: gzip"
        ),
    )
    assert got.startswith(b"HTTP/1.1 200"), got


@pytest.mark.parametrize(
    "data",
    [
        b"GARBAGE LINE\r\n\r\n",
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n",
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: zz\r\n\r\n",
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\n",
    ],
    ids=["request-line", "header-over-8kB", "content-length", "chunk-size"],
)
async def test_malformed_http_is_a_400_logged_in_one_line(proxy, caplog, data):
    caplog.set_level(logging.DEBUG, logger="aiohttp.server")
    got = await raw_http(proxy, data)
    assert got.startswith((b"HTTP/1.0 400", b"HTTP/1.1 400")), got
    await asyncio.sleep(0.05)
    shown = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert all(r.exc_info is None and r.levelno < logging.ERROR for r in shown), shown
    await still_serves(proxy)


# -- item 11: a stream of garbage is an error event, counted -------------------------------


@pytest.fixture
async def garbage_upstream() -> Any:
    """An upstream answering every call 200 text/event-stream, with garbage before [DONE]
    (the body is the request's model: ``json`` or ``bare``)."""
    from aiohttp import web
    from aiohttp.test_utils import TestServer

    garbage = {"json": b"data: this is not json\n\n", "bare": b"<html>oops</html>\n\n"}

    async def answer(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        await out.write(garbage[body["model"]] + b"data: [DONE]\n\n")
        await out.write_eof()
        return out

    app = web.Application()
    app.router.add_post("/v1/chat/completions", answer)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield str(server.make_url("")).rstrip("/")
    await server.close()


@pytest.mark.parametrize("model", ["json", "bare"])
async def test_a_stream_of_garbage_ends_in_an_error_event_and_is_counted(
    make_proxy, pool, garbage_upstream, model
):
    from agentworld.proxy.config import UpstreamConfig

    proxy = await make_proxy(UpstreamConfig.single(garbage_upstream))
    async with (
        aiohttp.ClientSession() as s,
        s.post(
            proxy.url + "/v1/chat/completions",
            json={"model": model, "messages": USER, "stream": True},
        ) as r,
    ):
        text = await r.text()
        async with s.get(proxy.url + "/aw/stats") as st:
            stats = await st.json()
    assert '"error"' in text and "data: [DONE]" not in text, text
    assert stats["errors"]["total"] >= 1
    await proxy.stop()
    (step,) = steps_of(pool)
    assert step["status"] == "error" and step["error"]["type"] == "upstream_invalid"


# -- item 12: a rate limit is a rate limit on every route ---------------------------------


async def test_an_upstream_429_on_the_responses_route_is_a_rate_limit_error(proxy, pool):
    status, got = await post(proxy.url + "/v1/responses", {"model": "rate-limit", "input": "hi"})
    assert status == 429
    assert got["error"]["type"] == "rate_limit_error"
    assert got["error"]["code"] == "rate_limit_exceeded"
