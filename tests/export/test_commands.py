"""The commands through a local typer app wired the way the CLI registers them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import typer
from typer.testing import CliRunner

from agentworld.errors import ConfigError, RecordError
from agentworld.export.command import export, pool_import
from agentworld.pool import Pool
from agentworld.pool.fsck import fsck
from agentworld.pool.sync_command import diff, fetch, manifest, merge
from tests.export.trajectories import fill, trajectory_records
from tests.terminal import Stderr

app = typer.Typer()
app.command("export")(export)
pool_app = typer.Typer()  # a fresh group: the real pool_app is the CLI's to extend
pool_app.command("import")(pool_import)
pool_app.command("merge")(merge)
pool_app.command("diff")(diff)
pool_app.command("manifest")(manifest)
pool_app.command("fetch")(fetch)
app.add_typer(pool_app, name="pool")
runner = CliRunner()


def test_export_then_import_through_the_cli(filled: Pool, tmp_path: Path) -> None:
    out = tmp_path / "sft.jsonl"
    res = runner.invoke(
        app,
        ["export", "-f", "openai-jsonl", "-o", str(out), "--pool", str(filled.root),
         "--group", "g1", "--json"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["counts"]["lines"] == 2
    assert (tmp_path / "sft.jsonl.manifest.json").exists()
    other = Pool.create(tmp_path / "other")
    res = runner.invoke(
        app, ["pool", "import", str(out), "-f", "openai-jsonl", "--pool", str(other.root), "--json"]
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["trajectories"] == 2


def test_import_records_is_all_or_nothing_and_says_what_it_did(pool: Pool, tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    rows = [orjson.dumps(r) for r in trajectory_records("tr_1", answer="6", reward=1.0)]
    path.write_bytes(b"\n".join([*rows, b"not json"]) + b"\n")
    args = ["pool", "import", str(path), "-f", "records", "--pool", str(pool.root)]
    res = runner.invoke(app, args)
    assert isinstance(res.exception, RecordError) and res.exception.exit_code == 3
    assert f"{path}:5: not JSON" in str(res.exception)
    assert list(pool.iter_records()) == []
    res = runner.invoke(app, [*args, "--skip-bad"])
    assert res.exit_code == 0, res.output
    assert f"refused {path}:5: not JSON" in res.output
    assert (
        "imported 4 records of 1 trajectory (3 steps, 1 end record), "
        "0 already present, 1 bad row refused"
    ) in res.output
    res = runner.invoke(app, [*args, "--skip-bad", "--json"])
    assert json.loads(res.stdout)["skipped_existing"] == 4


def test_import_names_a_file_that_is_no_json_lines(
    filled: Pool, pool: Pool, tmp_path: Path
) -> None:
    """A Parquet export or a pool's shard given to `aw pool import` was refused line by line,
    "not JSON: str is not valid UTF-8" twenty times: its first bytes name what it is. A
    zstd file is read as records whatever its name."""
    parquet = tmp_path / "x.parquet"
    assert (
        runner.invoke(
            app, ["export", "-f", "parquet", "-o", str(parquet), "--pool", str(filled.root)]
        ).exit_code
        == 0
    )
    shard = next(filled.root.glob("objects/*/*.jsonl.zst"))
    copied = tmp_path / "copied.jsonl"  # a shard copied under a plain name
    copied.write_bytes(shard.read_bytes())
    pool = Pool.create(tmp_path / "other")
    for path, fmt, said in [
        (parquet, "records", "a Parquet file, not JSON lines"),
        (parquet, "openai-jsonl", "a Parquet file, not JSON lines"),
        (copied, "openai-jsonl", "zstd-compressed, not JSON lines"),
    ]:
        res = runner.invoke(app, ["pool", "import", str(path), "-f", fmt, "--pool", str(pool.root)])
        assert isinstance(res.exception, ConfigError), res.output
        assert str(res.exception).startswith(f"{path}: {said}; aw pool import reads JSONL")
    res = runner.invoke(
        app, ["pool", "import", str(copied), "-f", "records", "--pool", str(pool.root), "--json"]
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["trajectories"] > 0


def test_export_refuses_an_unknown_quality_and_keeps_the_output(
    filled: Pool, tmp_path: Path
) -> None:
    out = tmp_path / "sft.jsonl"
    out.write_text("earlier export\n")
    (tmp_path / "sft.jsonl.manifest.json").write_text("{}")  # an export wrote it
    args = ["export", "-f", "openai-jsonl", "-o", str(out), "--pool", str(filled.root)]
    res = runner.invoke(app, [*args, "--quality", "god"])
    assert isinstance(res.exception, ConfigError)
    assert str(res.exception).startswith("--quality: unknown quality 'god'")
    assert out.read_text() == "earlier export\n"
    filled.labels.set(["trajectory:tr_a1"], {"quality": "good"}, author="me")
    res = runner.invoke(app, [*args, "--quality", "good,unsure", "--json"])
    assert json.loads(res.stdout)["counts"]["trajectories"] == 1


@pytest.mark.parametrize(
    ("fmt", "make", "problem"),
    [
        ("openai-jsonl", "folder", "is a folder; -f openai-jsonl writes one file"),
        ("parquet", "folder", "is a folder; -f parquet writes one file"),
        ("verl", "folder", "is a folder; -f verl writes one file"),
        ("hf", "file", "is a file; -f hf writes a folder"),
        ("atif", "file", "is a file; -f atif writes a folder"),
        ("hf", "foreign folder", "is a folder but not a saved dataset"),
    ],
)
def test_export_refuses_an_out_path_of_the_wrong_kind(
    filled: Pool, tmp_path: Path, fmt: str, make: str, problem: str
) -> None:
    out = tmp_path / "out"
    if make == "file":
        out.write_text("mine\n")
    else:
        out.mkdir()
    if make == "foreign folder":
        (out / "notes.txt").write_text("mine\n")
    before = out.read_text() if make == "file" else sorted(p.name for p in out.iterdir())
    res = runner.invoke(app, ["export", "-f", fmt, "-o", str(out), "--pool", str(filled.root)])
    assert isinstance(res.exception, ConfigError)
    assert str(res.exception).startswith(f"--out: {out} {problem}")
    after = out.read_text() if make == "file" else sorted(p.name for p in out.iterdir())
    assert after == before
    assert not (tmp_path / "out.manifest.json").exists()


@pytest.mark.parametrize("fmt", ["openai-jsonl", "parquet", "verl"])
def test_export_replaces_a_file_only_an_export_wrote(
    filled: Pool, tmp_path: Path, fmt: str
) -> None:
    """``aw export -f openai-jsonl -o agents.toml`` replaced the config it named: a file no
    export wrote (no manifest beside it) is refused and kept; an export's own is replaced,
    and so is an empty file; ``-o -`` made a file named "-"."""
    out = tmp_path / "agents.toml"
    out.write_text("[agents.math]\n")

    def args(to: Path | str) -> list[str]:
        return ["export", "-f", fmt, "-o", str(to), "--pool", str(filled.root)]

    res = runner.invoke(app, args(out))
    assert isinstance(res.exception, ConfigError)
    assert str(res.exception) == (
        f"--out: {out} exists and is no export (no agents.toml.manifest.json beside it); "
        f"-f {fmt} would replace it: give a new path, or remove it first"
    )
    assert out.read_text() == "[agents.math]\n"
    assert not (tmp_path / "agents.toml.manifest.json").exists()
    mine = tmp_path / "mine.out"
    mine.write_text("")  # nothing to lose
    assert runner.invoke(app, args(mine)).exit_code == 0
    assert runner.invoke(app, args(mine)).exit_code == 0  # its own
    assert (tmp_path / "mine.out.manifest.json").is_file()
    res = runner.invoke(app, args("-"))
    assert isinstance(res.exception, ConfigError) and "--out: - (standard output)" in str(
        res.exception
    )
    assert not (Path.cwd() / "-").exists()


@pytest.mark.parametrize("fmt", ["trl", "hf"])
def test_export_refuses_a_file_name_for_a_dataset_folder(
    filled: Pool, tmp_path: Path, fmt: str
) -> None:
    """``-f trl -o sft.jsonl`` made a folder named sft.jsonl: refused, naming a folder to give;
    a folder of that name that it wrote itself is still replaced."""
    out = tmp_path / "sft.jsonl"
    args = ["export", "-f", fmt, "-o", str(out), "--pool", str(filled.root)]
    res = runner.invoke(app, args)
    assert isinstance(res.exception, ConfigError)
    assert str(res.exception) == (
        f"--out: {out} names a file, but -f {fmt} writes a dataset folder (save_to_disk; "
        f"datasets.load_from_disk reads it): give a folder such as -o {tmp_path / 'sft'}/"
        "; -f openai-jsonl writes one JSONL file"
    )
    assert not out.exists() and not (tmp_path / "sft.jsonl.manifest.json").exists()
    out.mkdir()
    (out / "state.json").write_text("{}")  # a dataset folder an earlier export wrote
    assert runner.invoke(app, args).exit_code == 0
    assert (out / "dataset_info.json").is_file()


def test_export_refuses_an_out_path_under_a_file(filled: Pool, tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    out = tmp_path / "f" / "sft.jsonl"
    res = runner.invoke(
        app, ["export", "-f", "openai-jsonl", "-o", str(out), "--pool", str(filled.root)]
    )
    assert isinstance(res.exception, ConfigError)
    assert str(res.exception).startswith(f"--out: cannot create the folder {tmp_path / 'f'}")


def test_export_rejects_unknown_format(filled: Pool, tmp_path: Path) -> None:
    res = runner.invoke(
        app, ["export", "-f", "csv", "-o", str(tmp_path / "x"), "--pool", str(filled.root)]
    )
    assert res.exit_code != 0 and "unknown export format" in str(res.exception)


def test_merge_and_diff_commands(tmp_path: Path) -> None:
    a, b = Pool.create(tmp_path / "a"), Pool.create(tmp_path / "b")
    fill(a, [{"tid": "tr_1", "answer": "6", "reward": 1.0}])
    fill(b, [{"tid": "tr_2", "answer": "6", "reward": 1.0}])
    res = runner.invoke(app, ["pool", "diff", str(tmp_path / "a"), str(tmp_path / "b"), "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["added_trajectories"] == ["tr_2"] and d["removed_trajectories"] == ["tr_1"]
    res = runner.invoke(app, ["pool", "merge", str(tmp_path / "b"), "--pool", str(a.root)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["pool", "diff", str(tmp_path / "b"), "--pool", str(a.root)])
    assert res.exit_code == 0 and "trajectories: +1 -0" in res.stdout and "+ tr_1" in res.stdout


def test_manifest_check_fails_on_a_missing_shard(pool: Pool) -> None:
    fill(pool, [{"tid": "tr_1", "answer": "6", "reward": 1.0}])
    assert runner.invoke(app, ["pool", "manifest", "--pool", str(pool.root)]).exit_code == 0
    assert (
        runner.invoke(app, ["pool", "manifest", "--check", "--pool", str(pool.root)]).exit_code == 0
    )
    pool.layout.shard_paths()[0].unlink()
    res = runner.invoke(app, ["pool", "manifest", "--check", "--pool", str(pool.root)])
    assert res.exit_code != 0 and "missing or corrupt" in str(res.exception)


def test_command_modules_import_nothing_heavy() -> None:
    code = (
        "import sys\n"
        "import agentworld.export.command, agentworld.pool.sync_command\n"
        "print([m for m in ('pyarrow', 'datasets', 'torch', 'pandas') if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).parents[2],
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_an_empty_selection_says_so_names_filters_and_what_matched(
    filled: Pool, tmp_path: Path
) -> None:
    out = tmp_path / "sft.jsonl"
    args = ["export", "-f", "openai-jsonl", "-o", str(out), "--pool", str(filled.root)]
    res = runner.invoke(app, [*args, "--dataset", "arithmetic", "--min-reward", "1"])
    assert res.exit_code == 7, res.output
    err = res.stderr
    assert (
        "nothing matched --dataset arithmetic, --status done, --min-reward 1.0, not labelled" in err
    )
    assert "without --dataset arithmetic: 2 trajectories" in err  # the two with reward 1
    assert "datasets in the pool (trajectories): arith (4)" in err
    assert out.read_text() == ""  # still written: the consumer finds the file it expects
    res = runner.invoke(app, [*args, "--dataset", "arith", "--min-reward", "1"])
    assert res.exit_code == 0 and "nothing matched" not in res.stderr
    assert len(out.read_text().splitlines()) == 2


@pytest.mark.parametrize("fmt, out", [("openai-jsonl", "dpo.jsonl"), ("trl", "dpo")])
def test_a_selection_that_makes_no_rows_exits_7_too(
    filled: Pool, tmp_path: Path, fmt: str, out: str
) -> None:
    """Trajectories matched, but none made a pair (each group's other side filtered out):
    `aw export … && train` must not go on to train on an empty file."""
    args = ["export", "-f", fmt, "--variant", "preference", "-o", str(tmp_path / out)]
    res = runner.invoke(app, [*args, "--pool", str(filled.root), "--min-reward", "1"])
    assert res.exit_code == 7, res.output
    assert f"-f {fmt} --variant preference made nothing of the 2 trajectories selected" in (
        res.stderr
    )
    assert "groups_of_one 2" in res.stderr  # the count that says why
    res = runner.invoke(app, [*args, "--pool", str(filled.root)])
    if fmt == "trl":  # both sides of each group: pairs
        assert res.exit_code == 0 and "made nothing" not in res.stderr
    else:  # OpenAI's preference format takes one-turn inputs only; these are multi-turn
        assert res.exit_code == 7 and "left out 2 pairs_multi_turn_input" in res.stderr


@pytest.mark.parametrize(
    "fmt, flag, value, takers",
    [
        ("parquet", "--variant", "preference", "-f openai-jsonl and -f trl"),
        ("verl", "--variant", "chat", "-f openai-jsonl and -f trl"),
        ("trl", "--rows", "trajectory", "-f parquet and -f hf"),
        ("openai-jsonl", "--ability", "math", "-f verl"),
        ("atif", "--data-source", "gsm8k", "-f verl"),
    ],
)
def test_an_option_the_format_does_not_take_is_refused(
    filled: Pool, tmp_path: Path, fmt: str, flag: str, value: str, takers: str
) -> None:
    out = tmp_path / ("out" if fmt in ("trl", "atif") else "out.file")
    args = ["export", "-f", fmt, "-o", str(out), "--pool", str(filled.root), flag, value]
    res = runner.invoke(app, args)
    assert isinstance(res.exception, ConfigError), res.output
    assert str(res.exception) == f"{flag}: -f {fmt} does not take it (only {takers})"
    assert not out.exists()  # refused before anything was written


def test_merge_with_a_bad_shard_there_merges_the_rest_names_it_and_exits_6(
    pool: Pool, tmp_path: Path
) -> None:
    other = Pool.create(tmp_path / "other")
    fill(other, [{"tid": "tr_bad", "answer": "7", "reward": 0.0}])
    (bad,) = other.layout.shard_paths()
    bad.write_bytes(bad.read_bytes()[:-1] + b"\x00")
    fill(other, [{"tid": "tr_good", "answer": "6", "reward": 1.0}])
    res = runner.invoke(app, ["pool", "merge", str(other.root), "--pool", str(pool.root)])
    assert res.exit_code == 6, res.output
    assert f"not merged: {bad}" in res.stderr and "1 shard copied" in res.stderr
    assert [t.id for t in pool.iter_trajectories()] == ["tr_good"]


@pytest.mark.parametrize("tty", [True, False])
def test_an_export_counts_trajectories_on_a_terminal_only(
    filled: Pool, tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch, tty: bool
) -> None:
    """A long export said nothing until it ended; off a terminal stderr stays the summary."""
    monkeypatch.setattr("agentworld.export.command.sys.stderr", Stderr(sys.stderr, tty))
    capfd.readouterr()
    args = [
        "export",
        "-f",
        "parquet",
        "-o",
        str(tmp_path / "s.parquet"),
        "--pool",
        str(filled.root),
    ]
    assert typer.main.get_command(app).main(args, standalone_mode=False) is None
    err = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", capfd.readouterr().err)  # colours, cursor
    assert ("exporting parquet" in err and "4/4 trajectories" in err) is tty
    if not tty:
        assert err.startswith("wrote ") and err.count("\n") == 1, err


def test_hf_export_warns_of_rows_without_engine_ids(pool: Pool, tmp_path: Path) -> None:
    """Rows recorded without engine ids have empty ``input_ids``: TRL reads -f hf as
    pre-tokenized, trains nothing on them and fails on a batch of only such rows, and the
    export said only "rows 6". The count and the remedy are named; -f trl needs no ids."""
    fill(pool, [{"tid": "tr_x", "answer": "6", "reward": 1.0, "engine": False}])
    fill(pool, [{"tid": "tr_y", "answer": "6", "reward": 1.0}])
    res = runner.invoke(
        app, ["export", "-f", "hf", "-o", str(tmp_path / "hf"), "--pool", str(pool.root)]
    )
    assert res.exit_code == 0, res.output
    assert "rows 6, rows_without_ids 3" in res.stderr  # a step row each, tr_x's three
    assert "warning: 3 of 6 rows have no engine token ids" in res.stderr
    assert "-f trl renders them" in res.stderr
    trl = ["export", "-f", "trl", "-o", str(tmp_path / "trl"), "--pool", str(pool.root)]
    assert "warning" not in runner.invoke(app, trl).stderr


def test_text_only_formats_say_they_left_images_out(pool: Pool, tmp_path: Path) -> None:
    """-f trl, hf, verl and atif keep the text of content parts: an image in a prompt was
    left out and nothing said so. The trajectories holding such parts are counted and
    named on stderr; -f openai-jsonl keeps them and says nothing."""
    recs = trajectory_records("tr_img", answer="6", reward=1.0, turns=1)
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    for rec in recs:
        msgs = (rec.get("request") or {}).get("messages")
        if msgs:
            msgs[1]["content"] = [{"type": "text", "text": "What is shown?"}, image]
    with pool.writer() as w:
        for rec in recs:
            w.append(rec)
    fill(pool, [{"tid": "tr_txt", "answer": "6", "reward": 1.0}])
    for fmt, out in (("trl", "trl"), ("atif", "atif"), ("openai-jsonl", "sft.jsonl")):
        res = runner.invoke(
            app, ["export", "-f", fmt, "-o", str(tmp_path / out), "--pool", str(pool.root)]
        )
        assert res.exit_code == 0, res.output
        if fmt == "openai-jsonl":
            assert "content other than text" not in res.stderr
        else:
            assert "trajectories_with_non_text_content 1" in res.stderr
            assert (
                "warning: 1 trajectory holds content other than text (images, audio, files): "
                f"-f {fmt} keeps only the text"
            ) in res.stderr


def test_an_atif_export_imported_elsewhere_merges_back_as_already_here(
    filled: Pool, tmp_path: Path
) -> None:
    """The reported round trip, command by command: the merge copied the import's shard
    (a second record under every id) and `aw pool fsck` then failed on 16 records."""
    out, other = tmp_path / "trajs", Pool.create(tmp_path / "other")
    res = runner.invoke(app, ["export", "-f", "atif", "-o", str(out), "--pool", str(filled.root)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["pool", "import", str(out), "-f", "atif", "--pool", str(other.root)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["pool", "merge", str(other.root), "--pool", str(filled.root)])
    assert res.exit_code == 0, res.output
    assert (
        "4 trajectories there are already here, one pool holding them as an `aw pool import` "
        "of the other's (tr_a1, tr_a2, tr_b1, tr_b2): this pool's copy kept, their 16 records "
        "not merged"
    ) in res.stderr
    report = fsck(filled)
    assert report.ok and report.records == 16, report.problems
