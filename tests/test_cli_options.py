"""Options several commands share: one definition, the same flags and help everywhere."""

from __future__ import annotations

from typing import Any

import pytest
import typer.main

from agentworld import cli_options
from agentworld.cli import app
from agentworld.cli_options import resolve_author


def _params(*path: str) -> dict[str, Any]:
    """A command's options by flag, as typer builds them for `aw`."""
    cmd: Any = typer.main.get_command(app)
    for name in path:
        cmd = cmd.commands[name]
    return {opt: p for p in cmd.params for opt in getattr(p, "opts", ())}


def test_commands_share_the_pool_and_filter_options() -> None:
    commands = {
        ("pool", "ls"): ["--pool", "--agent", "--dataset", "--split", "--min-reward", "--tag"],
        ("pool", "label"): ["--pool", "--agent", "--dataset", "--status", "--author"],
        ("export",): ["--pool", "--agent", "--dataset", "--status", "--quality", "--min-policy"],
        ("train",): ["--pool", "--agent", "--dataset", "--split"],
        ("run",): ["--pool", "--datasets"],
        ("tui",): ["--pool", "--author"],
        ("proxy",): ["--pool"],
        ("pool", "merge"): ["--pool"],
    }
    helps: dict[str, set[str]] = {}
    for path, flags in commands.items():
        params = _params(*path)
        for flag in flags:
            assert flag in params, (path, flag)
            helps.setdefault(flag, set()).add(params[flag].help or "")
    # One definition each: every command says the same about a shared flag.
    assert {flag: len(h) for flag, h in helps.items() if len(h) > 1} == {}
    assert _params("pool", "ls")["--pool"].envvar == "AW_POOL"
    # The status filter keeps each command's default: export takes finished trajectories.
    assert _params("export")["--status"].default == "done"
    assert _params("pool", "ls")["--status"].default is None


def test_author_comes_from_flag_or_login(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_author("alice") == "alice"
    monkeypatch.setenv("USER", "bob")
    monkeypatch.delenv("LOGNAME", raising=False)
    monkeypatch.delenv("LNAME", raising=False)
    monkeypatch.delenv("USERNAME", raising=False)
    assert resolve_author(None) == "bob"


def test_author_without_a_login_name_is_anonymous(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_login() -> str:
        raise KeyError("getpwuid(): uid not found: 12345")

    monkeypatch.setattr(cli_options.getpass, "getuser", no_login)
    assert resolve_author(None) == "anonymous"
