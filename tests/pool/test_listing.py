"""`aw pool ls` tables: ids whole at 80 columns, free text cut, piped output uncut."""

from __future__ import annotations

import time

import orjson
from rich.console import Console
from typer.testing import CliRunner

from agentworld import records
from agentworld.cli import app
from agentworld.pool import Pool
from agentworld.pool.listing import TRAJECTORIES, Column, fit_table, short_time

runner = CliRunner()

LONG_AGENT = "a-coding-agent-with-a-long-name"
LONG_TASK = "swe-bench/django__django-11099-and-then-some"


def _write(pool: Pool, n: int = 3) -> list[str]:
    ids = []
    with pool.writer() as w:
        for _ in range(n):
            tid = records.new_id("tr")  # full-length ids, as the proxy mints them
            ids.append(tid)
            w.append(
                records.make_step(
                    trajectory=tid,
                    index=0,
                    agent=LONG_AGENT,
                    task=LONG_TASK,
                    request={"messages": [{"role": "user", "content": "q\n  with   spaces"}]},
                    response={"message": {"role": "assistant", "content": "x" * 300}},
                )
            )
            w.append(
                records.make_end(
                    trajectory=tid, agent=LONG_AGENT, task=LONG_TASK, status="done", steps=1
                )
            )
    return ids


def _lines(out: str) -> list[str]:
    return [line.rstrip() for line in out.splitlines() if line.strip()]


def test_an_80_column_listing_keeps_ids_status_and_counts_whole(pool: Pool) -> None:
    ids = _write(pool)
    res = runner.invoke(app, ["pool", "ls", "--pool", str(pool.root)], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    lines = _lines(res.stdout)
    assert max(map(len, lines)) <= 80
    header = lines[0].split()
    # dataset and labels are empty in every row: left out; agent and task cut, not folded
    assert header == ["trajectory", "agent", "task", "status", "steps", "reward", "last"]
    rows = [line for line in lines if line.startswith("tr_")]
    assert sorted(r.split()[0] for r in rows) == sorted(ids)
    for r in rows:
        assert "…" in r and LONG_AGENT not in r
        assert r.split()[-5:-2] == ["done", "1", "-"]  # status, steps, reward
    assert lines[-1] == "3 of 3 trajectories"


def test_piped_listing_is_not_cut(pool: Pool) -> None:
    _write(pool, n=1)
    env = {"COLUMNS": None}  # a pipe: no terminal, no width
    res = runner.invoke(app, ["pool", "ls", "--pool", str(pool.root)], env=env)
    assert res.exit_code == 0, res.output
    assert LONG_AGENT in res.stdout and LONG_TASK in res.stdout and "…" not in res.stdout


def test_step_listing_keeps_step_ids_and_flattens_text(pool: Pool) -> None:
    (tid,) = _write(pool, n=1)
    res = runner.invoke(
        app, ["pool", "ls", "--pool", str(pool.root), "--trajectory", tid], env={"COLUMNS": "80"}
    )
    assert res.exit_code == 0, res.output
    lines = _lines(res.stdout)
    assert max(map(len, lines)) <= 80
    (row,) = [line for line in lines if " st_" in line]
    step_id = row.split()[1]
    assert step_id.startswith("st_") and len(step_id) == len(tid)
    assert "q with spaces" in row and row.endswith("…")


def test_fit_table_gives_narrow_free_text_its_width_and_shares_the_rest() -> None:
    cols = (Column("id"), Column("a", flex=True), Column("b", flex=True), Column("n", right=True))
    rows = [("x" * 30, "short", "y" * 200, "12345")]
    out = Console(width=80, record=True, highlight=False)
    out.print(fit_table(cols, rows, 80))
    line = _lines(out.export_text())[-1]
    assert len(line) <= 80
    assert line.startswith("x" * 30 + "  short  ") and line.endswith("…  12345")
    wide = Console(width=400, record=True, highlight=False)
    wide.print(fit_table(cols, rows, 400))
    assert "y" * 200 in wide.export_text()


def test_short_time_shows_the_year_only_for_other_years() -> None:
    now = time.mktime((2026, 12, 1, 9, 0, 0, 0, 0, -1))
    assert short_time(time.mktime((2026, 3, 4, 5, 6, 7, 0, 0, -1)), now) == "03-04 05:06"
    assert short_time(time.mktime((2025, 12, 31, 23, 0, 0, 0, 0, -1)), now) == "2025-12-31"
    assert short_time(None, now) == "-"


def test_the_least_useful_free_text_goes_first_when_the_width_is_short() -> None:
    """The trajectory listing's own columns: dataset goes before task, task before agent."""
    row = (
        "tr_" + "x" * 26,
        "math",
        "arithmetic",
        "basic_arithmetic-7-0",
        "done",
        "1",
        "0",
        "",
        "12-01 06:48",
    )
    out = Console(width=80, record=True, highlight=False)
    out.print(fit_table(TRAJECTORIES, [row], 80))
    header, _, line = _lines(out.export_text())
    names = ["trajectory", "agent", "task", "status", "steps", "reward", "last"]
    assert header.split() == names  # no dataset (labels: empty in every row)
    assert len(line) <= 80 and line.endswith("done        1       0  12-01 06:48")
    assert line.split()[1] == "math" and line.split()[2].endswith("…")
    narrower = Console(width=72, record=True, highlight=False)
    narrower.print(fit_table(TRAJECTORIES, [row], 72))
    text = narrower.export_text()
    assert "task" not in text and "basic" not in text and "math" in text


def test_the_short_ids_the_tui_shows_find_their_trajectory_and_step(pool: Pool) -> None:
    (tid,) = _write(pool, n=1)
    res = runner.invoke(app, ["pool", "show", tid[-10:], "--pool", str(pool.root), "--json"])
    assert res.exit_code == 0, res.output
    data = orjson.loads(res.stdout)
    assert data["end"]["trajectory"] == tid
    step_id = data["steps"][0]["id"]
    res = runner.invoke(app, ["pool", "show", step_id[-8:], "--pool", str(pool.root), "--json"])
    assert res.exit_code == 0 and orjson.loads(res.stdout)["id"] == step_id
    for wild in ("%" * 8, "_" * 8, tid[-5:]):  # LIKE wildcards are literal; 5 is too short
        res = runner.invoke(app, ["pool", "show", wild, "--pool", str(pool.root)])
        assert res.exit_code != 0 and "no step or trajectory matches" in str(res.exception)
