"""`aw pool ls` tables: ids whole at 80 columns, free text cut, piped output uncut."""

from __future__ import annotations

import time

import orjson
from rich.console import Console
from typer.testing import CliRunner

from agentworld import records
from agentworld.cli import app
from agentworld.errors import ConfigError
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


def _ls(pool: Pool, *args: str) -> object:
    return runner.invoke(app, ["pool", "ls", "--pool", str(pool.root), *args])


def test_step_listing_json_uses_the_public_names(pool: Pool) -> None:
    """--trajectory --json gave the index's columns: idx, grp, and where the row was read."""
    (tid,) = _write(pool, n=1)
    res = _ls(pool, "--trajectory", tid, "--json")
    assert res.exit_code == 0, res.output
    (row,) = orjson.loads(res.stdout)
    assert row["index"] == 0 and "group" in row and row["trajectory"] == tid
    assert not {"idx", "grp", "source", "line"} & row.keys()


def test_a_tag_on_a_step_selects_its_trajectory_in_the_index_and_without_it(pool: Pool) -> None:
    """`--tag x` matched only tags on trajectories; a tag set on a step (`aw pool label
    st_…`, the TUI's `.`) selected nothing. The index and Selection.matches agree."""
    from agentworld.pool import Selection

    on_step, on_trajectory, _unlabelled = _write(pool, n=3)
    step = pool.index().steps(on_step)[0]["id"]
    pool.labels.set([f"step:{step}"], {"tags": ["x"]}, author="ann")
    pool.labels.set([f"trajectory:{on_trajectory}"], {"tags": ["x", "y"]}, author="ann")
    sel = Selection(tag="x")
    assert sorted(pool.index().trajectory_ids(sel)) == sorted([on_step, on_trajectory])
    assert sorted(t.id for t in pool.iter_trajectories(sel)) == sorted([on_step, on_trajectory])
    assert pool.index().trajectory_ids(Selection(tag="y")) == [on_trajectory]
    assert [t.id for t in pool.iter_trajectories(Selection(tag="y"))] == [on_trajectory]
    res = _ls(pool, "--tag", "x", "--json")
    assert sorted(r["id"] for r in orjson.loads(res.stdout)) == sorted([on_step, on_trajectory])


def test_trajectory_refuses_filters_it_would_ignore(pool: Pool) -> None:
    (tid,) = _write(pool, n=1)
    res = _ls(pool, "--trajectory", tid, "--tag", "x", "--quality", "good")
    assert res.exit_code != 0
    assert isinstance(res.exception, ConfigError)
    assert "takes no filter" in str(res.exception) and "drop --quality, --tag" in str(res.exception)
    assert _ls(pool, "--trajectory", tid, "--json").exit_code == 0


def test_an_empty_listing_says_why_instead_of_an_empty_table(pool: Pool) -> None:
    _write(pool, n=2)
    res = _ls(pool, "--agent", "nobody")
    assert res.exit_code == 0, res.output
    assert res.stdout == ""  # no header over nothing
    assert res.stderr.splitlines()[:2] == [
        "nothing matched --agent nobody",
        "  without --agent nobody: 2 trajectories",
    ]
    assert f"agents in the pool (trajectories): {LONG_AGENT} (2)" in res.stderr
    res = _ls(pool, "--offset", "5")
    assert res.stdout == "" and "nothing past --offset 5: 2 trajectories match" in res.stderr
    assert orjson.loads(_ls(pool, "--agent", "nobody", "--json").stdout) == []


def test_an_empty_pool_lists_nothing_and_says_so(pool: Pool) -> None:
    res = _ls(pool)
    assert res.exit_code == 0 and res.stdout == ""
    assert res.stderr.strip() == "nothing matched: the pool holds no trajectories"
