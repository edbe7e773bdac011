"""A running server's address as a flag or config gives it: ``http(s)://HOST:PORT``.

People paste the base URL their OpenAI client uses (``…/v1``); the commands that
talk to `aw proxy` or `aw serve` themselves (``/aw/…`` routes) add their own paths,
so a trailing ``/v1`` is dropped, and an address without a scheme is refused naming
where it came from.
"""

from __future__ import annotations

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
