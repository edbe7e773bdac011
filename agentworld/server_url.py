"""A running server's address as a flag or config gives it: ``http(s)://HOST:PORT``; and
the 404 of a server whose client was given that address without its ``/v1``.

People paste the base URL their OpenAI client uses (``…/v1``); the commands that
talk to `aw proxy` or `aw serve` themselves (``/aw/…`` routes) add their own paths,
so a trailing ``/v1`` is dropped, and an address without a scheme is refused naming
where it came from.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from agentworld.errors import ConfigError


def server_base(url: str, where: str, example: str = "http://127.0.0.1:4000") -> str:
    """``url`` without a trailing ``/`` or ``/v1``; ConfigError naming ``where`` unless it is
    an http(s) URL with a host."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(
            f"{where}: {url!r} is not an http(s) URL; give the server's address, e.g. {example}"
        )
    base = url.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


# A served route asked for without its /v1 (after any of the proxy's /t/, /g/, /a/
# segments): what an OpenAI client sends when its base_url is the address without /v1.
_WITHOUT_V1 = re.compile(
    r"(?P<scope>(?:/[tga]/[^/]+)*)"
    r"(?P<route>/(?:chat/completions|completions|messages(?:/count_tokens)?|responses|models)"
    r"(?:/.*)?)"
)


def not_found_message(method: str, path: str) -> str:
    """A 404's message (`aw proxy`, `aw serve`): names the route meant when only its /v1
    is missing."""
    said = f"Not Found: {method} {path}"
    m = _WITHOUT_V1.fullmatch(path)
    if m is None:
        return said
    meant = f"{m['scope']}/v1{m['route']}"
    return (
        f"{said}; did you mean {meant}? (an OpenAI client's base URL ends in /v1, as in "
        "http://HOST:PORT/v1; Anthropic clients take it without)"
    )
