"""Every format with an importer: export, import into a fresh pool, export again: the same rows."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from agentworld.export import ExportOptions, export
from agentworld.export.ingest import import_file
from agentworld.pool import Pool
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
