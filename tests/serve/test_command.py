"""`aw serve` at the CLI edge: light imports, flag errors, and a real start on the tiny model."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from agentworld.errors import ConfigError
from agentworld.serve.command import serve

ROOT = Path(__file__).resolve().parents[2]


def cli() -> typer.Typer:
    app = typer.Typer()
    app.command("serve")(serve)
    app.command("noop")(lambda: None)  # two commands, so `serve` is a subcommand like in `aw`
    return app


def test_importing_the_command_does_not_import_torch():
    code = (
        "import sys, agentworld.serve.command; "
        "bad = [m for m in ('torch', 'transformers', 'vllm') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=60)


def test_help_lists_the_flags():
    result = CliRunner().invoke(cli(), ["serve", "--help"])
    assert result.exit_code == 0
    for flag in ("--model", "--engine", "--port", "--device", "--dtype", "--max-batch-size"):
        assert flag in result.output


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--engine", "tgi"], "--engine"),
        (["--port", "70000"], "--port"),
        (["--engine", "vllm", "--port", "0"], "--port 0"),
        (["--max-batch-size", "0"], "--max-batch-size"),
    ],
)
def test_bad_flags_raise_config_error_naming_the_flag(args: list[str], flag: str):
    result = CliRunner().invoke(cli(), ["serve", *args])
    assert isinstance(result.exception, ConfigError)
    assert flag in str(result.exception)


def test_port_zero_is_any_free_port_for_the_embedded_engine(tmp_path: Path):
    # accepted: what stops this run is the model folder, checked next
    result = CliRunner().invoke(
        cli(),
        ["serve", "--port", "0", "--model", str(tmp_path / "nope"), "--aw-home", str(tmp_path)],
    )
    assert isinstance(result.exception, ConfigError)
    assert "--model" in str(result.exception) and "--port" not in str(result.exception)


def test_model_that_is_not_a_folder_is_a_config_error(tmp_path: Path):
    result = CliRunner().invoke(
        cli(), ["serve", "--model", str(tmp_path / "nope"), "--aw-home", str(tmp_path)]
    )
    assert isinstance(result.exception, ConfigError)
    assert "--model" in str(result.exception)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_serve_starts_prints_url_on_stderr_and_answers(tiny_model_dir: Path, tmp_path: Path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = (
        "import typer; from agentworld.serve.command import serve; "
        "app = typer.Typer(); app.command('serve')(serve); app.command('x')(lambda: 0); app()"
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            code,
            "serve",
            "--model",
            str(tiny_model_dir),
            "--port",
            str(port),
            "--device",
            "cpu",
            "--served-model-name",
            "tiny",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=os.environ | {"AW_HOME": str(tmp_path)},
    )
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as r:
                    assert b'"tiny"' in r.read()
                    break
            except OSError:
                assert proc.poll() is None, proc.stderr.read().decode()
                time.sleep(0.5)
        else:
            pytest.fail("server never answered")
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
    assert f"http://127.0.0.1:{port}/v1" in err.decode()
    assert out == b""


def test_max_model_len_reaches_the_embedded_engine(
    tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
):
    """`--max-model-len` was a vllm-only flag the embedded engine ignored without a word."""
    import agentworld.serve.engine as engine_module

    seen: dict[str, object] = {}

    class Stop(Exception):
        pass

    def fake_engine(*args: object, **kwargs: object) -> None:
        seen.update(kwargs)
        raise Stop

    monkeypatch.setattr(engine_module, "Engine", fake_engine)
    args = ["serve", "--model", str(tiny_model_dir), "--port", "0", "--max-model-len", "64"]
    result = CliRunner().invoke(cli(), [*args, "--aw-home", str(tmp_path)])
    assert isinstance(result.exception, Stop)
    assert seen["max_model_len"] == 64
    result = CliRunner().invoke(cli(), ["serve", "--max-model-len", "0"])
    assert isinstance(result.exception, ConfigError) and "--max-model-len" in str(result.exception)
