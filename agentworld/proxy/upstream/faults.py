"""What can go wrong with an upstream call, as the agent sees it and as its step records it.

``classify`` maps a client exception to a ``Fault`` (502/504 and an error type);
``not_a_stream`` and ``upstream_error_message`` read an upstream's answer that is
not what was asked; ``read_limited`` bounds what an error body may cost.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import aiohttp
import orjson

from agentworld.proxy.upstream.client import (
    UpstreamConnectError,
    UpstreamDisconnected,
    UpstreamProtocolError,
)


@dataclass(frozen=True)
class Fault:
    """An upstream failure, as the agent sees it (status) and as the record says it (type)."""

    status: int
    type: str
    message: str


def classify(exc: BaseException, url: str) -> Fault:
    """Map a client exception to 502/504 and an error type for the step record."""
    if isinstance(exc, asyncio.TimeoutError | aiohttp.ServerTimeoutError):
        return Fault(504, "upstream_timeout", f"upstream {url} timed out")
    if isinstance(exc, aiohttp.ClientConnectorError | UpstreamConnectError):
        return Fault(502, "upstream_unreachable", f"upstream {url} refused the connection: {exc}")
    if isinstance(
        exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError | UpstreamDisconnected
    ):
        return Fault(502, "upstream_disconnected", f"upstream {url} closed the connection: {exc}")
    if isinstance(exc, UpstreamProtocolError):
        return Fault(502, "upstream_invalid", f"upstream {url} sent invalid HTTP: {exc}")
    if isinstance(exc, aiohttp.ClientError | ConnectionError | OSError):
        return Fault(502, "upstream_error", f"upstream {url} failed: {type(exc).__name__}: {exc}")
    return Fault(502, "upstream_error", f"upstream {url}: {type(exc).__name__}: {exc}")


def not_a_stream(url: str, ctype: str) -> Fault:
    """A streamed call that the upstream answered 200 without an event stream (garbage,
    or a whole completion from one that ignores ``stream``): an answer of the wrong shape.
    Relayed, it would reach the agent's SDK as a stream of no events and no error."""
    msg = f"upstream {url} answered a stream as {ctype or 'no content type'}, not an event stream"
    return Fault(502, "upstream_invalid", msg)


def upstream_error_message(raw: bytes) -> str:
    """The message of an upstream error body (OpenAI or vLLM shape), else its text."""
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


async def read_limited(resp: aiohttp.ClientResponse, limit: int) -> bytes:
    """The whole body, refusing bodies over ``limit`` bytes (bounded memory)."""
    chunks = []
    size = 0
    async for data in resp.content.iter_any():
        size += len(data)
        if size > limit:
            raise aiohttp.ClientPayloadError(f"response body over {limit} bytes")
        chunks.append(data)
    return b"".join(chunks)
