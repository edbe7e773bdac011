"""moto's S3 server for the object-store benches: a process of its own, buckets made,
AWS_* set in this process's environment for obstore (and s3fs)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request


def start_s3(*buckets: str) -> tuple[subprocess.Popen[bytes], str]:
    """Start the server on a free loopback port, create ``buckets``; returns (process, endpoint)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(endpoint, timeout=1)
            break
        except OSError:
            time.sleep(0.1)
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench-secret",
        AWS_ENDPOINT_URL=endpoint,
        AWS_REGION="us-east-1",
        AWS_ALLOW_HTTP="true",
    )
    for bucket in buckets:
        req = urllib.request.Request(f"{endpoint}/{bucket}", method="PUT")
        urllib.request.urlopen(req, timeout=10)
    return proc, endpoint
