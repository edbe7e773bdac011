"""`aw run` off a terminal prints a progress line every few seconds."""

from __future__ import annotations

import re
from pathlib import Path

import typer
from aw_run_fakes import tasks_jsonl, write
from typer.testing import CliRunner

from agentworld.run.command import run as run_command


def _cli() -> typer.Typer:
    app = typer.Typer()
    app.command("run")(run_command)
    app.command("noop", hidden=True)(lambda: None)  # keep `run` a subcommand
    return app


def test_progress_lines_off_a_terminal(tmp_path: Path, fake_proxy, test_agents) -> None:
    tasks_jsonl(tmp_path / "tasks.jsonl", [("Compute 2 + 3?", "5"), ("Compute 4 * 5?", "20")])
    datasets = write(
        tmp_path / "datasets.toml",
        '[datasets.arith]\nsource = { type = "jsonl" }\nsplits = { test = "tasks.jsonl" }\n'
        'scorer = "numeric"\n',
    )
    agents = write(
        tmp_path / "agents.toml",
        f'[agents.s]\nkind = "python"\nfunction = "{test_agents}:slow"\nconcurrency = 1\n',
    )
    args = [
        "run", "-a", "s", "-d", "arith", "--proxy", fake_proxy.url, "--pool", str(tmp_path / "pool"),
        "--agents", str(agents), "--datasets", str(datasets), "--progress-s", "0.1",
    ]  # fmt: skip
    result = CliRunner().invoke(_cli(), args)  # stderr is not a terminal here
    assert result.exit_code == 0, result.output
    lines = [x for x in result.stderr.splitlines() if x.startswith("aw run: rollouts")]
    # Two episodes of 0.6 s one after the other: lines while none, one, both had ended.
    assert len(lines) >= 5, result.stderr
    done = [int(re.search(r"rollouts (\d)/[2?]", x).group(1)) for x in lines]
    assert done == sorted(done) and done[0] == 0 and 1 in done
    assert re.fullmatch(r"aw run: rollouts \d/2 · reward \S+ · errors 0 · \d+ s", lines[-1])
    assert "reward 1.000" in result.stderr  # the slow agent answers right
