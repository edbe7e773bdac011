"""What `aw pool` commands print: the words and names people and scripts read."""

from __future__ import annotations

import logging
import shutil
import zlib
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from agentworld.cli import app
from agentworld.pool import Pool
from tests.synth import fill_pool

from .conftest import run_pool_command, small_step

runner = CliRunner()


def test_label_says_the_tags_it_stored_not_the_ones_typed(pool: Pool) -> None:
    fill_pool(pool, trajectories=1, steps=1)
    res = run_pool_command(pool, "label", "tr_0000", "--tags", "x,y,x,a", "--author", "ann")
    assert res.code == 0, res.output
    assert res.stderr.strip().endswith("as ann: tags=a,x,y")
    assert pool.labels.effective()["trajectory:tr_0000"]["tags"].value == ["a", "x", "y"]


def test_diff_says_no_author_for_a_label_the_new_side_lacks(tmp_path: Path) -> None:
    """`"hi" -> null (None)`: Python's None stood where an author goes."""
    a = Pool.create(tmp_path / "a")
    fill_pool(a, trajectories=1, steps=1)
    a.close()
    shutil.copytree(tmp_path / "a", tmp_path / "b", ignore=shutil.ignore_patterns(".cache"))
    a = Pool.open(tmp_path / "a")
    a.labels.set(["trajectory:tr_0000"], {"note": "hi"}, author="ann")
    a.close()
    res = runner.invoke(app, ["pool", "diff", str(tmp_path / "a"), "--pool", str(tmp_path / "b")])
    assert res.exit_code == 0, res.output
    (line,) = [x for x in res.stdout.splitlines() if "note" in x]
    assert line.strip() == 'trajectory:tr_0000 note: "hi" -> null'
    res = runner.invoke(app, ["pool", "diff", str(tmp_path / "b"), "--pool", str(tmp_path / "a")])
    assert 'note: null -> "hi" (ann)' in res.stdout


def test_merge_calls_a_journal_it_skipped_unsealed_not_live(tmp_path: Path) -> None:
    """The journal of a writer that was killed was called "live"."""
    src, dst = Pool.create(tmp_path / "src"), Pool.create(tmp_path / "dst")
    fill_pool(src, trajectories=1, steps=1)
    _dead_writers_journal(src, torn=b"")
    res = runner.invoke(app, ["pool", "merge", str(src.root), "--pool", str(dst.root)])
    assert res.exit_code == 0, res.output
    assert "1 unsealed journal there was not merged" in res.stderr
    assert "live" not in res.stderr


def _dead_writers_journal(pool: Pool, torn: bytes) -> Path:
    """A journal as a killed writer leaves it: a header, two records, then ``torn``."""

    def frame(obj: dict[str, Any]) -> bytes:
        body = orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)
        return b"%08x " % zlib.crc32(body) + body + b"\n"

    pool.layout.journals.mkdir(exist_ok=True)
    path = pool.layout.journals / "w-host-1-abcdef-0001.journal"
    header = {"created": 1.0, "journal": 2, "writer": "w-host-1-abcdef"}
    path.write_bytes(
        frame(header) + frame(small_step("tr_dead", 0)) + frame(small_step("tr_dead", 1)) + torn
    )
    return path


def test_a_torn_tail_cut_on_recovery_is_said_once(
    pool: Pool, caplog: pytest.LogCaptureFixture
) -> None:
    """Said twice: a logging WARNING line, and the command's own "cut N torn bytes"."""
    journal = _dead_writers_journal(pool, torn=b'0000abcd {"kind": "st')
    with caplog.at_level(logging.DEBUG):
        res = runner.invoke(app, ["pool", "stats", "--pool", str(pool.root)])
    assert res.exit_code == 0, res.output
    assert res.stderr.count("torn bytes") == 1
    assert f"recovered journal {journal.name}: 2 records, cut 21 torn bytes" in res.stderr
    said = [r for r in caplog.records if "torn" in r.getMessage()]
    assert said and all(r.levelno < logging.WARNING for r in said)  # only --debug shows it


def test_a_torn_tail_cut_by_a_library_caller_is_still_logged(
    pool: Pool, caplog: pytest.LogCaptureFixture
) -> None:
    _dead_writers_journal(pool, torn=b'0000abcd {"kind": "st')
    with caplog.at_level(logging.WARNING):
        (rec,) = Pool.open(pool.root).recovered
    assert rec.torn_bytes == 21 and "cut 21 torn bytes" in caplog.text


def test_manifest_names_a_corrupt_shard_it_lists(pool: Pool) -> None:
    fill_pool(pool, trajectories=1, steps=1)
    (shard,) = pool.layout.shard_paths()
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    res = run_pool_command(pool, "manifest")
    assert res.code == 0, res.output
    (warning,) = [x for x in res.stderr.splitlines() if x.startswith("warning:")]
    assert str(shard.relative_to(pool.root)) in warning and "does not match its name" in warning
    assert shard.name.removesuffix(".jsonl.zst") in (pool.root / "MANIFEST").read_text()
