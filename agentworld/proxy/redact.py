"""Credentials an agent puts in a request body, kept out of the pool.

Headers that carry keys never reach a record (``upstream.SECRET_HEADERS``).
Some clients also send a key as a field of the body, beside the model
(``api_key``, as LiteLLM-style clients can, or through an SDK's
``extra_body``), or inside an object such as ``metadata``: the upstream still
gets the body as the agent sent it, but the step's recorded parameters and
raw request leave such fields out.

A field is a credential by its name, read without case or separators (so
``apiKey``, ``api-key`` and ``API_KEY`` are one name): it holds a credential
word (``apikey``, ``secret``, ``password``, ``private_key``...), or it ends in
``token``. Singular: the generation parameters that name tokens count them
(``max_tokens``, ``skip_special_tokens``) or list them (``stop_token_ids``),
and a tokenizer's special tokens (``bos_token``, a chat template's variable)
are not credentials either.
"""

from __future__ import annotations

from typing import Any

from agentworld.proxy.upstream import SECRET_HEADERS

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
    """A request's parameters for its record: its fields but ``skip``, credentials left out
    (``without_secrets``, in the same pass: this runs once a call)."""
    out = {}
    for name, value in body.items():
        if name in skip or is_secret(name):
            continue
        if value.__class__ is dict and name not in SCHEMA_NAME_MAPS:
            value = _clean(value, 1)
        elif value.__class__ is list and name in SETTINGS_LISTS:
            value = _clean_list(value, 1)
        out[name] = value
    return out


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
