"""Listening sockets for `aw proxy` / `aw serve`: a port in use or a bad host is one line."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from agentworld import listen
from agentworld.errors import ConfigError

ROOT = Path(__file__).parent.parent


def test_port_zero_binds_a_free_port_that_is_then_taken():
    socks = listen.bind("127.0.0.1", 0, "aw proxy")
    try:
        port = listen.port_of(socks)
        assert port > 0 and len(socks) == 1
        socks[0].listen()
        with pytest.raises(ConfigError, match=f"--port {port}: 127.0.0.1:{port} is already in use"):
            listen.bind("127.0.0.1", port, "aw proxy")
    finally:
        for s in socks:
            s.close()


def test_a_name_with_two_addresses_is_bound_on_both_on_one_port(monkeypatch):
    """``localhost`` is 127.0.0.1 and ::1 on many machines: an agent may dial either."""
    both = [
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 0)),
        (socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("::1", 0, 0, 0)),
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 0)),  # listed twice
    ]
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: both)
    socks = listen.bind("localhost", 0, "aw proxy")
    try:
        assert [s.family for s in socks] == [socket.AF_INET, socket.AF_INET6]
        port = listen.port_of(socks)
        assert [s.getsockname()[:2] for s in socks] == [("127.0.0.1", port), ("::1", port)]
    finally:
        for s in socks:
            s.close()


@pytest.mark.parametrize(
    "host,port,says",
    [
        ("127.0.0.1", 70000, "--port 70000: not a TCP port"),
        ("no-such-host.invalid", 0, "--host 'no-such-host.invalid'"),
        ("192.0.2.1", 0, "--host '192.0.2.1': not an address of this machine"),
    ],
)
def test_bad_flags_are_named(host, port, says):
    with pytest.raises(ConfigError) as err:
        listen.bind(host, port, "aw proxy")
    assert says in str(err.value)


def test_aw_proxy_on_a_taken_port_says_so_and_creates_nothing(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = ["proxy", "--upstream", "http://127.0.0.1:9", "--port", str(port)]
        out = subprocess.run(
            [sys.executable, "-m", "agentworld.cli", *args, "--pool", str(tmp_path / "pool")],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [
        f"aw: error: --port {port}: 127.0.0.1:{port} is already in use (another aw proxy "
        "running?); pick another port, or --port 0 for a free one"
    ]
    assert not (tmp_path / "pool").exists()
