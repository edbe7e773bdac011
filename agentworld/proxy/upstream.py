"""Talking to upstream model servers: headers, fault mapping, and the pass-through session."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

import aiohttp
from multidict import CIMultiDict

from agentworld.proxy.upstream_http import (
    UpstreamConnectError,
    UpstreamDisconnected,
    UpstreamProtocolError,
)

POLICY_HEADER = "X-AW-Policy-Version"

# Never forwarded in either direction (hop-by-hop, or rewritten by us).
HOP_HEADERS = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "content-encoding",
        "accept-encoding",
    }
)
SECRET_HEADERS = frozenset({"authorization", "x-api-key", "api-key"})


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


def make_session() -> aiohttp.ClientSession:
    """The proxy's one upstream session (connection pooling per upstream host)."""
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, ttl_dns_cache=300)
    return aiohttp.ClientSession(
        connector=connector,
        auto_decompress=False,
        skip_auto_headers=("User-Agent",),
    )


def upstream_headers(
    incoming: Mapping[str, str],
    api_key: str | None,
    *,
    forward_client_auth: bool,
    extra: Mapping[str, str] | None = None,
) -> CIMultiDict[str]:
    """Headers for the upstream: the agent's, minus hop-by-hop, secrets and X-AW-*, plus the key."""
    out: CIMultiDict[str] = CIMultiDict()
    keep_secrets = forward_client_auth and api_key is None
    for k, v in incoming.items():
        kind = _HEADER_KIND.get(k)
        if kind is None:
            kind = _header_kind(k)
        if kind == _DROP or (kind == _SECRET and not keep_secrets):
            continue
        out.add(k, v)
    if api_key is not None:
        out["Authorization"] = f"Bearer {api_key}"
    if extra:
        out.update(extra)
    return out


_KEEP, _DROP, _SECRET = 0, 1, 2
_HEADER_KIND: dict[str, int] = {}  # header name as sent -> what to do with it (names repeat)
_MAX_HEADER_NAMES = 4096


def _header_kind(name: str) -> int:
    lk = name.lower()
    if lk in HOP_HEADERS or lk.startswith("x-aw-"):
        kind = _DROP
    elif lk in SECRET_HEADERS:
        kind = _SECRET
    else:
        kind = _KEEP
    if len(_HEADER_KIND) < _MAX_HEADER_NAMES:  # bounded: agents may send arbitrary names
        _HEADER_KIND[name] = kind
    return kind


# Upstream response headers an agent's SDK acts on: retry and back-off (the OpenAI and
# Anthropic SDKs read these), rate-limit budgets, and request ids to quote to a provider.
# Recorded routes relay these and set the rest themselves.
_RELAY_NAMES = frozenset(
    {"retry-after", "retry-after-ms", "x-should-retry", "x-request-id", "request-id"}
)
_RELAY_PREFIXES = ("x-ratelimit-", "anthropic-ratelimit-")
_RELAY: dict[str, bool] = {}  # header name as sent -> relayed? (names repeat)


def relayed(headers: Mapping[str, str]) -> dict[str, str]:
    """The upstream headers a recorded route hands on to the agent (see ``_RELAY_NAMES``)."""
    out: dict[str, str] = {}
    for k, v in headers.items():
        keep = _RELAY.get(k)
        if keep is None:
            lk = k.lower()
            keep = lk in _RELAY_NAMES or lk.startswith(_RELAY_PREFIXES)
            if len(_RELAY) < _MAX_HEADER_NAMES:
                _RELAY[k] = keep
        if keep:
            out[k] = v
    return out


# A body relayed byte for byte keeps its Content-Encoding (the agent asked for it).
_NOT_RELAYED = (HOP_HEADERS - {"content-encoding"}) | {"set-cookie"}


def response_headers(upstream: Mapping[str, str]) -> CIMultiDict[str]:
    """The upstream's response headers that are safe to hand to the agent with its body as
    it came (pass-through routes)."""
    out: CIMultiDict[str] = CIMultiDict()
    for k, v in upstream.items():
        if k.lower() not in _NOT_RELAYED:
            out.add(k, v)
    return out


def policy_from(headers: Mapping[str, str]) -> int | None:
    """The policy version an upstream announces, if any (ignored when malformed)."""
    v = headers.get(POLICY_HEADER)
    if v is None:
        return None
    try:
        n = int(v.strip())
    except ValueError:
        return None
    return n if n >= 0 else None


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
