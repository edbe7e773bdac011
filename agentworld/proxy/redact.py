"""Credentials an agent puts in a request body, kept out of the pool.

Headers that carry keys never reach a record (``upstream.SECRET_HEADERS``).
Some clients also send a key as a field of the body, beside the model
(``api_key``, as LiteLLM-style clients can, or through an SDK's
``extra_body``): the upstream still gets the body as the agent sent it, but
the step's recorded parameters and raw request leave such top-level fields
out.
"""

from __future__ import annotations

from typing import Any

from agentworld.proxy.upstream import SECRET_HEADERS

# Compared lower-cased, "-" read as "_": the secret headers' names, and the like.
SECRET_FIELDS = frozenset(
    {h.replace("-", "_") for h in SECRET_HEADERS}
    | {
        "apikey",
        "openai_api_key",
        "anthropic_api_key",
        "access_token",
        "auth_token",
        "bearer_token",
        "token",
        "secret",
        "client_secret",
        "password",
    }
)

_KIND: dict[str, bool] = {}  # field name as sent -> a secret? (names repeat: bounded cache)
_MAX_NAMES = 4096


def is_secret(name: str) -> bool:
    secret = _KIND.get(name)
    if secret is None:
        secret = name.lower().replace("-", "_") in SECRET_FIELDS
        if len(_KIND) < _MAX_NAMES:
            _KIND[name] = secret
    return secret


def without_secrets(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` itself when it has no credential field, else a copy without them."""
    for name in body:
        if is_secret(name):
            return {k: v for k, v in body.items() if not is_secret(k)}
    return body
