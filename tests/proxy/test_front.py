"""The front (agentworld/proxy/front/): plain generation calls served by the proxy's own
HTTP/1.1 server, everything else by aiohttp, on the same connection if need be."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import make_mocked_request

from agentworld.proxy.app import ROUTE_PREFIXES
from agentworld.proxy.front.http1 import header_lines, parse_head
from tests.proxy.conftest import steps_of

PLAIN = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n"
    b"Content-Type: application/json\r\nContent-Length: 12\r\nUser-Agent: OpenAI/Python 1.99\r\n"
    b"X-Stainless-Lang: python\r\nAuthorization: Bearer sk-1\r\nConnection: keep-alive"
)


def test_a_plain_head_is_read_with_its_headers() -> None:
    head = parse_head(PLAIN)
    assert head is not None
    assert head.path == "/v1/chat/completions" and head.content_length == 12 and head.keep_alive
    assert head.headers["authorization"] == "Bearer sk-1"  # case-insensitive, as aiohttp's
    assert head.headers["X-Stainless-Lang"] == "python"
    closing = parse_head(PLAIN.replace(b"keep-alive", b"close"))
    assert closing is not None and not closing.keep_alive


# Heads out of the ordinary: PLAIN with `old` made `new` (tests/proxy/test_fast_heads.py
# holds the C reading to the same verdicts on them).
OUT_OF_THE_ORDINARY = [
    (b"POST ", b"GET "),  # another method
    (b"HTTP/1.1\r\n", b"HTTP/1.0\r\n"),
    (b"completions ", b"completions?task=a%20b "),  # a query that needs decoding
    (b"completions ", b"completions?task=a+b "),
    (b"/v1/chat", b"/v1/%63hat"),  # percent-encoding
    (b"/v1/chat", b"/x/../v1/chat"),  # a dot segment
    (b"Content-Length: 12", b"Transfer-Encoding: chunked"),
    (b"Content-Length: 12", b"Content-Length: 12\r\nContent-Length: 12"),
    (b"Content-Length: 12", b"Content-Length: -12"),
    (b"Content-Length: 12", b"Content-Length: 1 2"),
    (b"Content-Length: 12\r\n", b""),  # no length
    (b"Host:", b"Expect: 100-continue\r\nHost:"),
    (b"Host:", b"Content-Encoding: gzip\r\nHost:"),
    (b"keep-alive", b"Upgrade"),
    (b"python", b"pyth\xc3\xb6n"),  # not ASCII
    (b"python", b"pyth\x00on"),  # a control character
    (b"\r\nX-Stainless", b"\r\n X-Stainless"),  # a folded line
    (b"\r\nX-Stainless", b"\nX-Stainless"),  # a bare LF
    (b"X-Stainless-Lang:", b"X-Stainless Lang:"),  # a name that is not a token
    (b"X-Stainless-Lang:", b"X-Stainless-Lang"),  # no colon
    (b"Host:", b":"),  # no name
]


@pytest.mark.parametrize(("old", "new"), OUT_OF_THE_ORDINARY)
def test_a_head_out_of_the_ordinary_goes_to_aiohttp(old: bytes, new: bytes) -> None:
    assert old in PLAIN
    assert parse_head(PLAIN.replace(old, new, 1)) is None


async def test_every_route_prefix_matches_as_aiohttps_router(proxy) -> None:
    app, front = proxy.app, proxy.front
    values = {"trajectory": "tr_1", "group": "g-2", "agent": "claude.code"}
    for prefix in ROUTE_PREFIXES:
        for route in ("/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/responses"):
            path = prefix.format(**values) + route
            found = front.route(path)
            assert found is not None, path
            match = await app.router.resolve(make_mocked_request("POST", path))
            assert found[1] == dict(match), path
    for path in (
        "/x/y/v1/chat/completions",
        "/t//v1/chat/completions",
        "/t/a/t/b/v1/chat/completions",
        "/a/x/t/y/v1/chat/completions",  # a prefix out of the routes' order
        "/t/a/v1/chat/completions/",
        "/v1/models",
        "/t/{x}/v1/chat/completions",
    ):
        assert front.route(path) is None, path


async def exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes
) -> tuple[int, dict[str, str], bytes]:
    writer.write(data)
    return await answer(reader)


async def answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One response (Content-Length framed): status, lowercased headers, body."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        if line:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
    body = await reader.readexactly(int(headers["content-length"]))
    return status, headers, body


def chat_request(content: str, path: str = "/v1/chat/completions", extra: str = "") -> bytes:
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": content}]})
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{extra}"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def reply_of(body: bytes) -> Any:
    return orjson.loads(body)["choices"][0]["message"]["content"]


async def test_a_connection_moves_to_aiohttp_at_its_first_request_the_front_does_not_serve(
    proxy, pool
) -> None:
    front = proxy.front
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    status, headers, body = await exchange(reader, writer, chat_request("one"))
    assert status == 200 and reply_of(body).endswith("one")
    assert len(front.conns) == 1  # served by the front, kept alive
    assert "date" in headers and headers["content-type"] == "application/json"

    get = b"GET /aw/health HTTP/1.1\r\nHost: x\r\n\r\n"
    status, _, body = await exchange(reader, writer, get)
    assert status == 200 and orjson.loads(body)["status"] == "ok"
    assert len(front.conns) == 0  # aiohttp's now

    status, _, body = await exchange(reader, writer, chat_request("two"))
    assert status == 200 and reply_of(body).endswith("two")  # aiohttp serves it the same
    writer.close()
    await proxy.stop()
    assert sorted(s["request"]["messages"][-1]["content"] for s in steps_of(pool)) == [
        "one",
        "two",
    ]


async def test_a_plain_query_is_served_by_the_front_and_read_as_aiohttp_reads_it(
    proxy, pool
) -> None:
    """Claude Code calls ``/v1/messages?beta=true``: a query of plain pairs stays with the
    front, and its identification fields count as they do under aiohttp."""
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    path = "/v1/chat/completions?beta=true&group=grp-1&task=t.7"
    status, _, _ = await exchange(reader, writer, chat_request("q", path))
    assert status == 200 and len(proxy.front.conns) == 1
    writer.close()
    await proxy.stop()
    (step,) = steps_of(pool)
    assert step["group"] == "grp-1"


async def test_pipelined_calls_are_answered_in_order(proxy, pool) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    writer.write(chat_request("first") + chat_request("second", "/g/x/v1/chat/completions"))
    got = [await answer(reader), await answer(reader)]
    assert [s for s, _, _ in got] == [200, 200]
    assert reply_of(got[0][2]).endswith("first") and reply_of(got[1][2]).endswith("second")
    writer.close()
    await proxy.stop()
    steps = {s["request"]["messages"][-1]["content"]: s for s in steps_of(pool)}
    assert set(steps) == {"first", "second"}


async def test_connection_close_is_honoured(proxy) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    status, headers, _ = await exchange(
        reader, writer, chat_request("bye", extra="Connection: close\r\n")
    )
    assert status == 200 and headers["connection"] == "close"
    assert await asyncio.wait_for(reader.read(), 5) == b""  # the proxy closed it
    writer.close()


async def test_a_chunked_body_is_served_by_aiohttp_and_recorded(proxy, pool) -> None:
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "chunked"}]})
    data = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%b\r\n0\r\n\r\n" % (len(body), body)
    )
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    status, _, answer_body = await exchange(reader, writer, data)
    assert status == 200 and reply_of(answer_body).endswith("chunked")
    assert len(proxy.front.conns) == 0
    writer.close()
    await proxy.stop()
    (step,) = steps_of(pool)
    assert step["status"] == "ok"


def test_an_answer_header_with_a_line_break_is_refused() -> None:
    assert header_lines({"X-AW-Step": "3"}) == b"X-AW-Step: 3\r\n"
    with pytest.raises(ValueError, match="newline"):
        header_lines({"X-Bad": "a\r\nSet-Cookie: x=1"})
    with pytest.raises(ValueError, match="newline"):
        header_lines({"X-Bad": "a\nb"})


async def test_bytes_that_cannot_begin_a_plain_call_go_to_aiohttp_at_once(proxy) -> None:
    """A TLS hello to the plain port is refused by aiohttp on its first bytes: the front
    never waits for a head that will not come (the request fuzzer's case)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    writer.write(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(32))
    got = await asyncio.wait_for(reader.read(65536), 5)
    assert got.startswith(b"HTTP/1.0 400") and b"HTTPS traffic on an HTTP port" in got
    writer.close()

    _, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    writer.write(b"GET /aw/health HTTP/1.1\r\nHo")  # half a head, of another method
    await writer.drain()
    for _ in range(100):
        await asyncio.sleep(0.01)
        if not proxy.front.conns:
            break
    assert not proxy.front.conns  # aiohttp's, before the head ends
    writer.close()


async def test_a_call_refused_before_its_body_ended_reads_the_rest_then_closes(make_proxy, pool):
    """A call answered before its body is all in (here a wrong proxy token, refused before
    the body is read): the rest is read and dropped, then the connection closes, as
    aiohttp's lingering close does. Closing over unread bytes would reset the connection,
    and the agent could lose its answer."""
    proxy = await make_proxy(auth_token="proxy-secret")
    body = b'{"model":"m","messages":[{"role":"user","content":"' + b"x" * 2_000_000 + b'"}]}'
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer wrong\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    writer.write(head + body[:65536])
    status, headers, answer_body = await answer(reader)
    assert status == 401 and headers["connection"] == "close"
    assert b"proxy token" in answer_body
    for at in range(65536, len(body), 65536):  # the rest still goes in: nothing was reset
        writer.write(body[at : at + 65536])
        await writer.drain()
    assert await asyncio.wait_for(reader.read(), 10) == b""  # then the proxy closes
    writer.close()
    assert steps_of(pool) == []
