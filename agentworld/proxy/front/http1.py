"""The HTTP/1.1 the front speaks: a request head it may serve, and the head of its answers.

``parse_head`` reads the head of one request and returns it only when it is of
the plain kind agents send to a generation route: ``POST`` over HTTP/1.1, an
origin-form path with no ``%`` or dot segment, a query of
plain ``key=value`` pairs at most, ASCII header lines with
no control character and no folding, one ``Content-Length`` and no
``Transfer-Encoding``, ``Content-Encoding``, ``Expect`` or ``Upgrade``.
Anything else returns None, and the connection goes to aiohttp, which serves,
refuses or closes it as it always has: the front never has to decide what an
unusual request means. ``parse_head_python`` is the definition; where the C
extension is built, ``parse_head`` has ``agentworld/proxy/_heads.c`` decide
(the same verdicts, see ``fast_heads``).
"""

from __future__ import annotations

import re
import time
from email.utils import formatdate
from http import HTTPStatus
from typing import NamedTuple

from multidict import CIMultiDict, CIMultiDictProxy

from agentworld.proxy import fast_heads

# The head the front serves: ``POST``, an origin-form target with no ``%`` or ``#`` and a
# query of letters, digits and "-._~=&" at most, HTTP/1.1, then header lines of a token name, a
# colon and a value of printable ASCII and HTAB (so no bare CR or LF, and no folded line,
# which would begin with a space or HTAB). The groups: target, query, the header block
# (each line after its CRLF).
_HEAD = re.compile(
    rb"POST (/[^ ?%#\x00-\x08\x0a-\x1f\x7f-\xff]*)(?:\?([-A-Za-z0-9._~=&]*))? HTTP/1\.1"
    rb"((?:\r\n[-!#$%&'*+.^_`|~0-9A-Za-z]+:[\t\x20-\x7e]*)*)"
)
# A header line of the block: its name and its value without the spaces and tabs around it.
_PAIR = re.compile(r"\r\n([^:]+):[ \t]*((?:[^\r]*[^\r \t])?)[ \t]*(?=\r|\Z)")
# Headers whose presence means the front does not serve the request (the block lowercased).
_HAND_OFF = re.compile(rb"\r\n(?:transfer-encoding|content-encoding|expect|upgrade):")
MAX_HEAD = 16 * 1024  # a longer head goes to aiohttp (which allows 8 kB a line)


class Head(NamedTuple):
    """A request head the front serves."""

    path: str
    query: str  # only of letters, digits, "-._~", "=" and "&": the same decoded or not
    headers: CIMultiDictProxy[str]
    content_length: int
    keep_alive: bool


_parse_request = fast_heads.parse_request
# Head(...) runs the Python __new__ a NamedTuple has (~2,800 instructions); the tuple made
# directly, as NamedTuple's own _make makes it, takes half that.
_new_head = tuple.__new__


def parse_head(head: bytes) -> Head | None:
    """``head`` (a request's bytes up to, not including, the blank line) if the front serves
    it, else None: read in C where the extension is built (a third to a quarter of the
    instructions: 11k for a 3-line head, 33k for the OpenAI SDK's 17 lines), else by
    ``parse_head_python``, the definition."""
    if _parse_request is None:
        return parse_head_python(head)
    got = _parse_request(head)
    if got is None:
        return None
    path, query, pairs, content_length, keep_alive = got
    return _new_head(
        Head, (path, query, CIMultiDictProxy(CIMultiDict(pairs)), content_length, keep_alive)
    )


def parse_head_python(head: bytes) -> Head | None:
    """What ``parse_head`` returns, read in Python: the definition the C reading is held to.

    One regular expression reads the request line and the header lines' shape (``_HEAD``);
    a handful of searches of the header block do the rest: a Python pass per line cost
    this more than all the front's other work for a call."""
    m = _HEAD.fullmatch(head)
    if m is None:
        return None
    target, query, block = m.groups()
    low = block.lower()
    if (
        target.find(b"/.") >= 0  # a dot segment
        or _HAND_OFF.search(low) is not None
        or low.count(b"\r\ncontent-length:") != 1
    ):
        return None  # a body framed otherwise or not at all
    headers = CIMultiDict(_PAIR.findall(block.decode("ascii")))
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
    return Head(
        target.decode("ascii"),
        query.decode("ascii") if query else "",
        CIMultiDictProxy(headers),
        int(value),
        keep_alive,
    )


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
# Status lines by (status, reason) as handlers give them: nearly all are a known status
# with its standard phrase (or none), written once here rather than formatted each time.
_STATUS_LINES = {
    (s.value, r): f"HTTP/1.1 {s.value} {s.phrase}\r\n".encode("latin-1")
    for s in HTTPStatus
    for r in (None, s.phrase)
}


def status_line(status: int, reason: str | None = None) -> bytes:
    line = _STATUS_LINES.get((status, reason))
    if line is not None:
        return line
    phrase = reason or _REASONS.get(status, "")
    return f"HTTP/1.1 {status} {phrase}\r\n".encode("latin-1")


def header_lines(headers: object) -> bytes:
    """``Name: value`` CRLF lines of a (multi)dict's items, latin-1 as aiohttp writes them."""
    items = headers.items()  # type: ignore[attr-defined]
    try:  # the usual str names and values: joined in C, not formatted a line at a time
        text = "\r\n".join(map(": ".join, items)) + "\r\n" if items else ""
    except TypeError:
        text = "".join([f"{k}: {v}\r\n" for k, v in items])
    n = len(items)
    if text.count("\n") != n or text.count("\r") != n:
        raise ValueError("a newline or carriage return in a response header")  # as aiohttp
    return text.encode("latin-1")
