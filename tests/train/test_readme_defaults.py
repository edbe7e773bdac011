"""The README's "Defaults a TRL/verl user expects" table, checked against the code it quotes."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

from agentworld.run.command import run
from agentworld.train.config import TrainConfig

README = Path(__file__).parents[2] / "README.md"


def table_rows() -> dict[str, str]:
    """The table's rows: key cell -> default cell."""
    text = README.read_text()
    table = text.split("### Defaults a TRL/verl user expects", 1)[1].split("\n\n", 2)[1]
    rows = {}
    for line in table.splitlines()[2:]:
        key, default = (cell.strip() for cell in line.strip("|").split("|")[:2])
        rows[key] = default
    return rows


def toml_value(text: str) -> object:
    """A default as the README writes it (`1e-5`, `true`, `dapo`) as Python reads it."""
    if text in ("true", "false"):
        return text == "true"
    try:
        return float(text)
    except ValueError:
        return text


def test_every_key_the_table_quotes_has_that_default_in_train_config() -> None:
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    rows = table_rows()
    quoted: dict[str, str] = {}
    for key, default in rows.items():
        keys = re.findall(r"`(\w+)`", key)
        values = re.findall(r"`([^`]+)`", default)
        if key == "memory":  # `forward_tokens=4096`, `gradient_checkpointing=true`
            quoted.update(v.split("=", 1) for v in values)
        elif keys and len(keys) == len(values):
            quoted.update(zip(keys, values, strict=True))
    assert {"lr", "normaliser", "kl_coef", "tis_cap", "forward_tokens"} <= quoted.keys()
    for key, value in quoted.items():
        assert toml_value(value) == defaults[key], (key, value, defaults[key])


def test_the_group_size_row_says_there_is_no_default_of_8() -> None:
    """It read "`aw run -n 8` / `group_size=8`" under "default", where both are unset."""
    row = table_rows()["group size"]
    n = inspect.signature(run).parameters["n"].default.default  # the typer.Option's
    assert f"`aw run -n` is {n}" in row
    assert TrainConfig.__dataclass_fields__["group_size"].default == 0
    assert row.startswith("none")
