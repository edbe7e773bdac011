"""`aw pool …`: inspect, verify, label and maintain a pool from the shell."""

from __future__ import annotations

from pathlib import Path

import typer

pool_app = typer.Typer(help="Inspect, verify, label and maintain a pool.", no_args_is_help=True)

POOL_OPTION = typer.Option(
    Path("pool"), "--pool", "-p", envvar="AW_POOL", help="Pool directory (env AW_POOL)."
)
