"""Listening sockets for `aw proxy` and `aw serve`: bound before anything is announced, and a
port in use or a bad ``--host`` is one clear line, not a traceback."""

from __future__ import annotations

import errno
import socket

from agentworld.errors import ConfigError


def bind(host: str, port: int, command: str) -> list[socket.socket]:
    """TCP sockets bound to every address ``host`` names (``localhost`` is often both
    ``127.0.0.1`` and ``::1``), all on ``port`` (0: one free port), for ``run_app(sock=)``.

    Raises ConfigError naming the flag to change.
    """
    if not 0 <= port < 65536:
        raise ConfigError(f"--port {port}: not a TCP port (0-65535)")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(f"--host {host!r}: not an address this machine has ({exc})") from None
    socks: list[socket.socket] = []
    seen: set[tuple[int, str]] = set()
    try:
        for family, kind, proto, _, address in infos:
            if (family, address[0]) in seen:
                continue
            seen.add((family, address[0]))
            if socks:  # the port the first one got, when it was 0
                address = (address[0], port_of(socks), *address[2:])
            socks.append(_bound(family, kind, proto, address, host, command))
    except BaseException:
        for s in socks:
            s.close()
        raise
    return socks


def _bound(
    family: int, kind: int, proto: int, address: tuple, host: str, command: str
) -> socket.socket:
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as aiohttp's own sites do
    if family == socket.AF_INET6:  # each family its own socket, as asyncio does
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        port = address[1]
        where = f"{host}:{port}"
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(
                f"--port {port}: {where} is already in use (another {command} running?); "
                "pick another port, or --port 0 for a free one"
            ) from None
        if exc.errno == errno.EACCES:
            raise ConfigError(f"--port {port}: not allowed to listen on {where}") from None
        if exc.errno == errno.EADDRNOTAVAIL:
            raise ConfigError(f"--host {host!r}: not an address of this machine") from None
        raise ConfigError(f"cannot listen on {where}: {exc.strerror or exc}") from None
    return sock


def port_of(socks: list[socket.socket]) -> int:
    return int(socks[0].getsockname()[1])
