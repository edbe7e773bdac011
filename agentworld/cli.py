"""The `aw` command line: noun groups with verb subcommands, one-line errors, stable exit codes.

Only typer, rich and the standard library are imported here; each command
imports what it needs when it runs, so `aw --help`, `aw proxy` and `aw tui`
never pay for torch or transformers.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import typer

from agentworld import __version__
from agentworld.demo import demo
from agentworld.errors import AgentWorldError
from agentworld.export.command import export, pool_import
from agentworld.pool.command import pool_app
from agentworld.pool.remote_command import pull as pool_pull
from agentworld.pool.remote_command import push as pool_push
from agentworld.pool.sync_command import diff as pool_diff
from agentworld.pool.sync_command import fetch as pool_fetch
from agentworld.pool.sync_command import manifest as pool_manifest
from agentworld.pool.sync_command import merge as pool_merge
from agentworld.proxy.command import proxy
from agentworld.run.command import run
from agentworld.serve.command import serve
from agentworld.train.command import train
from agentworld.tui.command import tui

app = typer.Typer(
    name="aw",
    help="AgentWorld: record, curate and train on multi-turn LLM agent trajectories.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(pool_app, name="pool")

_state = {"debug": False}


def _version(value: bool) -> None:
    if value:
        typer.echo(f"agentworld {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks and debug logs."),
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version."
    ),
) -> None:
    _state["debug"] = debug
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


@app.command()
def init(
    path: Path = typer.Argument(Path("."), help="Folder to set up (default: here)."),
) -> None:
    """Create pool/, agents.toml and datasets.toml in a folder."""
    from agentworld.pool import Pool
    from agentworld.templates import TEMPLATE_NAMES, write_templates

    pool = Pool.create(path / "pool")
    written = write_templates(path)
    typer.echo(f"pool ready at {pool.root}", err=True)
    for name in TEMPLATE_NAMES:
        f = path / name
        typer.echo(f"wrote {f}" if f in written else f"kept {f} (already there)", err=True)
    where = "" if path.resolve() == Path.cwd().resolve() else f" (in {path})"
    typer.echo(f"next{where}:\n{FIRST_STEPS}", err=True)


# What `aw init` suggests next: the README's first rollout, on the embedded model.
FIRST_STEPS = """\
  aw serve                                      # the embedded model on :8000, in its own terminal
  aw run --agent math --dataset mini-gsm -n 4   # 4 rollouts a task, recorded in pool/
  aw tui                                        # watch them land, inspect, curate"""


# Commands from the other subsystems register here (each module imports only
# typer at import time).
app.command("demo")(demo)
app.command("proxy")(proxy)
app.command("serve")(serve)
app.command("run")(run)
app.command("tui")(tui)
app.command("train")(train)
app.command("export")(export)
pool_app.command("import")(pool_import)
pool_app.command("merge")(pool_merge)
pool_app.command("diff")(pool_diff)
pool_app.command("manifest")(pool_manifest)
pool_app.command("fetch")(pool_fetch)
pool_app.command("push")(pool_push)
pool_app.command("pull")(pool_pull)


def main() -> None:
    """Entry point of the `aw` console script."""
    debug = "--debug" in sys.argv or os.environ.get("AW_DEBUG") == "1"
    try:
        app()
    except AgentWorldError as exc:
        if debug:
            raise
        typer.echo(f"aw: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except OSError as exc:  # the system refused (a full disk, a read-only or gone folder)
        if debug:
            raise
        where = f": {exc.filename}" if exc.filename else ""
        typer.echo(f"aw: error: {exc.strerror or exc}{where}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        typer.echo("aw: interrupted", err=True)
        sys.exit(130)


if __name__ == "__main__":
    main()
