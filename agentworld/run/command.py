"""`aw run --agent X --dataset Y`: roll an agent out over a dataset through the proxy."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import typer

from agentworld.cli_options import DATASETS_FILE_OPTION, POOL_OPTION


def run(
    agent: str = typer.Option(..., "--agent", "-a", help="Agent name in agents.toml."),
    dataset: str = typer.Option(..., "--dataset", "-d", help="Dataset name in datasets.toml."),
    split: str | None = typer.Option(None, "--split", "-s", help="Split (default: the dataset's)."),
    limit: int | None = typer.Option(None, "--limit", min=1, help="At most this many tasks."),
    n: int = typer.Option(1, "--n", "-n", min=1, help="Rollouts per task (one group)."),
    concurrency: int | None = typer.Option(
        None, "--concurrency", "-c", min=1, help="Episodes at once (default: the agent's)."
    ),
    seed: int | None = typer.Option(
        None,
        "--seed",
        min=0,
        max=2**63 - 1,
        help="Seed every call's sampling (one seed per task, rollout and step, sent as the "
        "request's `seed`): a rerun samples the same. An agent's own `seed` wins.",
    ),
    proxy: str | None = typer.Option(
        None, "--proxy", envvar="AW_PROXY", help="URL of a running `aw proxy` (default: start one)."
    ),
    proxy_token: str | None = typer.Option(
        None, "--proxy-token", envvar="AW_PROXY_TOKEN", help="Bearer token the proxy requires."
    ),
    pool: Path = POOL_OPTION,
    agents_path: Path = typer.Option(
        Path("agents.toml"), "--agents", envvar="AW_AGENTS", help="agents.toml to read."
    ),
    datasets_path: Path = DATASETS_FILE_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    progress_s: float = typer.Option(
        10.0,
        "--progress-s",
        min=0.01,
        help="Off a terminal: seconds between progress lines on stderr.",
    ),
    remote: str | None = typer.Option(
        None,
        "--remote",
        envvar="AW_REMOTE",
        help="Object store (s3://bucket/prefix) the proxy uploads each sealed shard to "
        "(default: POOL.toml's `remote`).",
    ),
    ray: str | None = typer.Option(
        None,
        "--ray",
        help="Run the rollouts as Ray tasks, a proxy per node: 'auto' (the cluster `ray start` "
        "joined), an address, or 'local' (a cluster on this machine). --pool is then the "
        "shared pool: a shared folder or s3://…",
    ),
) -> None:
    """Roll an agent out over a dataset's tasks, score each trajectory, and summarise."""
    import asyncio

    from rich.console import Console

    from agentworld.run.lifecycle import proxy_base
    from agentworld.run.progress import RunProgress
    from agentworld.run.session import RunOptions, run_session
    from agentworld.run.summary import render, warnings

    opts = RunOptions(
        agent=agent,
        dataset=dataset,
        agents_path=agents_path,
        datasets_path=datasets_path,
        split=split,
        limit=limit,
        n=n,
        concurrency=concurrency,
        seed=seed,
        proxy_url=proxy_base(proxy) if proxy else None,
        proxy_token=proxy_token,
        pool=pool,
        environ=dict(os.environ),
        remote=remote,
        ray=ray,
    )
    err = Console(stderr=True)
    with RunProgress(sys.stderr, interval_s=progress_s) as progress:
        report, summary = asyncio.run(
            run_session(opts, on_start=progress.on_start, on_result=progress.on_result)
        )
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
    else:
        Console().print(render(summary))
    for warning in warnings(summary):
        err.print(f"warning: {warning}", markup=False, soft_wrap=True)
    if report.interrupted:
        err.print("interrupted: finished trajectories are in the pool", markup=False)
        raise typer.Exit(130)
    if summary["trajectories"] and summary["errors"] == summary["trajectories"]:
        # A script's `aw run ... && aw train ...` must not go on as if it had rollouts.
        err.print(
            f"aw: error: every episode failed ({summary['errors']} of "
            f"{summary['trajectories']}): the summary's errors say why",
            markup=False,
            soft_wrap=True,
        )
        raise typer.Exit(1)
