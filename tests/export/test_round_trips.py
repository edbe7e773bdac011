"""Every format with an importer: export, import into a fresh pool, export again: the same rows;
and an ATIF import merged back into the pool it came from."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from agentworld.export import ExportOptions, export
from agentworld.export.ingest import import_file
from agentworld.pool import Pool
from agentworld.pool.fsck import fsck
from agentworld.pool.maintenance import compact
from agentworld.pool.merge import merge_pools
from tests.export.trajectories import fill, orphan_records


@pytest.fixture
def mixed(filled: Pool) -> Pool:
    """Multi-step tool calling, groups, an orphan tool result, step and trajectory labels."""
    fill(filled, [{"tid": "tr_c1", "answer": "6", "reward": 1.0, "group": "g3", "turns": 0},
                  {"tid": "tr_c2", "answer": "4", "reward": 0.0, "group": "g3", "turns": 0}])  # fmt: skip
    with filled.writer() as w:
        for rec in orphan_records("tr_orphan"):
            w.append(rec)
    filled.labels.set(["step:tr_a1_s1"], {"trainable": False}, author="me")
    filled.labels.set(["trajectory:tr_a2"], {"quality": "bad", "tags": ["x"]}, author="me")
    return filled


def _lines(path: Path) -> list[str]:
    return sorted(
        json.dumps(json.loads(line), sort_keys=True) for line in path.read_text().splitlines()
    )


@pytest.mark.parametrize(
    ("fmt", "name", "variant"),
    [
        ("openai-jsonl", "sft.jsonl", "chat"),
        ("openai-jsonl", "dpo.jsonl", "preference"),
        ("atif", "trajs.jsonl", "chat"),
    ],
)
def test_export_import_export_gives_the_same_rows(
    mixed: Pool, tmp_path: Path, fmt: str, name: str, variant: str
) -> None:
    opts = ExportOptions(variant=variant)
    first, second = tmp_path / "first" / name, tmp_path / "second" / name
    m1 = export(mixed, fmt, first, options=opts)
    assert m1["counts"]["lines"] > 0
    other = Pool.create(tmp_path / "other")
    report = import_file(other, first, fmt)
    assert not report.bad_rows and report.trajectories > 0
    m2 = export(other, fmt, second, options=opts)
    assert _lines(first) == _lines(second)
    assert m2["counts"]["lines"] == m1["counts"]["lines"]


def test_records_import_then_dump_gives_the_same_records(mixed: Pool, tmp_path: Path) -> None:
    dump = tmp_path / "records.jsonl"
    dump.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in mixed.iter_records()))
    other = Pool.create(tmp_path / "other")
    import_file(other, dump, "records")
    again = sorted(orjson.dumps(r, option=orjson.OPT_SORT_KEYS) for r in other.iter_records())
    assert again == sorted(
        orjson.dumps(r, option=orjson.OPT_SORT_KEYS) for r in mixed.iter_records()
    )


def _stored(pool: Pool) -> list[bytes]:
    return sorted(orjson.dumps(r, option=orjson.OPT_SORT_KEYS) for r in pool.iter_records())


def test_atif_imported_elsewhere_and_merged_back_is_already_here(
    mixed: Pool, tmp_path: Path
) -> None:
    """Exported to ATIF, imported into another pool (same trajectory and step ids, fewer
    fields), curated there and merged back: the merge copied the import's shard as it was,
    a second record under every id and a second end record for every trajectory, and
    `aw pool fsck` failed. Now they are already here; the curation comes, nothing else."""
    before = _stored(mixed)
    export(mixed, "atif", tmp_path / "trajs.jsonl")
    other = Pool.create(tmp_path / "other")
    imported = import_file(other, tmp_path / "trajs.jsonl", "atif")
    other.labels.set(["trajectory:tr_b1"], {"quality": "good"}, author="curator")
    report = merge_pools(mixed.layout, other.root)
    assert report.trajectories_already_here == imported.trajectories == 7
    assert report.records_left_out == imported.steps + imported.trajectories
    assert "tr_a1" in report.already_here and report.shards_copied == 0
    assert _stored(mixed) == before
    labels = {t: {f: e.value for f, e in fs.items()} for t, fs in mixed.labels.effective().items()}
    assert labels == {
        "step:tr_a1_s1": {"trainable": False},
        "trajectory:tr_a2": {"quality": "bad", "tags": ["x"]},
        "trajectory:tr_b1": {"quality": "good"},
    }
    result = fsck(mixed)
    assert result.ok and not result.warnings, result.problems
    # The other way round the import's copies are what is here: kept, as `aw pool import`
    # keeps what a pool holds; the originals stay in their pool.
    back = merge_pools(other.layout, mixed.root)
    assert back.trajectories_already_here == 7 and back.shards_copied == 0
    assert fsck(other).ok


def test_a_merge_back_brings_what_is_new_there_without_the_import_copies(
    filled: Pool, tmp_path: Path
) -> None:
    """The shard holding the import also holds a trajectory new here, compacted there with
    one recorded there: those two come, written anew without the copies."""
    export(filled, "atif", tmp_path / "here.jsonl")
    elsewhere = Pool.create(tmp_path / "elsewhere")
    fill(elsewhere, [{"tid": "tr_new2", "answer": "6", "reward": 1.0}])
    export(elsewhere, "atif", tmp_path / "new.jsonl")
    both = tmp_path / "both.jsonl"
    both.write_bytes((tmp_path / "here.jsonl").read_bytes() + (tmp_path / "new.jsonl").read_bytes())
    other = Pool.create(tmp_path / "other")
    fill(other, [{"tid": "tr_new1", "answer": "5", "reward": 0.0}])
    assert import_file(other, both, "atif").trajectories == 5
    assert compact(other).output  # one shard now, the two it replaced superseded
    report = merge_pools(filled.layout, other.root)
    assert report.trajectories_already_here == 4 and report.shards_rewritten == 1
    assert report.shards_copied == 0
    ids = sorted(t.id for t in filled.iter_trajectories())
    assert ids == ["tr_a1", "tr_a2", "tr_b1", "tr_b2", "tr_new1", "tr_new2"]
    assert [s["protocol"] for s in filled.get_trajectory("tr_a1").steps] == ["openai.chat"] * 3
    result = fsck(filled)
    assert result.ok and not result.warnings, result.problems
    stored = _stored(filled)
    again = merge_pools(filled.layout, other.root)
    assert again.trajectories_already_here == 4 and again.shards_rewritten == 0
    assert _stored(filled) == stored
