"""What reading commands say about data they skip: a corrupt shard, a bad label line."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from agentworld import records
from agentworld.errors import CorruptDataError
from agentworld.pool import Pool
from tests.synth import conversation_step, fill_pool

from .conftest import run_pool_command


def _pool_with_a_corrupt_shard(pool: Pool) -> Path:
    """Two good shards, and a third holding the open trajectory ``tr_open``, a byte flipped."""
    fill_pool(pool, trajectories=2, steps=2)
    fill_pool(pool, trajectories=1, steps=1, agent="other")  # ids repeat: a second shard
    before = set(pool.layout.shard_paths())
    with pool.writer() as w:
        w.append(conversation_step("tr_open", 0, dataset="arith"))
    (shard,) = set(pool.layout.shard_paths()) - before
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    return shard


def test_reading_commands_say_once_that_a_corrupt_shard_was_skipped(
    pool: Pool, caplog: pytest.LogCaptureFixture
) -> None:
    shard = _pool_with_a_corrupt_shard(pool)
    note = "1 corrupt shard skipped (run `aw pool fsck`)"
    for _ in range(2):  # also once the index remembers the shard
        with caplog.at_level(logging.WARNING):
            res = run_pool_command(pool, "stats")
        assert not caplog.records  # no logging line besides: said once
        assert res.exit_code == 0, res.output  # the rest reads: a warning, not a failure
        assert res.stdout.count(note) == 1 and note not in res.stderr
        res = run_pool_command(pool, "stats", "--json")
        rel = str(shard.relative_to(pool.root))
        assert json.loads(res.stdout)["corrupt_shards"] == [rel]
        res = run_pool_command(pool, "ls")
        assert res.exit_code == 0, res.output
        assert res.stderr.count(note) == 1 and note not in res.stdout
        res = run_pool_command(pool, "show", "tr_0000")
        assert res.exit_code == 0, res.output
        assert res.stderr.count(note) == 1


def test_show_of_an_id_in_a_corrupt_shard_names_the_shard(pool: Pool) -> None:
    shard = _pool_with_a_corrupt_shard(pool)
    res = run_pool_command(pool, "show", "tr_open")
    assert res.code == 7
    assert "'tr_open'" in res.error and shard.name in res.error and "corrupt" in res.error
    res = run_pool_command(pool, "show", "tr_nowhere")
    assert res.code == 7 and shard.name not in res.error


def test_a_corrupt_shard_is_not_hashed_again_on_every_refresh(pool: Pool, monkeypatch) -> None:
    from agentworld.pool import index as index_mod

    shard = _pool_with_a_corrupt_shard(pool)
    idx = pool.index()
    assert idx.corrupt_shards() == [str(shard.relative_to(pool.root))]
    read: list[str] = []
    real = index_mod.iter_shard_lines
    monkeypatch.setattr(index_mod, "iter_shard_lines", lambda p, *a: read.append(p) or real(p, *a))
    report = idx.refresh()
    assert not read and not report.corrupt
    assert idx.corrupt_shards() == [str(shard.relative_to(pool.root))]


def _bad_label_line(pool: Pool) -> Path:
    pool.labels.set(["trajectory:tr_0000"], {"quality": "good"}, author="ann")
    (path,) = pool.labels.files()
    with open(path, "ab") as f:
        f.write(b"this is garbage\n")
    return path


def test_a_bad_label_line_says_how_to_get_out_and_label_by_id_still_writes(pool: Pool) -> None:
    fill_pool(pool, trajectories=2, steps=1)
    bad = _bad_label_line(pool)
    res = run_pool_command(pool, "stats")
    assert res.code == 6
    assert f"{bad}:2: bad label line" in res.error and "remove or fix that line" in res.error
    # Another author's label by id is written (ids resolve without labels), with a warning.
    res = run_pool_command(pool, "label", "tr_0001", "--quality", "bad", "--author", "zed")
    assert res.exit_code == 0, res.output
    assert "labelled 1 target as zed" in res.stderr and f"warning: {bad}:2:" in res.stderr
    assert len(pool.labels.files()) == 2
    # A filter selects by labels (reward overrides): not while they cannot be read.
    res = run_pool_command(pool, "label", "--agent", "math", "--quality", "bad", "--author", "zed")
    assert res.code == 6
    bad.write_bytes(bad.read_bytes().replace(b"this is garbage\n", b""))
    res = run_pool_command(pool, "ls", "--json")
    assert res.exit_code == 0, res.output
    quality = {r["id"]: r["label_quality"] for r in json.loads(res.stdout)}
    assert quality == {"tr_0000": "good", "tr_0001": "bad"}


def test_a_bad_label_line_does_not_make_every_refresh_read_the_shards_again(
    pool: Pool, monkeypatch
) -> None:
    """The refresh failed on the label file after reading a changed shard, rolled back,
    and so read (and re-hashed) the shard again on every command until the line went."""
    from agentworld.pool import index as index_mod

    fill_pool(pool, trajectories=1, steps=1)
    idx = pool.index()
    shard = pool.layout.shard_paths()[0]
    _bad_label_line(pool)
    shard.touch()  # its mtime moves: read again, once
    read: list[Path] = []
    real = index_mod.iter_shard_lines
    monkeypatch.setattr(index_mod, "iter_shard_lines", lambda p, *a: read.append(p) or real(p, *a))
    for _ in range(3):
        with pytest.raises(CorruptDataError, match="bad label line"):
            idx.refresh()
    assert read == [shard]


def test_new_records_and_a_bad_label_line_in_one_refresh(pool: Pool) -> None:
    """The records read in the refresh that failed on labels are kept; once the line is
    removed (the label file back to the size it had), the labels are read again."""
    fill_pool(pool, trajectories=1, steps=1)
    pool.labels.set(["trajectory:tr_open"], {"quality": "good"}, author="ann")
    idx = pool.index()
    (path,) = pool.labels.files()
    good = path.read_bytes()
    path.write_bytes(good + b"garbage\n")
    with pool.writer() as w:
        w.append(conversation_step("tr_open", 0))
        w.append(records.make_end(trajectory="tr_open", agent="math", status="done", steps=1))
    with pytest.raises(CorruptDataError, match="bad label line"):
        idx.refresh()
    assert idx.trajectory("tr_open") is not None  # the new records stayed
    path.write_bytes(good)
    idx.refresh()
    assert idx.trajectory("tr_open")["label_quality"] == "good"
