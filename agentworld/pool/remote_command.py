"""`aw pool push DEST` / `aw pool pull SRC`: copy a pool to and from an object store.

Registered into ``pool_app`` by the CLI; only typer and the standard library
are imported at import time (obstore loads when a command runs).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from agentworld.cli_options import POOL_OPTION
from agentworld.plural import plural


def _url(value: str, flag: str) -> str:
    from agentworld.errors import ConfigError
    from agentworld.pool.remote_store import remote_url

    url = remote_url(value)
    if url is None:
        raise ConfigError(
            f"{flag}: {value!r} is not an object-store URL (s3://, gs://, az://, file://); "
            "for another folder use `aw pool merge`"
        )
    return url


def push(
    dest: str = typer.Argument(
        ..., help="Object-store URL: s3://bucket/prefix, gs://, az://, file://"
    ),
    pool_path: Path = POOL_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Upload the sealed shards and label lines the store lacks (put-if-absent, hash-checked)."""
    from agentworld.pool.layout import Layout
    from agentworld.pool.remote_sync import push as run_push

    report = run_push(Layout(pool_path), _url(dest, "DEST"))
    if as_json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2) + "\n")
    typer.echo(
        f"pushed to {report.url}: {plural(report.shards_copied, 'shard')} "
        f"({report.bytes_copied:,} bytes), "
        f"{report.shards_present} already there, {report.label_objects} label objects "
        f"in {report.seconds:.1f}s",
        err=True,
    )


def pull(
    src: str = typer.Argument(
        ..., help="Object-store URL: s3://bucket/prefix, gs://, az://, file://"
    ),
    pool_path: Path = POOL_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Download the shards and label objects this pool lacks, each verified by hash."""
    from agentworld.pool import Pool
    from agentworld.pool.remote_sync import pull as run_pull

    url = _url(src, "SRC")
    layout = Pool.create(pool_path).layout  # pulling into a new folder makes the pool
    report = run_pull(layout, url)
    if as_json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2) + "\n")
    typer.echo(
        f"pulled from {report.url}: {plural(report.shards_copied, 'shard')} "
        f"({report.bytes_copied:,} bytes), "
        f"{report.shards_present} already here, {report.label_objects} label objects "
        f"in {report.seconds:.1f}s",
        err=True,
    )
