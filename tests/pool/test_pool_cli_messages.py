"""What `aw pool` commands print: the words and names people and scripts read."""

from __future__ import annotations

from typing import Any

from typer.testing import CliRunner

from agentworld.cli import app
from agentworld.errors import AgentWorldError
from agentworld.pool import Pool
from tests.synth import fill_pool

runner = CliRunner()


def _pool(pool: Pool, *args: str) -> Any:
    """The command's result; ``code``: the exit code `aw` gives (an error's, as cli.main)."""
    res = runner.invoke(app, ["pool", *args, "--pool", str(pool.root)])
    exc = res.exception
    res.code = exc.exit_code if isinstance(exc, AgentWorldError) else res.exit_code
    res.error = str(exc) if isinstance(exc, AgentWorldError) else ""
    return res


def test_label_says_the_tags_it_stored_not_the_ones_typed(pool: Pool) -> None:
    fill_pool(pool, trajectories=1, steps=1)
    res = _pool(pool, "label", "tr_0000", "--tags", "x,y,x,a", "--author", "ann")
    assert res.code == 0, res.output
    assert res.stderr.strip().endswith("as ann: tags=a,x,y")
    assert pool.labels.effective()["trajectory:tr_0000"]["tags"].value == ["a", "x", "y"]
