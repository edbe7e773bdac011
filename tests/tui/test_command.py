"""`aw tui` as a command: lazy imports, --web without its extra."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from agentworld.errors import CorruptDataError, MissingExtraError, NotFoundError, PoolError
from agentworld.tui import app as app_module
from agentworld.tui import command

ROOT = Path(__file__).resolve().parents[2]


def cli() -> typer.Typer:
    app = typer.Typer()
    app.command("tui")(command.tui)

    @app.command()
    def other() -> None:  # a second command keeps typer in subcommand mode
        pass

    return app


def test_command_module_does_not_import_textual() -> None:
    code = (
        "import sys, agentworld.tui.command;"
        "bad = [m for m in ('textual', 'torch', 'transformers') if m in sys.modules];"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_help_lists_the_options() -> None:
    result = CliRunner().invoke(cli(), ["tui", "--help"])
    assert result.exit_code == 0
    for flag in ("--pool", "--proxy", "--tokenizer", "--author", "--web"):
        assert flag in result.output


def test_missing_pool_is_a_clear_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli(), ["tui", "--pool", str(tmp_path / "nope")])
    assert isinstance(result.exception, PoolError)


def test_web_without_textual_serve_names_the_extra(
    pool_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "textual_serve", None)
    monkeypatch.setitem(sys.modules, "textual_serve.server", None)
    result = CliRunner().invoke(cli(), ["tui", "--pool", str(pool_path), "--web"])
    assert isinstance(result.exception, MissingExtraError)
    assert "agentworld[web]" in str(result.exception)


def test_web_serves_this_command_through_textual_serve(
    pool_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import textual_serve.server

    served: dict = {}

    class FakeServer:
        def __init__(self, command: str, **kw: object) -> None:
            served.update(command=command, **kw)

        def serve(self) -> None:
            served["served"] = True

    monkeypatch.setattr(textual_serve.server, "Server", FakeServer)
    result = CliRunner().invoke(
        cli(), ["tui", "--pool", str(pool_path), "--web", "--port", "9999", "--author", "ann"]
    )
    assert result.exit_code == 0, result.output
    assert served["served"] and served["port"] == 9999 and served["host"] == "127.0.0.1"
    assert "-m agentworld.tui" in served["command"] and "--author ann" in served["command"]
    assert str(pool_path.resolve()) in served["command"]


def test_a_bad_label_line_is_one_error_line_before_the_app_starts(pool_path: Path) -> None:
    """As every other command reports it (exit 6), not as the app's traceback."""
    bad = pool_path / "labels" / "ann" / "2026-01-01.jsonl"
    bad.parent.mkdir(parents=True, exist_ok=True)
    bad.write_text('{"author": "ann", bad json\n')
    for extra in ([], ["--web", "--port", "1"]):
        out = subprocess.run(
            [sys.executable, "-m", "agentworld.cli", "tui", "--pool", str(pool_path), *extra],
            capture_output=True,
            text=True,
            timeout=30,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
        )
        assert out.returncode == CorruptDataError.exit_code, out.stderr
        assert out.stderr.startswith("aw: error: ") and out.stderr.count("\n") == 1
        assert f"{bad}:1: bad label line" in out.stderr


@pytest.mark.parametrize(
    "given, opened",
    [
        ("tr_grp-a_1", "tr_grp-a_1"),  # the id
        ("rp-b_2", "tr_grp-b_2"),  # the end the list shows (6+ characters)
        ("st_tr_grp-a_2_1", "tr_grp-a_2"),  # one of its steps
    ],
)
def test_cli_opens_the_trajectory_an_id_names(
    pool_path: Path, started_with: dict, given: str, opened: str
) -> None:
    result = CliRunner().invoke(cli(), ["tui", "--pool", str(pool_path), "--open", given])
    assert result.exit_code == 0, result.output
    assert started_with["open_trajectory"] == opened
    assert started_with["start"] == "trajectories"


@pytest.mark.parametrize(
    "given, says", [("tr_nope", "no step or trajectory matches 'tr_nope'"), ("tr_grp", "ambiguous")]
)
def test_cli_refuses_an_id_that_names_no_one_trajectory_before_starting(
    pool_path: Path, monkeypatch: pytest.MonkeyPatch, given: str, says: str
) -> None:
    """It started on an inspector that stayed at "loading…" under an error toast."""
    monkeypatch.setattr(app_module, "make_app", lambda *a, **k: pytest.fail("the app started"))
    result = CliRunner().invoke(cli(), ["tui", "--pool", str(pool_path), "--open", given])
    assert isinstance(result.exception, NotFoundError) and says in str(result.exception)
