"""`aw train` through typer: flags reach the config, errors are domain errors, no torch at import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import typer
from typer.testing import CliRunner

from agentworld.errors import ConfigError
from agentworld.train.command import train


def make_app() -> typer.Typer:
    app = typer.Typer()
    app.command("train")(train)
    app.command("other")(lambda: None)
    return app


def test_importing_the_command_does_not_import_torch() -> None:
    code = (
        "import sys, agentworld.train.command; "
        "bad = [m for m in ('torch', 'transformers', 'accelerate') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])


def test_help_lists_the_options() -> None:
    result = CliRunner().invoke(make_app(), ["train", "--help"])
    assert result.exit_code == 0
    for opt in ("--agent", "--dataset", "--algo", "--model", "--recipe", "--set", "--online"):
        assert opt in result.output


def test_bad_set_is_a_config_error() -> None:
    result = CliRunner().invoke(make_app(), ["train", "--model", "m", "--set", "bogus=1"])
    assert isinstance(result.exception, ConfigError)


def test_train_runs_from_the_command_line(builder, tiny_model: Path, tmp_path: Path) -> None:
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    builder.group([1.0, 0.0], turns=2, agent="bot", dataset="math")
    out = tmp_path / "out"
    args = [
        "train",
        "--agent",
        "bot",
        "--dataset",
        "math",
        "--algo",
        "grpo",
        "--model",
        str(tiny_model),
        "--pool",
        str(builder.pool.root),
        "-o",
        str(out),
        "--max-steps",
        "1",
        "--set",
        "progress=false",
    ]
    result = CliRunner().invoke(make_app(), args)
    assert result.exit_code == 0, result.output
    assert (out / "ckpt-000001" / "meta.json").exists()
    assert 'agent = "bot"' in (out / "config.toml").read_text()
    # the summary's fidelity row, named once: "fidelity │ |trainer - rollout| log-prob …"
    row = next(line for line in result.output.splitlines() if "│ fidelity " in line)
    assert row.count("fidelity") == 1, row


def test_empty_selection_is_a_pool_error(builder, tiny_model: Path, tmp_path: Path) -> None:
    from accelerate.state import AcceleratorState, GradientState

    from agentworld.errors import PoolError

    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    builder.group([1.0, 0.0])
    args = [
        "train",
        "--agent",
        "nobody",
        "--model",
        str(tiny_model),
        "--pool",
        str(builder.pool.root),
        "-o",
        str(tmp_path / "o"),
    ]
    result = CliRunner().invoke(make_app(), args)
    assert isinstance(result.exception, PoolError)
    assert "nothing to train on" in str(result.exception)


def test_a_model_that_is_not_a_local_folder_is_refused_before_anything_is_written(
    builder, tmp_path: Path
) -> None:
    """As `aw serve --model`: a missing path, a folder without weights or a Hub-style
    id is one ConfigError, never a download or a transformers traceback."""
    (tmp_path / "notamodel").mkdir()
    (tmp_path / "notamodel" / "config.json").write_text("{}")
    out = tmp_path / "out"
    base = ["train", "--pool", str(builder.pool.root), "-o", str(out)]
    for model in (str(tmp_path / "no_such_model"), str(tmp_path / "notamodel"), "Org/model"):
        result = CliRunner().invoke(make_app(), [*base, "--model", model])
        assert isinstance(result.exception, ConfigError), result.output
        assert str(result.exception) == (
            f"train.model: {model!r} is not a local model folder (config.json + *.safetensors);"
            " nothing is downloaded, pass a model folder"
        )
    assert not out.exists()


def test_a_reference_model_is_checked_too(builder, tiny_model: Path, tmp_path: Path) -> None:
    args = ["train", "--model", str(tiny_model), "--pool", str(builder.pool.root)]
    args += ["-o", str(tmp_path / "out"), "--set", "kl_coef=0.1", "--set", "ref_model=Org/ref"]
    result = CliRunner().invoke(make_app(), [*args, "--algo", "grpo"])
    assert isinstance(result.exception, ConfigError)
    assert str(result.exception).startswith("train.ref_model: 'Org/ref' is not a local model")


def test_a_kl_coefficient_for_sft_is_refused(builder, tiny_model: Path, tmp_path: Path) -> None:
    """SFT's loss has no KL term: kl_coef > 0 loaded the reference model and trained as if
    it were 0, without a word."""
    args = ["train", "--model", str(tiny_model), "--pool", str(builder.pool.root)]
    args += ["-o", str(tmp_path / "out"), "--set", "kl_coef=0.1"]
    result = CliRunner().invoke(make_app(), args)
    assert isinstance(result.exception, ConfigError)
    assert str(result.exception) == (
        "train.kl_coef: --algo sft adds no KL term, got 0.1; "
        "set it to 0, or train with --algo grpo or ppo"
    )


def test_no_model_trains_the_embedded_default_as_aw_serve_serves(
    builder, tiny_model: Path, tmp_path: Path, monkeypatch
) -> None:
    """Without --model, the model `aw serve` would serve: the embedded default under
    AW_HOME (a tiny stand-in here, where the converted SmolLM2 would be)."""
    import shutil

    from accelerate.state import AcceleratorState, GradientState

    from agentworld.model_folder import DEFAULT_MODEL_NAME

    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    home = tmp_path / "home"
    shutil.copytree(tiny_model, home / "models" / DEFAULT_MODEL_NAME)
    monkeypatch.setenv("AW_HOME", str(home))
    builder.group([1.0, 0.0], agent="bot", dataset="math")
    out = tmp_path / "out"
    args = ["train", "--agent", "bot", "--pool", str(builder.pool.root), "-o", str(out)]
    args += ["--max-steps", "1", "--set", "progress=false"]
    result = CliRunner().invoke(make_app(), args)
    assert result.exit_code == 0, result.output
    config = (out / "config.toml").read_text()
    assert f'model = "{home / "models" / DEFAULT_MODEL_NAME}"' in config
    assert (out / "ckpt-000001" / "meta.json").exists()
    # The README's second line: a run's saved config is the recipe of the next.
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    more = tmp_path / "more"
    args = ["train", "--recipe", str(out / "config.toml"), "-o", str(more), "--max-steps", "1"]
    result = CliRunner().invoke(make_app(), args)
    assert result.exit_code == 0, result.output
    assert (more / "ckpt-000001" / "meta.json").exists()
