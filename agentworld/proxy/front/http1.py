"""The HTTP/1.1 the front speaks: a request head it may serve, and the head of its answers.

``parse_head`` reads the head of one request and returns it only when it is of
the plain kind agents send to a generation route: ``POST`` over HTTP/1.1, an
origin-form path with no ``%`` or dot segment, a query of
plain ``key=value`` pairs at most, ASCII header lines with
no control character and no folding, one ``Content-Length`` and no
``Transfer-Encoding``, ``Content-Encoding``, ``Expect`` or ``Upgrade``.
Anything else returns None, and the connection goes to aiohttp, which serves,
refuses or closes it as it always has: the front never has to decide what an
unusual request means.
"""

from __future__ import annotations

import time
from email.utils import formatdate
from http import HTTPStatus
from typing import NamedTuple

from multidict import CIMultiDict, CIMultiDictProxy

# What a head the front serves is made of, past its CRLF line ends: printable ASCII, HTAB.
_LINE_BYTES = bytes(range(0x20, 0x7F)) + b"\t"
# A token (RFC 9110 5.6.2): what a header name is made of.
_TOKEN = b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
# Headers whose presence means the front does not serve the request (the head lowercased,
# after a CRLF).
_HAND_OFF = ("\ntransfer-encoding:", "\ncontent-encoding:", "\nexpect:", "\nupgrade:")
# A query the front serves (Claude Code's "?beta=true") is made of these alone.
_QUERY_SAFE = str.maketrans(
    dict.fromkeys("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~=&")
)
MAX_HEAD = 16 * 1024  # a longer head goes to aiohttp (which allows 8 kB a line)


class Head(NamedTuple):
    """A request head the front serves."""

    path: str
    query: str  # only of letters, digits, "-._~", "=" and "&": the same decoded or not
    headers: CIMultiDictProxy[str]
    content_length: int
    keep_alive: bool


def parse_head(head: bytes) -> Head | None:
    """``head`` (a request's bytes up to, not including, the blank line) if the front serves
    it, else None."""
    if (
        # a byte over 0x7e, a control other than HTAB, a CR or LF not in a CRLF
        head.replace(b"\r\n", b"").translate(None, _LINE_BYTES)
        # a folded line (``find``: ``in`` on bytes costs a raised and cleared TypeError
        # in CPython, which tries the needle as an int first)
        or head.find(b"\r\n ") >= 0
        or head.find(b"\r\n\t") >= 0
    ):
        return None
    text = head.decode("ascii")
    request_line, _, rest = text.partition("\r\n")
    parts = request_line.split(" ")
    if len(parts) != 3 or parts[0] != "POST" or parts[2] != "HTTP/1.1":
        return None
    target, _, query = parts[1].partition("?")
    if target[:1] != "/" or "%" in target or "/." in target or "#" in target:
        return None
    if query and query.translate(_QUERY_SAFE):
        return None  # a query that would need decoding (aiohttp's, yarl's rules)
    pairs = [line.partition(":") for line in rest.split("\r\n")] if rest else []
    if any(not sep for _, sep, _ in pairs):
        return None  # a line that is not a header
    low = "\n" + rest.lower()
    if (
        "".join([name for name, _, _ in pairs]).encode("ascii").translate(None, _TOKEN)
        or any(h in low for h in _HAND_OFF)
        or low.count("\ncontent-length:") != 1
        or not all([name for name, _, _ in pairs])
    ):
        return None  # a name that is not a token, a body framed otherwise or not at all
    headers = CIMultiDict([(name, value.strip(" \t")) for name, _, value in pairs])
    value = headers["Content-Length"]
    if not value.isdigit() or len(value) > 15:
        return None
    keep_alive = True
    connection = headers.get("Connection")
    if connection is not None:
        tokens = {t.strip() for t in connection.lower().split(",")}
        if "upgrade" in tokens:
            return None
        keep_alive = "close" not in tokens
    return Head(target, query, CIMultiDictProxy(headers), int(value), keep_alive)


class Dates:
    """The ``Date`` header's value, formatted once a second."""

    def __init__(self) -> None:
        self._second = 0
        self._value = b""

    def now(self) -> bytes:
        second = int(time.time())
        if second != self._second:
            self._second = second
            self._value = formatdate(second, usegmt=True).encode("ascii")
        return self._value


_REASONS = {s.value: s.phrase for s in HTTPStatus}


def status_line(status: int, reason: str | None = None) -> bytes:
    phrase = reason or _REASONS.get(status, "")
    return f"HTTP/1.1 {status} {phrase}\r\n".encode("latin-1")


def header_lines(headers: object) -> bytes:
    """``Name: value`` CRLF lines of a (multi)dict's items, latin-1 as aiohttp writes them."""
    items = list(headers.items())  # type: ignore[attr-defined]
    text = "".join(f"{k}: {v}\r\n" for k, v in items)
    if text.count("\n") != len(items) or text.count("\r") != len(items):
        raise ValueError("a newline or carriage return in a response header")  # as aiohttp
    return text.encode("latin-1")
