"""`aw proxy`: serve the recording gateway in front of one or more upstream model servers."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import typer

from agentworld.cli_options import POOL_OPTION


def proxy(
    pool: Path = POOL_OPTION,
    remote: str | None = typer.Option(
        None,
        "--remote",
        envvar="AW_REMOTE",
        help="Object store (s3://bucket/prefix) each sealed shard is uploaded to "
        "(default: POOL.toml's `remote`).",
    ),
    upstream: str | None = typer.Option(
        None,
        "--upstream",
        "-u",
        help="Upstream base URL (e.g. http://127.0.0.1:8000); no config needed.",
    ),
    config: Path | None = typer.Option(
        None,
        "--config",
        "-c",
        help="agents.toml with \\[agents.NAME] upstream keys (without it and --upstream:"
        " $AW_AGENTS, else ./agents.toml when there is one).",
    ),
    engine: str = typer.Option(
        "vllm",
        "--engine",
        help="For --upstream: 'vllm' (ask for token ids) or 'openai' (messages only).",
    ),
    api_key_env: str | None = typer.Option(
        None, "--api-key-env", help="For --upstream: environment variable holding its API key."
    ),
    host: str = typer.Option(
        "127.0.0.1", "--host", help="Address to bind (default: loopback only)."
    ),
    port: int = typer.Option(4000, "--port", help="Port to listen on (0: any free port)."),
    durability: str = typer.Option(
        "batched",
        "--durability",
        help="'batched': steps are fsynced within 50 ms; 'strict': the agent gets its answer "
        "only once its step is on disk.",
    ),
    on_write_failure: str = typer.Option(
        "refuse",
        "--on-write-failure",
        help="While the pool cannot be written (disk full): 'refuse' recording calls with "
        "503 + Retry-After until a probe write succeeds, or 'serve' them unrecorded "
        "(batched only; lost steps are counted).",
    ),
    auth_token: str | None = typer.Option(
        None,
        "--auth-token",
        envvar="AW_PROXY_TOKEN",
        help="Require 'Authorization: Bearer TOKEN' (env AW_PROXY_TOKEN).",
    ),
    idle_timeout_s: float = typer.Option(
        900.0, "--idle-timeout-s", help="Close trajectories idle this long as 'timeout'."
    ),
    client_timeout_s: float = typer.Option(
        60.0,
        "--client-timeout-s",
        help="Close an agent's connection after this long without a request on it, without"
        " the next bytes of its request body (408), or without it reading its response.",
    ),
    max_body_bytes: int = typer.Option(
        32 * 1024 * 1024, "--max-body-bytes", help="Refuse request bodies larger than this (413)."
    ),
    max_open_trajectories: int = typer.Option(
        100_000,
        "--max-open-trajectories",
        help="Beyond this many, the longest idle are closed as 'timeout'.",
    ),
    policy_version: int | None = typer.Option(
        None,
        "--policy-version",
        help="Policy version stamped on steps from the start (default: the one this proxy had"
        " before it stopped, kept in POOL/state/policy/, else 0).",
    ),
    instance: str | None = typer.Option(
        None,
        "--instance",
        envvar="AW_PROXY_INSTANCE",
        help="This proxy's name, when several share one pool: its steps carry it, and after"
        " a restart it takes back only its own open trajectories (env AW_PROXY_INSTANCE).",
    ),
    log_requests: bool = typer.Option(False, "--log-requests", help="Log one line per request."),
    uvloop: bool = typer.Option(
        True,
        "--uvloop/--no-uvloop",
        help="Run on uvloop when it is installed (less CPU per proxied call).",
    ),
) -> None:
    """Serve an OpenAI-compatible proxy that records every call into the pool."""
    import logging

    from agentworld import listen
    from agentworld.errors import ConfigError
    from agentworld.pool import Pool
    from agentworld.pool.remote_sync import start_uploader
    from agentworld.proxy.app import ROUTE_PREFIXES, make_app
    from agentworld.proxy.config import ProxyConfig, UpstreamConfig, load_agents, resolve_keys
    from agentworld.proxy.front import site as front_site
    from agentworld.proxy.gc_pauses import GcPauses
    from agentworld.proxy.state import STATE

    if engine not in ("vllm", "openai"):
        raise ConfigError(f"--engine: 'vllm' or 'openai', got {engine!r}")
    if config is None and upstream is None:  # as `aw run` finds it, in an `aw init` folder
        env = os.environ.get("AW_AGENTS")
        if env:
            config = Path(env)
        elif Path("agents.toml").is_file():
            config = Path("agents.toml")
    agents = load_agents(config, need_upstream=upstream is None) if config is not None else {}
    default = None
    if upstream is not None:
        default = UpstreamConfig.single(upstream, engine=engine)  # type: ignore[arg-type]
        if api_key_env:
            default = UpstreamConfig(
                urls=default.urls, engine=default.engine, api_key_env=api_key_env
            )
    keys = resolve_keys(agents, default, os.environ, str(config or "agents.toml"))
    cfg = ProxyConfig(
        agents=agents,
        default_upstream=default,
        api_keys=keys,
        durability=durability,  # type: ignore[arg-type]
        on_write_failure=on_write_failure,  # type: ignore[arg-type]
        auth_token=auth_token or None,
        idle_timeout_s=idle_timeout_s,
        client_timeout_s=client_timeout_s,
        max_body_bytes=max_body_bytes,
        max_open_trajectories=max_open_trajectories,
        log_requests=log_requests,
        policy_version=policy_version,
        instance=instance,
    )
    if log_requests:
        logging.getLogger("agentworld.proxy.access").setLevel(logging.INFO)
        if not logging.getLogger().handlers:
            logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
        logging.getLogger("agentworld.proxy.access").addHandler(logging.StreamHandler(sys.stderr))
        logging.getLogger("agentworld.proxy.access").propagate = False
    socks = listen.bind(host, port, "aw proxy")  # before the pool: a port in use changes nothing
    port = listen.port_of(socks)  # --port 0: the URL announced below is one agents can use
    the_pool = Pool.create(pool)
    uploader = start_uploader(the_pool.layout, remote)
    app = make_app(cfg, the_pool)
    targets = ", ".join(
        [f"{n} -> {' '.join(u.urls)}" for n, u in agents.items()]
        + ([f"default -> {default.urls[0]}"] if default else [])
    )
    typer.echo(
        f"aw proxy: http://{host}:{port}/v1 -> {targets}; pool {the_pool.root}; "
        f"durability {durability}{'; auth on' if auth_token else ''}"
        + (f"; uploading shards to {uploader.pusher.store.name}" if uploader else ""),
        err=True,
    )
    typer.echo(f"aw proxy: {app[STATE].policy.describe()}", err=True)
    GcPauses().install()  # short collector pauses (gc_pauses.py)
    _raise_open_files_limit()
    front_site.run(
        app,
        socks,
        ROUTE_PREFIXES,
        _event_loop(uvloop),
        access_log=None,
        # An agent that hangs up cancels its call: the upstream connection is closed
        # (vLLM then stops generating) and the step is recorded as cancelled.
        handler_cancellation=True,
        # A connection without a (complete) request is closed after this long.
        keepalive_timeout=cfg.client_timeout_s,
        # The unread rest of a refused body is read and dropped at most this long.
        lingering_time=min(10.0, cfg.client_timeout_s),
    )
    if uploader is not None:  # the writer sealed its journal on shutdown: send that shard too
        uploader.stop()


OPEN_FILES_WANTED = 65536


def _raise_open_files_limit(wanted: int = OPEN_FILES_WANTED) -> int:
    """Raise this process's soft limit on open files towards ``wanted`` (as vLLM does).

    Each call in flight holds two sockets (the agent's and the upstream's), and
    many systems start processes at a soft limit of 1,024: past ~500 concurrent
    calls, accepting and connecting would fail with "Too many open files". The
    hard limit caps it; the limit reached is returned.
    """
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return target
        except (ValueError, OSError) as exc:
            typer.echo(f"aw proxy: could not raise the open-files limit ({soft}): {exc}", err=True)
    return soft


def _event_loop(want_uvloop: bool) -> Any:
    """uvloop's loop when wanted and installed (an optional speed-up), else None: asyncio's."""
    if not want_uvloop:
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop()
