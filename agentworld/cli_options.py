"""The command-line options several commands share, defined once: the pool, the
trajectory filters, the label author and the datasets file.

Each command module imports what it takes from here, never from another command's
module. Typer reads an option's flags and help from these objects; a command names its
parameter as it likes.
"""

from __future__ import annotations

import getpass
from pathlib import Path
from typing import Any

import typer

POOL_OPTION: Any = typer.Option(
    Path("pool"),
    "--pool",
    "-p",
    envvar="AW_POOL",
    help="Pool directory, or an object-store URL (s3://…) for reading (env AW_POOL).",
)

DATASETS_FILE_OPTION: Any = typer.Option(
    Path("datasets.toml"), "--datasets", envvar="AW_DATASETS", help="datasets.toml to read."
)

AUTHOR_OPTION: Any = typer.Option(
    None, "--author", envvar="AW_AUTHOR", help="Label author (default: $USER)."
)

# Trajectory filters, the fields of pool.Selection a command offers (Selection.from_flags).
AGENT_FILTER: Any = typer.Option(None, "--agent", help="Only this agent's trajectories.")
DATASET_FILTER: Any = typer.Option(None, "--dataset", help="Only this dataset's trajectories.")
SPLIT_FILTER: Any = typer.Option(None, "--split", help="Only this dataset split.")
TASK_FILTER: Any = typer.Option(None, "--task", help="Only this task id.")
GROUP_FILTER: Any = typer.Option(None, "--group", help="Only this group.")
MIN_REWARD_FILTER: Any = typer.Option(
    None, "--min-reward", help="Reward at least this (label overrides)."
)
MAX_REWARD_FILTER: Any = typer.Option(None, "--max-reward", help="Reward at most this.")
MIN_POLICY_FILTER: Any = typer.Option(None, "--min-policy", help="Policy version at least this.")
MAX_POLICY_FILTER: Any = typer.Option(None, "--max-policy", help="Policy version at most this.")
QUALITY_FILTER: Any = typer.Option(None, "--quality", help="Comma list of label qualities.")
TAG_FILTER: Any = typer.Option(
    None, "--tag", help="Only trajectories with this label tag (on them or on a step)."
)


def status_filter(default: str | None = None) -> Any:
    """The ``--status`` filter (a comma list), with the command's own default."""
    return typer.Option(default, "--status", help="Comma list: open,done,failed,timeout,cancelled.")


def resolve_author(author: str | None) -> str:
    """The label author: --author / AW_AUTHOR, else the login name ($USER)."""
    if author:
        return author
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name (a container's bare uid)
        return "anonymous"
