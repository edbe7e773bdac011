"""Headers between the agent and its upstream: what goes up, what comes back, the policy version.

Going up, hop-by-hop headers, ``X-AW-*`` and (unless the agent's own key is to be
forwarded) secrets are dropped and the configured key set. Coming back, a recorded
route relays only what an SDK acts on (retry, rate limits, request ids); a
pass-through route relays everything but hop-by-hop headers and cookies.
"""

from __future__ import annotations

from collections.abc import Mapping

from multidict import CIMultiDict

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
