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
    sock = listen.bind("127.0.0.1", 0, "aw proxy")
    try:
        port = listen.port_of(sock)
        assert port > 0
        sock.listen()
        with pytest.raises(ConfigError, match=f"--port {port}: 127.0.0.1:{port} is already in use"):
            listen.bind("127.0.0.1", port, "aw proxy")
    finally:
        sock.close()


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
