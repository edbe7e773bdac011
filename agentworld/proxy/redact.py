"""Credentials kept out of the pool: one rule, applied where every record is written.

Headers that carry keys never reach a record (``upstream.SECRET_HEADERS``).
Some clients also send a key as a field of the body, beside the model
(``api_key``, as LiteLLM-style clients can, or through an SDK's
``extra_body``), or inside an object such as ``metadata``, or a tool's
``authorization`` and ``headers``; an upstream echoes them back (a Responses
answer repeats the request's ``metadata`` and tools), or quotes the agent's key
in an error message. The upstream still gets the body as the agent sent it, but
``redact_record`` runs on every record the proxy writes (``Recorder``): fields
named as credentials are left out of its request, raw request and answer,
metadata and error, and the key values the proxy saw in headers
(``KnownKeys``) are masked wherever they appear in it.

A field is a credential by its name, read without case or separators (so
``apiKey``, ``api-key`` and ``API_KEY`` are one name): it holds a credential
word (``apikey``, ``secret``, ``password``, ``private_key``...), or it ends in
``token``. Singular: the generation parameters that name tokens count them
(``max_tokens``, ``skip_special_tokens``) or list them (``stop_token_ids``),
and a tokenizer's special tokens (``bos_token``, a chat template's variable)
are not credentials either.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from agentworld.proxy.upstream.headers import SECRET_HEADERS

# Read in a name with case and separators left out ("x-api-key" -> "xapikey").
CREDENTIAL_WORDS = (
    "apikey",
    "secret",  # client_secret, aws_secret_access_key, secret_key
    "password",
    "passwd",
    "passphrase",
    "privatekey",
    "credential",
    "authorization",
    "cookie",
    "sessionkey",
    "accesskey",
)
CREDENTIAL_NAMES = frozenset({"auth", "bearer"} | {h.replace("-", "") for h in SECRET_HEADERS})
# Names ending in "token" that are a tokenizer's special tokens, not credentials.
SPECIAL_TOKENS = frozenset(
    f"{role}token" for role in ("bos", "eos", "pad", "unk", "sep", "cls", "mask")
)

# Keys whose object is keyed by names a JSON schema chose (a structured output's fields,
# a tool's parameters): a property called "password" is part of the answer's shape.
SCHEMA_NAME_MAPS = frozenset(
    {
        "properties",
        "patternProperties",
        "$defs",
        "definitions",
        "dependentSchemas",
        "dependentRequired",
    }
)
# Lists of settings, not conversation, searched as objects are: a tool or server that the
# model's host reaches carries its credential (an MCP tool's ``authorization`` and
# ``headers``, an Anthropic MCP server's ``authorization_token``).
SETTINGS_LISTS = frozenset({"tools", "mcp_servers"})
# How deep objects within objects are searched; one nested deeper is left out whole.
MAX_DEPTH = 32

_KIND: dict[str, bool] = {}  # field name as sent -> a secret? (names repeat: bounded cache)
_MAX_NAMES = 4096


def is_secret(name: str) -> bool:
    """Whether a body field of this name holds a credential (see the module's docstring)."""
    secret = _KIND.get(name)
    if secret is None:
        secret = _names_credential(name)
        if len(_KIND) < _MAX_NAMES:
            _KIND[name] = secret
    return secret


def _names_credential(name: str) -> bool:
    bare = "".join(c for c in name.lower() if c.isalnum())
    if bare in CREDENTIAL_NAMES or any(w in bare for w in CREDENTIAL_WORDS):
        return True
    return bare.endswith("token") and bare not in SPECIAL_TOKENS


def without_secrets(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` itself when it holds no credential field, else a copy without them.

    Objects within objects are searched too (``metadata.api_key``), and the objects
    of a list of settings (``SETTINGS_LISTS``: tools, MCP servers); other lists (the
    messages and their content) stay as sent. So do the names a JSON schema chose
    (``SCHEMA_NAME_MAPS``: a tool parameter called ``password``).
    """
    return _clean(body, 0)


def recorded_params(body: dict[str, Any], skip: frozenset[str]) -> dict[str, Any]:
    """A request's parameters for its record: its fields but ``skip`` (credentials are left
    out when the record is written: ``redact_record``)."""
    return {name: value for name, value in body.items() if name not in skip}


def _clean(obj: dict[str, Any], depth: int) -> dict[str, Any]:
    """``without_secrets`` at ``depth``: copies only the objects it changes."""
    out: dict[str, Any] | None = None
    for name, value in obj.items():
        if is_secret(name) or (value.__class__ is dict and depth == MAX_DEPTH):
            if out is None:
                out = obj.copy()
            del out[name]
        else:
            if value.__class__ is dict and name not in SCHEMA_NAME_MAPS:
                kept = _clean(value, depth + 1)
            elif value.__class__ is list and name in SETTINGS_LISTS:
                kept = _clean_list(value, depth + 1)
            else:
                continue
            if kept is not value:
                if out is None:
                    out = obj.copy()
                out[name] = kept
    return obj if out is None else out


def _clean_list(items: list[Any], depth: int) -> list[Any]:
    """A list of settings without the credentials of its objects (itself if none had any)."""
    kept = [_clean(v, depth) if v.__class__ is dict else v for v in items]
    return items if all(a is b for a, b in zip(kept, items, strict=True)) else kept


# -- the rule for whole records ----------------------------------------------------------

MASK = "[redacted]"
# A value shorter than this is not masked: "sk" or "none" would blank unrelated text.
MIN_KEY_CHARS = 8
# The fields of a record that hold what an agent or its upstream sent, searched by name.
_SEARCHED = ("request", "raw", "metadata", "error")


class KnownKeys:
    """Credential values the proxy has seen: its configured upstream keys and token, and
    those agents sent in headers (the most recent ``max_keys``; a key is seen again on
    every call that uses it)."""

    def __init__(self, fixed: Iterable[str | None] = (), max_keys: int = 1024) -> None:
        self._fixed = {k for k in fixed if k and len(k) >= MIN_KEY_CHARS}
        self._seen: dict[str, None] = {}
        self._max = max_keys

    def saw(self, headers: Mapping[str, str]) -> None:
        """Remember the keys in a request's secret headers (``Bearer`` left off)."""
        for name in SECRET_HEADERS:
            value = headers.get(name)
            if value:
                if value[:7].lower() == "bearer ":
                    value = value[7:].strip()
                if len(value) >= MIN_KEY_CHARS and value not in self._fixed:
                    self._seen.pop(value, None)
                    self._seen[value] = None
                    if len(self._seen) > self._max:
                        del self._seen[next(iter(self._seen))]

    def listed(self) -> list[str]:
        return [*self._fixed, *self._seen]


def redact_record(rec: dict[str, Any], keys: Iterable[str] = ()) -> None:
    """Apply the redaction rule to a record about to be written, in place (the objects it
    changes are replaced by copies; those it shares with the proxy's state stay as they
    are): credential fields left out of its request, raw request and answer, metadata and
    error (``without_secrets``); each of ``keys`` masked wherever it appears."""
    for name in _SEARCHED:
        value = rec.get(name)
        if value.__class__ is dict:
            kept = _clean(value, 0)
            if kept is not value:
                rec[name] = kept
    keys = [k for k in keys if k]
    if not keys:
        return
    # One serialisation (C speed) says whether any key is there; the walk runs only then.
    # The token ids are numbers: no key hides in them.
    blob = orjson.dumps({k: v for k, v in rec.items() if k != "tokens"}, default=lambda _: None)
    found = [k for k in keys if orjson.dumps(k)[1:-1] in blob]
    if not found:
        return
    for name, value in rec.items():
        if name != "tokens":
            masked = _masked(value, found)
            if masked is not value:
                rec[name] = masked


def _masked(v: Any, keys: list[str]) -> Any:
    """``v`` with each of ``keys`` replaced by MASK in its strings (keys of objects too);
    ``v`` itself when none is there."""
    if v.__class__ is str:
        for k in keys:
            if k in v:
                v = v.replace(k, MASK)
        return v
    if v.__class__ is dict:
        out = {_masked(k, keys): _masked(x, keys) for k, x in v.items()}
        same = all(a is b for a, b in zip(out.values(), v.values(), strict=True))
        return v if same and out.keys() == v.keys() else out
    if v.__class__ is list:
        got = [_masked(x, keys) for x in v]
        return v if all(a is b for a, b in zip(got, v, strict=True)) else got
    return v
