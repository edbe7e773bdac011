"""The `aw` CLI: pool commands, errors as one line with stable exit codes, light imports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentworld.cli import app
from agentworld.errors import ConfigError, NotFoundError, PoolError, RecordError
from agentworld.pool import Pool
from tests.synth import fill_pool

runner = CliRunner()


def aw(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentworld.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).parent.parent,
    )


def test_help_imports_no_heavy_packages() -> None:
    code = (
        "import sys; sys.argv = ['aw', '--help']\n"
        "from agentworld.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('torch', 'transformers', 'vllm', 'textual', 'accelerate') "
        "if m in sys.modules]\n"
        "print('HEAVY', heavy)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).parent.parent,
    )
    assert "HEAVY []" in out.stdout, out.stdout + out.stderr


def test_help_keeps_bracketed_words() -> None:
    """Rich reads ``[word]`` in help text as markup and drops it unless escaped."""
    import typer.main

    def commands(cmd, path):
        yield path, cmd
        for name, sub in getattr(cmd, "commands", {}).items():
            yield from commands(sub, [*path, name])

    checked = 0
    for path, cmd in commands(typer.main.get_command(app), []):
        for param in cmd.params:
            help_text = getattr(param, "help", None) or ""
            if "[" in help_text:
                shown = runner.invoke(app, [*path, "--help"]).output
                shown = " ".join(shown.replace("│", " ").split())  # unwrapped
                assert help_text.replace("\\[", "[") in shown, (path, help_text)
                checked += 1
    assert checked >= 2


def test_init_creates_pool_and_configs(tmp_path: Path) -> None:
    res = runner.invoke(app, ["init", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "pool" / "POOL.toml").exists()
    Pool.open(tmp_path / "pool")  # readable
    assert f"wrote {tmp_path / 'agents.toml'}" in res.output
    assert f"next (in {tmp_path}):" in res.output  # what to run there, in order
    steps = [line.split("#")[0].split() for line in res.output.splitlines()[-3:]]
    assert [s[:2] for s in steps] == [["aw", "serve"], ["aw", "run"], ["aw", "tui"]]
    assert "--dataset mini-gsm" in res.output  # a dataset the written datasets.toml has
    assert "[datasets.mini-gsm]" in (tmp_path / "datasets.toml").read_text()
    (tmp_path / "agents.toml").write_text("# mine\n")
    again = runner.invoke(app, ["init", str(tmp_path)])
    assert again.exit_code == 0 and f"kept {tmp_path / 'agents.toml'} (already there)" in (
        again.output
    )
    assert (tmp_path / "agents.toml").read_text() == "# mine\n"


def test_stats_and_ls_json(pool: Pool) -> None:
    fill_pool(pool, trajectories=4, steps=3)
    res = runner.invoke(app, ["pool", "stats", "--pool", str(pool.root), "--json"])
    assert res.exit_code == 0, res.output
    stats = json.loads(res.stdout)
    assert stats["steps"] == 12
    assert stats["trajectories"] == 4
    assert stats["trajectories_by_status"] == {"done": 4}
    res = runner.invoke(
        app, ["pool", "ls", "--pool", str(pool.root), "--json", "--min-reward", "1"]
    )
    rows = json.loads(res.stdout)
    assert sorted(r["id"] for r in rows) == ["tr_0001", "tr_0003"]
    res = runner.invoke(
        app, ["pool", "ls", "--pool", str(pool.root), "--trajectory", "tr_0001", "--json"]
    )
    assert [r["index"] for r in json.loads(res.stdout)] == [0, 1, 2]


def test_show_is_literal_and_json(pool: Pool) -> None:
    fill_pool(pool, trajectories=1, steps=2)
    res = runner.invoke(app, ["pool", "show", "tr_0000", "--pool", str(pool.root), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert [s["index"] for s in data["steps"]] == [0, 1]
    assert data["end"]["status"] == "done"
    res = runner.invoke(app, ["pool", "show", "tr_0000", "--pool", str(pool.root)])
    assert "The answer is 41." in res.stdout


# Bidirectional and zero-width format characters: text that reads other than it is.
BIDI = "\u202e\u2066\u2067\u2068\u2069\u200b\u200e\u200f\u061c\u202a\u2060\ufeff"


def test_show_and_ls_never_pass_terminal_escapes_through(pool: Pool) -> None:
    """Agents' tool output carries terminal codes (colours, a screen clear): shown, they
    would act on the reader's terminal. They are printed as visible ``\\xNN`` escapes."""
    from agentworld import records

    evil = "\x1b[2J\x1b]0;pwned\x07done\x1b[31m\u202eexe.txt\u2066" + BIDI
    with pool.writer() as w:
        w.append(
            records.make_step(
                trajectory="tr_esc",
                index=0,
                agent="[red]math\x1b[5m",  # ids may hold anything but slashes and blanks
                request={
                    "messages": [
                        {"role": "user", "content": "ls"},
                        {"role": "tool", "tool_call_id": "c\x1b[1m", "content": evil},
                    ]
                },
                response={
                    "message": {
                        "role": "assistant",
                        "content": evil,
                        "reasoning": evil,
                        "tool_calls": [{"id": "c", "name": "sh", "arguments": evil}],
                    }
                },
                status="error",
                error={"type": "upstream_invalid", "message": evil},
            )
        )
    shown = ""
    for args in (
        ["pool", "show", "tr_esc"],
        ["pool", "ls"],
        ["pool", "ls", "--trajectory", "tr_esc"],
        ["pool", "stats"],
    ):
        res = runner.invoke(app, [*args, "--pool", str(pool.root)], terminal_width=200)
        assert res.exit_code == 0, res.output
        assert "\x1b" not in res.stdout and "\x07" not in res.stdout, args
        assert not set(BIDI) & set(res.stdout), args  # nor text that reorders itself
        shown += res.stdout
    assert "\\x1b[2J" in shown and "\\x07done" in shown  # the text is all there, inert
    assert "\\u202eexe.txt\\u2066" in shown
    assert "[red]math" in shown  # a name, not markup


