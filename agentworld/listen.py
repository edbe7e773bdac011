"""Listening sockets for `aw proxy` and `aw serve`: bound before anything is announced, and a
port in use or a bad ``--host`` is one clear line, not a traceback."""

from __future__ import annotations

import errno
import socket

from agentworld.errors import ConfigError


def bind(host: str, port: int, command: str) -> socket.socket:
    """A TCP socket bound to ``host:port`` (port 0: a free one), ready for ``run_app(sock=)``.

    Raises ConfigError naming the flag to change.
    """
    if not 0 <= port < 65536:
        raise ConfigError(f"--port {port}: not a TCP port (0-65535)")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise ConfigError(f"--host {host!r}: not an address this machine has ({exc})") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as aiohttp's own sites do
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
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


def port_of(sock: socket.socket) -> int:
    return int(sock.getsockname()[1])
