"""The compiled reading of HTTP heads (agentworld/proxy/_heads.c) against the Python
definitions it stands in for: ``parse_head_python`` (the agent's request head) and
``parse_response_head_python`` (the upstream's response head).

A request head gets the same verdict from both (None, or the same fields, header pairs in
order); a response head the same fields, where the C reading declines (None) exactly the
heads Python refuses and those whose status is not three digits, which Python reads. The
heads: real ones (the OpenAI and Anthropic SDKs, curl, Claude Code; vLLM, OpenAI and
Anthropic answers), every out-of-the-ordinary case we could think of, every cut of them,
and a seeded mutation fuzz of tens of thousands of each.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from multidict import CIMultiDictProxy

from agentworld.proxy import fast_heads
from agentworld.proxy.front.http1 import Head, parse_head, parse_head_python
from agentworld.proxy.upstream.client import (
    UpstreamProtocolError,
    parse_response_head,
    parse_response_head_python,
)
from tests.proxy.test_front import OUT_OF_THE_ORDINARY, PLAIN

pytestmark = pytest.mark.skipif(
    fast_heads.parse_request is None,
    reason="the C extension agentworld.proxy._heads is not built here (no compiler at "
    "install), or AW_NO_EXTENSIONS is set: the proxy reads heads in Python",
)

ROOT = Path(__file__).resolve().parents[2]


def sound(text: object) -> bool:
    """A str made right: marked ASCII exactly when it is (equality alone would not tell a
    latin-1 string made with the ASCII flag from the right one)."""
    return type(text) is str and text.isascii() == all(ord(c) < 128 for c in text)


def crlf(*lines: str | bytes) -> bytes:
    return b"\r\n".join(x.encode("latin-1") if isinstance(x, str) else x for x in lines)


# ---------------------------------------------------------------- request heads

OPENAI_SDK = crlf(
    "POST /v1/chat/completions HTTP/1.1",
    "Host: 127.0.0.1:8000",
    "Accept-Encoding: gzip, deflate",
    "Connection: keep-alive",
    "Accept: application/json",
    "Content-Type: application/json",
    "User-Agent: OpenAI/Python 1.99.9",
    "X-Stainless-Lang: python",
    "X-Stainless-Package-Version: 1.99.9",
    "X-Stainless-OS: Linux",
    "X-Stainless-Arch: x64",
    "X-Stainless-Runtime: CPython",
    "X-Stainless-Runtime-Version: 3.11.7",
    "Authorization: Bearer sk-proj-0123456789abcdef",
    "X-Stainless-Async: false",
    "x-stainless-retry-count: 0",
    "x-stainless-read-timeout: 600",
    "Content-Length: 512",
)
OPENAI_SDK_LOWER = crlf(
    "POST /t/tr_01jz/g/grp-7/v1/chat/completions HTTP/1.1",
    "host: localhost:4000",
    "accept-encoding: gzip, deflate, zstd",
    "connection: keep-alive",
    "accept: application/json",
    "content-type: application/json",
    "user-agent: AsyncOpenAI/Python 1.99.9",
    "x-stainless-lang: python",
    "x-stainless-async: async:asyncio",
    "authorization: Bearer EMPTY",
    "content-length: 2048",
)
ANTHROPIC_SDK = crlf(
    "POST /v1/messages HTTP/1.1",
    "Host: 127.0.0.1:8000",
    "Accept-Encoding: gzip, deflate",
    "Connection: keep-alive",
    "Accept: application/json",
    "Content-Type: application/json",
    "User-Agent: Anthropic/Python 0.64.0",
    "X-Stainless-Lang: python",
    "X-Stainless-Package-Version: 0.64.0",
    "X-Stainless-Runtime: CPython",
    "anthropic-version: 2023-06-01",
    "X-Api-Key: sk-ant-api03-xyz",
    "x-stainless-timeout: 600",
    "Content-Length: 301",
)
CURL = crlf(
    "POST /v1/chat/completions HTTP/1.1",
    "Host: localhost:8000",
    "User-Agent: curl/8.5.0",
    "Accept: */*",
    "Content-Type: application/json",
    "Content-Length: 95",
)
CLAUDE_CODE = crlf(
    "POST /a/claude.code/v1/messages?beta=true HTTP/1.1",
    "host: 127.0.0.1:8000",
    "connection: keep-alive",
    "Accept: application/json",
    "X-Stainless-Retry-Count: 0",
    "X-Stainless-Timeout: 600",
    "X-Stainless-Lang: js",
    "X-Stainless-Package-Version: 0.55.1",
    "X-Stainless-OS: Linux",
    "X-Stainless-Arch: x64",
    "X-Stainless-Runtime: node",
    "X-Stainless-Runtime-Version: v22.17.0",
    "anthropic-dangerous-direct-browser-access: true",
    "anthropic-version: 2023-06-01",
    "authorization: Bearer sk-ant-oat01-abc",
    "x-app: cli",
    "User-Agent: claude-cli/1.0.83 (external, cli)",
    "content-type: application/json",
    "anthropic-beta: claude-code-20250219,oauth-2025-04-20,interleaved-thinking-2025-05-14",
    "x-stainless-helper-method: stream",
    "accept-language: *",
    "sec-fetch-mode: cors",
    "accept-encoding: br, gzip, deflate",
    "content-length: 18734",
)
REQUESTS = [PLAIN, OPENAI_SDK, OPENAI_SDK_LOWER, ANTHROPIC_SDK, CURL, CLAUDE_CODE]

# Beside test_front's OUT_OF_THE_ORDINARY: PLAIN with `old` made `new`, served or not.
MORE_REQUESTS = [
    (b"completions ", b"completions? "),  # an empty query
    (b"completions ", b"completions?a=1&b=-._~ "),
    (b"completions ", b"completions?a=1?b "),
    (b"completions ", b"completions#x "),
    (b"completions ", b"completions\t "),  # HTAB: in the path the expression allows
    (b"completions ", b"completions/. "),
    (b"completions ", b"completions/ "),
    (b"/v1/chat", b"/v1//chat"),
    (b"/v1/chat", b"/.well-known"),
    (b"/v1/chat", b"/v1/.chat"),
    (b"/v1/chat", b"/v1/ch.at"),
    (b"/v1/chat", b"/v1/ch\x7fat"),
    (b"/v1/chat", b"/v1/ch\x80at"),
    (b"POST /", b"POST  /"),
    (b"POST /", b"post /"),
    (b"POST /", b"POST http://host/"),
    (b"HTTP/1.1\r\n", b"HTTP/1.1 \r\n"),
    (b"HTTP/1.1\r\n", b"http/1.1\r\n"),
    (b"HTTP/1.1\r\n", b"HTTP/1.10\r\n"),
    (b"Content-Length: 12", b"Content-Length:12"),
    (b"Content-Length: 12", b"Content-Length: \t 12 \t "),
    (b"Content-Length: 12", b"Content-Length: 000000000000012"),
    (b"Content-Length: 12", b"Content-Length: 999999999999999"),
    (b"Content-Length: 12", b"Content-Length: 1000000000000000"),
    (b"Content-Length: 12", b"Content-Length: 0"),
    (b"Content-Length: 12", b"Content-Length: "),
    (b"Content-Length: 12", b"Content-Length: +12"),
    (b"Content-Length: 12", b"Content-Length: 0x12"),
    (b"Content-Length: 12", b"CONTENT-LENGTH: 12"),
    (b"Content-Length: 12", b"Content-Length : 12"),
    (b"Content-Length: 12", b"Content-Length: 12\r\nTransfer-Encoding: identity"),
    (b"Content-Length: 12", b"Content-Length: 12\r\nContent-Lengths: 1"),
    (b"Content-Length: 12", b"Content-Length: 12\r\nX-Content-Length: 1"),
    (b"Content-Length: 12", b"Content-Length: 12\r\ncontent-length: 12"),
    (b"Content-Length: 12", b"Content-Length: 12\r\nExpects: x\r\nUpgraded: y"),
    (b"Content-Length: 12", b"Content-Length: 12\r\nTransfer-Encodings: x"),
    (b"Content-Length: 12", b"Content-Length: 12\r\nX: a: b:c"),
    (b"Content-Length: 12", b"Content-Length: 12\r\nX:"),
    (b"Content-Length: 12", b"Content-Length: 12\r\nX: \t "),
    (b"Content-Length: 12", b"Content-Length: 12\r\nX:\t a \tb\t "),
    (b"Content-Length: 12", b"Content-Length: 12\r\n!#$%&'*+-.^_`|~09azAZ: v"),
    (b"Content-Length: 12", b"Content-Length: 12\r\nX: caf\xe9"),
    (b"Content-Length: 12", b"Content-Length: 12\r\nX: a\rb"),
    (b"Content-Length: 12", b"Content-Length: 12\r\nX: a\x0bb"),
    (b"Content-Length: 12", b"Content-Length: 12\r\nX(y): z"),
    (b"Content-Length: 12", b"Content-Length: 12\r\n"),
    (b"Content-Length: 12", b"Content-Length: 12\r\n\r\n"),
    (b"Content-Length: 12", b"Content-Length: 12\r"),
    (b"Content-Length: 12", b"Content-Length: 12\n"),
    (b"keep-alive", b"close"),
    (b"keep-alive", b"Close"),
    (b"keep-alive", b" close ,keep-alive"),
    (b"keep-alive", b"keep-alive,\tclose\t"),
    (b"keep-alive", b"closed"),
    (b"keep-alive", b"keep-alive, upgrade"),
    (b"keep-alive", b"UPGRADE, close"),
    (b"keep-alive", b"upgrades"),
    (b"keep-alive", b""),
    (b"keep-alive", b","),
    (b"keep-alive", b"keep-alive\r\nConnection: close"),  # only the first counts
    (b"keep-alive", b"keep-alive\r\nConnection: upgrade"),
    (b"Connection: keep-alive", b"Connection: close\r\nconnection: keep-alive"),
    (b"Connection: keep-alive", b"Connections: close"),
    (b"Connection: keep-alive", b"X-Connection: close"),
    (b"\r\nConnection: keep-alive", b""),
]


def requests() -> list[bytes]:
    heads = list(REQUESTS)
    for old, new in [*OUT_OF_THE_ORDINARY, *MORE_REQUESTS]:
        assert old in PLAIN
        heads.append(PLAIN.replace(old, new, 1))
    heads += [b"", b"POST", b"POST /", b"POST / HTTP/1.1", b"POST / HTTP/1.1\r\n"]
    heads += [b"POST / HTTP/1.1\r\nContent-Length: 1", b"POST /?x HTTP/1.1\r\nContent-Length:1"]
    return heads


def agree_request(head: bytes) -> tuple | None:
    """The C verdict on ``head``, having checked that it is Python's, and that parse_head
    (which uses it) returns what parse_head_python does."""
    want = parse_head_python(head)
    got = fast_heads.parse_request(head)
    if want is None:
        assert got is None, head
        assert parse_head(head) is None
        return None
    assert got == (
        want.path,
        want.query,
        list(want.headers.items()),
        want.content_length,
        want.keep_alive,
    ), head
    path, query, pairs, length, keep_alive = got
    assert sound(path) and sound(query) and type(pairs) is list
    assert all(sound(k) and sound(v) for k, v in pairs)
    assert type(length) is int and type(keep_alive) is bool
    head_c = parse_head(head)
    assert type(head_c) is Head and type(head_c.headers) is CIMultiDictProxy
    assert head_c == want._replace(headers=head_c.headers)
    assert list(head_c.headers.items()) == list(want.headers.items())
    return got


def test_request_heads_agree() -> None:
    verdicts = [agree_request(head) for head in requests()]
    assert [v is not None for v in verdicts[: len(REQUESTS)]] == [True] * len(REQUESTS)
    served = sum(v is not None for v in verdicts)
    assert 30 < served < len(verdicts) - 30  # both verdicts well represented


def test_request_heads_read_as_the_sdks_send_them() -> None:
    got = fast_heads.parse_request(CLAUDE_CODE)
    assert got is not None
    path, query, pairs, length, keep_alive = got
    assert (path, query) == ("/a/claude.code/v1/messages", "beta=true")
    assert (length, keep_alive) == (18734, True)
    assert pairs[0] == ("host", "127.0.0.1:8000") and len(pairs) == 23
    got = fast_heads.parse_request(PLAIN.replace(b"Content-Length: 12", b"Content-Length:\t 0 "))
    assert got is not None and got[3] == 0 and ("Content-Length", "0") in got[2]


def test_every_cut_of_a_request_head() -> None:
    for head in REQUESTS:
        for k in range(len(head) + 1):
            agree_request(head[:k])
            agree_request(head[k:])


# ---------------------------------------------------------------- response heads

VLLM_STREAM = crlf(
    "HTTP/1.1 200 OK",
    "date: Fri, 04 Dec 2026 10:00:00 GMT",
    "server: uvicorn",
    "content-type: text/event-stream; charset=utf-8",
    "transfer-encoding: chunked",
)
VLLM_UNARY = crlf(
    "HTTP/1.1 200 OK",
    "date: Fri, 04 Dec 2026 10:00:00 GMT",
    "server: uvicorn",
    "content-length: 1387",
    "content-type: application/json",
)
VLLM_ERROR = crlf(
    "HTTP/1.1 400 Bad Request",
    "date: Fri, 04 Dec 2026 10:00:00 GMT",
    "server: uvicorn",
    "content-length: 183",
    "content-type: application/json",
)
OPENAI = crlf(
    "HTTP/1.1 200 OK",
    "Date: Fri, 04 Dec 2026 10:00:00 GMT",
    "Content-Type: text/event-stream; charset=utf-8",
    "Transfer-Encoding: chunked",
    "Connection: keep-alive",
    "access-control-expose-headers: X-Request-ID",
    "openai-organization: user-abc123",
    "openai-processing-ms: 312",
    "openai-project: proj_abc123",
    "openai-version: 2020-10-01",
    "x-envoy-upstream-service-time: 316",
    "x-ratelimit-limit-requests: 10000",
    "x-ratelimit-limit-tokens: 30000000",
    "x-ratelimit-remaining-requests: 9999",
    "x-ratelimit-remaining-tokens: 29999950",
    "x-ratelimit-reset-requests: 6ms",
    "x-ratelimit-reset-tokens: 0s",
    "x-request-id: req_0123456789abcdef",
    "strict-transport-security: max-age=31536000; includeSubDomains; preload",
    "cf-cache-status: DYNAMIC",
    "Set-Cookie: __cf_bm=abc; path=/; expires=Fri, 04-Dec-26 10:30:00 GMT; domain=.api.openai.com; HttpOnly; Secure; SameSite=None",
    "X-Content-Type-Options: nosniff",
    "Server: cloudflare",
    "CF-RAY: 8f1e2d3c4b5a6978-SJC",
    'alt-svc: h3=":443"; ma=86400',
)
ANTHROPIC = crlf(
    "HTTP/1.1 200 OK",
    "Date: Fri, 04 Dec 2026 10:00:00 GMT",
    "Content-Type: text/event-stream; charset=utf-8",
    "Transfer-Encoding: chunked",
    "Connection: keep-alive",
    "Cache-Control: no-cache",
    "anthropic-ratelimit-requests-limit: 4000",
    "anthropic-ratelimit-requests-remaining: 3999",
    "anthropic-ratelimit-requests-reset: 2026-12-04T10:00:01Z",
    "anthropic-ratelimit-input-tokens-limit: 400000",
    "request-id: req_011CUq",
    "anthropic-organization-id: 0a1b2c3d-0000-4000-8000-000000000000",
    "via: 1.1 google",
    "cf-cache-status: DYNAMIC",
    "X-Robots-Tag: none",
    "Server: cloudflare",
    "CF-RAY: 8f1e2d3c4b5a6978-LAX",
)
BENCH = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked"
RESPONSES = [VLLM_STREAM, VLLM_UNARY, VLLM_ERROR, OPENAI, ANTHROPIC, BENCH]

ODD_RESPONSES = [
    b"HTTP/1.1 100 Continue",
    b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload",
    b"HTTP/1.1 101 Switching Protocols\r\nno colon: in a 1xx is not read\r\nnor here",
    b"HTTP/1.1 199",
    b"HTTP/1.0 200 OK\r\nContent-Type: text/plain",
    b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2",
    b"HTTP/1.1 204 No Content",
    b"HTTP/1.1 304 Not Modified\r\nETag: x",
    b"HTTP/1.1 200",
    b"HTTP/1.1 200 ",
    b"HTTP/1.1 200 OK  \t",
    b"HTTP/1.1 200   OK then  more  ",
    b"  HTTP/1.1  200  OK",
    b"HTTP/1.1\t200\tOK",
    b"HTTP/1.1\x0b200\x0cOK\x0b",
    b"HTTP/1.1 200\rOK",
    b"HTTP/1.1\n200 OK\r\nX: y",
    b"HTTP/1.1 200 OK\r",
    b"HTTP/1.1 200 OK\n",
    b"HTTP/1.1 200 Caf\xe9 \xff",
    b"HTTP/ 200 OK",
    b"HTTP/2 200",
    b"HTTP/1.1 999 Whatever",
    b"HTTP/1.1 000 Zero",
    b"HTTP/1.1 099 x",
    b"HTTP/1.1 +200 OK",
    b"HTTP/1.1 -200 OK",
    b"HTTP/1.1 0200 OK",
    b"HTTP/1.1 2_00 OK",
    b"HTTP/1.1 20 OK",
    b"HTTP/1.1 2000 OK",
    b"HTTP/1.1 \xd9\xa2\xd9\xa0\xd9\xa0 OK",
    b"HTTP/1.1 abc OK",
    b"HTTP/1.1 2a0 OK",
    b"HTTP/1.1",
    b"HTTP/1.1 ",
    b"http/1.1 200 OK",
    b"HTTPS/1.1 200 OK",
    b"HTTP 200 OK",
    b"SMTP ready",
    b"",
    b" ",
    b"\r\n",
    b"\r\nHTTP/1.1 200 OK",
    b"HTTP/1.1 200 OK\r\nno colon here",
    b"HTTP/1.1 200 OK\r\n",
    b"HTTP/1.1 200 OK\r\n\r\nX: y",
    b"HTTP/1.1 200 OK\r\nX: y\r\n",
    b"HTTP/1.1 200 OK\r\n: an empty name",
    b"HTTP/1.1 200 OK\r\n:",
    b"HTTP/1.1 200 OK\r\nX:",
    b"HTTP/1.1 200 OK\r\nX:  \t ",
    b"HTTP/1.1 200 OK\r\n \t X \t :\x0b y \x0c\r",
    b"HTTP/1.1 200 OK\r\nX: a:b: c",
    b"HTTP/1.1 200 OK\r\nX: caf\xe9\r\n\xff\x80: \x00\x01",
    b"HTTP/1.1 200 OK\r\nX: a\nb\r\nY: c\rd\r\nZ\n: e",
    b"HTTP/1.1 200 OK\r\nX: y\nno colon",
    b"HTTP/1.1 200 OK\r\nX: 1\r\nx: 2\r\nX: 3",
    b"HTTP/1.1 200 OK\r\nContent-Length: x",
    b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\nConnection: close",
    b"HTTP/1.1 200 OK\r\nX: \x1c\x1d\x1e\x1f\x85\xa0y\x1c\xa0",
]


def agree_response(block: bytes) -> tuple | None:
    """The C reading of ``block``, having checked it against Python's: the same fields where
    it reads the head, None exactly where Python refuses it or its status is not three
    digits; and that parse_response_head (which uses it) returns or raises as Python."""
    try:
        want = parse_response_head_python(block)
    except UpstreamProtocolError as exc:
        want = exc
    got = fast_heads.parse_response(block)
    if got is None:
        line = block.split(b"\r\n")[0].split(None, 2)
        odd_status = len(line) > 1 and re.fullmatch(rb"[0-9]{3}", line[1]) is None
        assert isinstance(want, UpstreamProtocolError) or odd_status, block
    else:
        assert not isinstance(want, Exception), block
        headers = want[3]
        assert got == (*want[:3], None if headers is None else list(headers.items())), block
        status, reason, version, pairs = got
        assert type(status) is int and sound(reason) and type(version) is bytes
        assert pairs is None or all(sound(k) and sound(v) for k, v in pairs)
    if isinstance(want, Exception):
        with pytest.raises(UpstreamProtocolError) as raised:
            parse_response_head(block)
        assert str(raised.value) == str(want)
    else:
        again = parse_response_head(block)
        assert again[:3] == want[:3]
        assert (again[3] is None) == (want[3] is None)
        if want[3] is not None:
            assert list(again[3].items()) == list(want[3].items())
    return got


def test_response_heads_agree() -> None:
    for block in RESPONSES:
        got = agree_response(block)
        assert got is not None and got[3]  # the ordinary ones all read in C
    verdicts = [agree_response(block) for block in ODD_RESPONSES]
    assert 20 < sum(v is not None for v in verdicts) < len(verdicts) - 20


def test_response_heads_read_as_servers_send_them() -> None:
    assert fast_heads.parse_response(VLLM_STREAM) == (
        200,
        "OK",
        b"HTTP/1.1",
        [
            ("date", "Fri, 04 Dec 2026 10:00:00 GMT"),
            ("server", "uvicorn"),
            ("content-type", "text/event-stream; charset=utf-8"),
            ("transfer-encoding", "chunked"),
        ],
    )
    assert fast_heads.parse_response(b"HTTP/1.1 103 Early Hints\r\nno colon") == (
        103,
        "Early Hints",
        b"HTTP/1.1",
        None,
    )
    got = fast_heads.parse_response(OPENAI)
    assert got is not None and len(got[3]) == 24
    assert got[3][-1] == ("alt-svc", 'h3=":443"; ma=86400')


def test_every_cut_of_a_response_head() -> None:
    for block in [*RESPONSES, *ODD_RESPONSES[:8]]:
        for k in range(len(block) + 1):
            agree_response(block[:k])
            agree_response(block[k:])


def test_long_heads() -> None:
    lines = [f"X-Header-{k}: value {k}" for k in range(300)]
    request = agree_request(crlf(PLAIN, *lines))
    assert request is not None and len(request[2]) == 307
    response = agree_response(crlf(OPENAI, *lines, "Caf\xe9: cr\xe8me"))
    assert response is not None and len(response[3]) == 325
    assert response[3][-1] == ("Caf\xe9", "cr\xe8me")


# ---------------------------------------------------------------- the fuzz

ALPHABET = [
    b"\r", b"\n", b"\r\n", b"\r\n\r\n", b" ", b"\t", b"  ", b":", b"?", b"%", b"/", b".",
    b"/.", b"#", b"&", b"=", b"~", b",", b"-", b"_", b"+", b"0", b"1", b"9", b"a", b"Z",
    b"\x00", b"\x01", b"\x0b", b"\x0c", b"\x1c", b"\x7f", b"\x80", b"\x85", b"\xa0", b"\xe9",
    b"\xff", b"\xc3\xa9", b"\xd9\xa2",
    b"\r\nContent-Length: 3", b"\r\ncontent-length:0", b"\r\nContent-Length: 12 ",
    b"\r\nTransfer-Encoding: x", b"\r\nContent-Encoding: gzip", b"\r\nExpect: 100-continue",
    b"\r\nUpgrade: h2c", b"\r\nConnection: close", b"\r\nconnection: Upgrade, close",
    b"\r\nConnection: keep-alive", b"\r\nX: y", b"\r\n x: y", b"\r\nno colon", b"\r\n:",
    b"close", b"upgrade", b"keep-alive", b"?a=b", b"/../", b"POST ", b"GET ", b"HTTP/1.0",
    b"HTTP/1.1", b" HTTP/1.1", b"HTTP/", b" 200 ", b" 100 ", b" 204 ", b"+", b"_",
]  # fmt: skip


def mutate(rng: random.Random, head: bytes) -> bytes:
    b = bytearray(head)
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3, 5))):
        i = rng.randrange(len(b) + 1)
        op = rng.randrange(7)
        if op in (0, 1):  # something from the alphabet put in
            b[i:i] = rng.choice(ALPHABET)
        elif op == 2 and i < len(b):  # a byte replaced by one of the alphabet's
            b[i : i + 1] = rng.choice(ALPHABET)[:1]
        elif op == 3:  # a span removed
            del b[i : i + rng.choice((1, 1, 2, 4, 12))]
        elif op == 4:  # a span repeated
            j = rng.randrange(len(b) + 1)
            b[i:i] = b[min(i, j) : max(i, j)][:60]
        elif op == 5 and i < len(b):  # a letter's case flipped (names are case-blind)
            b[i : i + 1] = bytes(b[i : i + 1]).swapcase()
        elif op == 6 and i < len(b):  # any byte
            b[i] = rng.randrange(256)
    return bytes(b)


@pytest.mark.parametrize("seed", range(4))
def test_mutated_request_heads(seed: int) -> None:
    """Seeded mutations of the request heads (25,000 a seed): the same verdicts."""
    rng = random.Random(seed)
    corpus = requests()
    served = 0
    for _ in range(25_000):
        head = rng.choice(REQUESTS if rng.random() < 0.5 else corpus)
        for _ in range(rng.choice((1, 1, 2))):
            head = mutate(rng, head)
        served += agree_request(head) is not None
    assert served > 3000  # the mutations also make heads the front serves


@pytest.mark.parametrize("seed", range(4))
def test_mutated_response_heads(seed: int) -> None:
    """Seeded mutations of the response heads (25,000 a seed): the same readings."""
    rng = random.Random(seed)
    corpus = [*RESPONSES, *ODD_RESPONSES]
    read = 0
    for _ in range(25_000):
        block = rng.choice(RESPONSES if rng.random() < 0.5 else corpus)
        for _ in range(rng.choice((1, 1, 2))):
            block = mutate(rng, block)
        read += agree_response(block) is not None
    assert read > 10_000  # most still read in C


# ---------------------------------------------------------------- the switch and the calls


def test_aw_no_extensions_turns_it_off() -> None:
    code = (
        "from agentworld.proxy import fast_heads\n"
        "from agentworld.proxy.front import http1\n"
        "from agentworld.proxy.upstream import client\n"
        "print(fast_heads.parse_request is None, http1._parse_request is None,\n"
        "      client._parse_response is None)\n"
        "print(http1.parse_head(b'POST / HTTP/1.1\\r\\nContent-Length: 2').content_length)\n"
        "print(client.parse_response_head(b'HTTP/1.1 204 None\\r\\nA: b')[3]['a'])\n"
    )
    on = "False False False"
    for value, off in (("1", "True True True"), ("0", on), ("", on)):
        env = {**os.environ, "AW_NO_EXTENSIONS": value, "PYTHONPATH": str(ROOT)}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, check=True)
        assert out.stdout.decode().split("\n")[:3] == [off, "2", "b"], value


def test_the_functions_take_bytes_like_objects_only() -> None:
    for read, head in ((fast_heads.parse_request, PLAIN), (fast_heads.parse_response, OPENAI)):
        want = read(head)
        assert want is not None
        assert read(bytearray(head)) == want and read(memoryview(head)) == want
        for wrong in (head.decode(), None, 1, [head]):
            with pytest.raises(TypeError):
                read(wrong)
        with pytest.raises(TypeError):
            read()
        with pytest.raises(TypeError):
            read(head, head)


# ---------------------------------------------------------------- chunked bodies


def decode_all(body: bytes, cuts: list[int], fast: bool, monkeypatch: pytest.MonkeyPatch) -> tuple:
    """``_decode_chunks`` over ``body`` arriving in pieces cut at ``cuts``, with the C run or
    without: (data, complete, error, what is left in the buffer, the count it stopped at)."""
    from multidict import CIMultiDict

    from agentworld.proxy.upstream import client
    from agentworld.proxy.upstream.client import UpstreamResponse, _Conn

    monkeypatch.setattr(client, "_chunk_run", fast_heads.chunk_run if fast else None)
    resp = UpstreamResponse(
        None, ("http", "h", 1), _Conn(), 200, "OK", CIMultiDict(), "chunked", 0, True, 1.0
    )  # type: ignore[arg-type]
    buf, got, start = bytearray(), b"", 0
    try:
        for cut in [*cuts, len(body)]:
            buf += body[start:cut]
            start = cut
            if not resp.complete:
                got += resp._decode_chunks(buf)
    except UpstreamProtocolError as exc:
        return got, resp.complete, str(exc), bytes(buf), resp._left
    return got, resp.complete, None, bytes(buf), resp._left


CHUNK_BITS = [
    b"\r\n", b"\r", b"\n", b";ext=1", b" ", b"0", b"00", b"f", b"F", b"g", b"123456789",
    b"-1", b"0\r\n\r\n", b"0\r\nX-T: 1\r\n\r\n", b"5\r\nhello\r\n", b"\x00", b"data: x\n\n",
]  # fmt: skip


def chunked(rng: random.Random) -> bytes:
    events = [b"data: %d\n\n" % rng.randrange(10 ** rng.randrange(1, 30)) for _ in range(8)]
    hexes = [b"%x", b"%X", b"%08x", b"%x;a=b"]
    body = b"".join(b"%s\r\n%s\r\n" % (rng.choice(hexes) % len(e), e) for e in events)
    return body + b"0\r\n\r\n" + b"HTTP/1.1 200 OK\r\n"


@pytest.mark.parametrize("seed", range(4))
def test_chunked_bodies_read_the_same_with_the_c_run(seed: int, monkeypatch) -> None:
    rng = random.Random(seed)
    for _ in range(1500):
        body = chunked(rng)
        for _ in range(rng.randrange(3)):  # damage it, now and then
            pos = rng.randrange(len(body) + 1)
            cut = pos + rng.randrange(3)
            body = body[:pos] + rng.choice(CHUNK_BITS) + body[cut:]
        cuts = sorted(rng.sample(range(len(body) + 1), rng.randrange(4)))
        assert decode_all(body, cuts, True, monkeypatch) == decode_all(
            body, cuts, False, monkeypatch
        ), (body, cuts)


def test_chunk_run_reads_whole_chunks_only() -> None:
    run = fast_heads.chunk_run
    assert run(b"5\r\nhello\r\n3\r\nabc\r\n0\r\n\r\n", 0) == (b"helloabc", 18)
    assert run(b"xx5\r\nhello\r\n", 2) == (b"hello", 12)
    assert run(b"5\r\nhell", 0) == (b"", 0)  # not all here yet
    assert run(b"5\r\nhelloX\r\n", 0) == (b"", 0)  # no CRLF after its data
    assert run(b"5;x=1\r\nhello\r\n", 0) == (b"", 0)  # an extension: the loop reads it
    assert run(b"000000005\r\nhello\r\n", 0) == (b"", 0)  # nine digits: the loop reads it
    assert run(b"0\r\n\r\n", 0) == (b"", 0)  # the last chunk: the loop reads it
    with pytest.raises(ValueError):
        run(b"", 1)