def test_show_names_what_the_proxy_left_out_of_a_step(pool: Pool) -> None:
    from tests.synth import conversation_step

    step = conversation_step("tr_lo", 0)
    step["tokens"] = {"source": "none"}
    step["metadata"] = {"upstream_invalid": {"tokens.completion_ids[0]": "not an id"}}
    with pool.writer() as w:
        w.append(step)
    res = runner.invoke(app, ["pool", "show", "tr_lo", "--pool", str(pool.root)])
    assert res.exit_code == 0, res.output
    assert "left out tokens.completion_ids[0]" in " ".join(res.stdout.split())


def test_label_by_id_and_by_filter(pool: Pool) -> None:
    fill_pool(pool, trajectories=4, steps=1)
    res = runner.invoke(
        app,
        [
            "pool",
            "label",
            "tr_0000",
            "--quality",
            "good",
            "--pool",
            str(pool.root),
            "--author",
            "ann",
        ],
    )
    assert res.exit_code == 0, res.output
    res = runner.invoke(
        app,
        [
            "pool",
            "label",
            "--untrainable",
            "--max-reward",
            "0",
            "--pool",
            str(pool.root),
            "--author",
            "bob",
        ],
    )
    assert res.exit_code == 0, res.output
    assert res.stderr.strip().endswith("as bob: trainable=false")  # not {'trainable': False}
    eff = pool.labels.effective()
    assert eff["trajectory:tr_0000"]["quality"].value == "good"
    assert eff["trajectory:tr_0000"]["trainable"].value is False
    assert eff["trajectory:tr_0002"]["trainable"].author == "bob"
    assert "trajectory:tr_0001" not in eff
    res = runner.invoke(app, ["pool", "label", "--untrainable", "--pool", str(pool.root)])
    assert isinstance(res.exception, ConfigError) and "refusing" in str(res.exception)


def test_errors_are_one_line_with_stable_exit_codes(tmp_path: Path) -> None:
    out = aw("pool", "stats", "--pool", str(tmp_path / "missing"))
    assert out.returncode == PoolError.exit_code
    assert out.stderr.strip().startswith("aw: error:") and "Traceback" not in out.stderr
    assert "POOL.toml" in out.stderr
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "POOL.toml").write_text('format = "agentworld-pool"\nversion = 99\n')
    out = aw("pool", "ls", "--pool", str(tmp_path / "p"))
    assert out.returncode == 5 and "version 99" in out.stderr


@pytest.mark.parametrize("command", ["show", "label"])
def test_show_and_label_resolve_ids_alike(pool: Pool, command: str) -> None:
    """No match and several matches are NotFoundError for both; an empty id is refused."""
    fill_pool(pool, trajectories=2, steps=1)
    extra = ["--quality", "good"] if command == "label" else []
    for ident, says in (("tr_nope", "no step or trajectory matches"), ("tr_000", "ambiguous")):
        res = runner.invoke(app, ["pool", command, ident, *extra, "--pool", str(pool.root)])
        assert isinstance(res.exception, NotFoundError), res.exception
        assert says in str(res.exception)
    res = runner.invoke(app, ["pool", command, "", *extra, "--pool", str(pool.root)])
    assert isinstance(res.exception, ConfigError) and "id is empty" in str(res.exception)
    assert pool.labels.effective() == {}


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--quality", "good", "--clear", "quality"], "--clear quality conflicts with --quality"),
        (["--trainable", "--clear", "note,trainable"], "conflicts with --trainable/--untrainable"),
    ],
)
def test_label_refuses_setting_and_clearing_one_field(
    pool: Pool, flags: list[str], says: str
) -> None:
    fill_pool(pool, trajectories=1, steps=1)
    res = runner.invoke(app, ["pool", "label", "tr_0000", *flags, "--pool", str(pool.root)])
    assert isinstance(res.exception, ConfigError) and says in str(res.exception)
    assert pool.labels.effective() == {}
    res = runner.invoke(
        app, ["pool", "label", "tr_0000", "--clear", "quality,quality", "--pool", str(pool.root)]
    )
    assert res.exit_code == 0, res.output


