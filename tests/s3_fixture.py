"""A local S3-compatible server for tests (moto's standalone server), started once per session.

Tests that need it take the ``s3_url`` fixture: a fresh bucket per test and
the AWS_* environment pointing at it, so obstore's standard credential chain
finds it exactly as it would a real bucket. Where moto is not installed or
cannot start, those tests skip and say why.
"""

from __future__ import annotations

import itertools
import socket
from collections.abc import Iterator
from typing import Any

import pytest

SECRET = "aw-test-secret-9f2c41d7e0"  # must never reach a pool, a log or stderr
_buckets = itertools.count()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    try:
        from moto.server import ThreadedMotoServer
    except ImportError:
        pytest.skip("moto[server] is not installed: pip install 'agentworld[test]'")
    import logging

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    port = _free_port()
    server: Any = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    try:
        server.start()
    except Exception as exc:  # a sandbox without sockets, a port taken meanwhile
        pytest.skip(f"the local S3 server (moto) could not start: {exc}")
    yield f"http://127.0.0.1:{port}"
    server.stop()


def s3_env(endpoint: str) -> dict[str, str]:
    """The environment a process needs to reach the test server (the standard AWS names)."""
    return {
        "AWS_ACCESS_KEY_ID": "aw-test-key",
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
    }


def make_bucket(endpoint: str) -> str:
    import boto3

    name = f"aw-test-{next(_buckets)}"
    env = s3_env(endpoint)
    boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=env["AWS_REGION"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=SECRET,
    ).create_bucket(Bucket=name)
    return name


@pytest.fixture
def s3_url(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """``s3://<fresh bucket>/pool`` with the AWS_* environment set for it."""
    for k, v in s3_env(s3_endpoint).items():
        monkeypatch.setenv(k, v)
    return f"s3://{make_bucket(s3_endpoint)}/pool"