def test_stderr_off_a_terminal_holds_no_progress_residue(pool: Pool) -> None:
    """Off a terminal the progress bar prints nothing, so an error is exactly one line."""
    fill_pool(pool, trajectories=1, steps=1)
    out = aw("pool", "stats", "--pool", str(pool.root))
    assert out.returncode == 0 and out.stderr == ""
    out = aw("pool", "fsck", "--pool", str(pool.root))
    assert out.returncode == 0 and out.stderr.count("\n") == 1, repr(out.stderr)
    out = aw("pool", "show", "tr_nope", "--pool", str(pool.root))
    assert out.returncode == NotFoundError.exit_code
    assert out.stderr.startswith("aw: error: no step") and out.stderr.count("\n") == 1
    out = aw(
        "export",
        "-f",
        "openai-jsonl",
        "-o",
        str(pool.root.parent / "sft.jsonl"),
        "--pool",
        str(pool.root),
    )
    assert out.returncode == 0 and not out.stderr.startswith("\n"), repr(out.stderr)


@pytest.mark.parametrize(
    "bad",
    [
        ["pool", "ls", "--sort", "nope"],
        ["pool", "ls", "--status", "weird"],
        ["pool", "ls", "--quality", "good,god"],
    ],
)
def test_bad_flags_name_the_flag(pool: Pool, bad: list[str]) -> None:
    out = aw(*bad, "--pool", str(pool.root))
    assert out.returncode == 2, out.stderr
    assert f"aw: error: {bad[2]}: unknown" in out.stderr
    if bad[2] != "--sort":  # the names it knows, as a list a person reads, not a tuple
        assert "known: open, done, failed" in out.stderr or "known: good, bad" in out.stderr


def test_fsck_names_a_corrupt_shard_and_gc_runs(pool: Pool) -> None:
    fill_pool(pool, trajectories=2, steps=2)
    res = runner.invoke(app, ["pool", "fsck", "--pool", str(pool.root), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["ok"] is True
    shard = pool.layout.shard_paths()[0]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    res = runner.invoke(app, ["pool", "fsck", "--pool", str(pool.root)])
    assert res.exit_code == 6
    assert shard.name in res.stdout
    res = runner.invoke(app, ["pool", "gc", "--pool", str(pool.root), "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["dry_run"] is True
    assert shard.exists()  # gc never deletes a live (even corrupt) shard


@pytest.mark.parametrize("flag", ["--note", "--author", "--tags"])
def test_label_text_that_is_not_utf8_is_one_error_and_writes_nothing(pool: Pool, flag: str) -> None:
    fill_pool(pool, trajectories=1, steps=1)
    args = ["pool", "label", "tr_0000", "--pool", str(pool.root), "--quality", "good", flag]
    out = subprocess.run(
        [sys.executable, "-m", "agentworld.cli", *args, b"a\xffb"],  # type: ignore[list-item]
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).parent.parent,
    )
    assert out.returncode == RecordError.exit_code, out.stderr
    assert out.stderr.count("\n") == 1 and "UTF-8" in out.stderr, out.stderr
    assert not [p for p in pool.layout.labels.iterdir() if p.is_dir()]  # no empty author folder


def test_seal_on_a_full_disk_is_one_error_line(pool: Pool, monkeypatch, capsys) -> None:
    import errno

    from agentworld import cli
    from agentworld.pool import maintenance

    def full(*_a: object, **_k: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(pool.root / "objects"))

    monkeypatch.setattr(maintenance, "seal_idle", full)
    monkeypatch.setattr(sys, "argv", ["aw", "pool", "seal", "--pool", str(pool.root)])
    with pytest.raises(SystemExit) as done:
        cli.main()
    assert done.value.code == 1
    err = capsys.readouterr().err
    assert err == f"aw: error: No space left on device: {pool.root / 'objects'}\n"


def test_pool_diff_prints_label_values_as_json_not_python(tmp_path: Path) -> None:
    import shutil

    a = Pool.create(tmp_path / "a")
    fill_pool(a, trajectories=1, steps=1)
    a.close()
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    b = Pool.open(tmp_path / "b")
    b.labels.set(["trajectory:tr_0000"], {"trainable": False}, author="ann")
    b.close()
    res = runner.invoke(app, ["pool", "diff", str(tmp_path / "b"), "--pool", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    assert "trajectory:tr_0000 trainable: false -> null" in res.stdout  # not False -> None
