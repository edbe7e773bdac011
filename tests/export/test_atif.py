"""ATIF: Harbor's trajectory format out of the pool and back in, steps and token ids intact."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import orjson
import pytest

from agentworld.errors import RecordError
from agentworld.export import export
from agentworld.export.conversation import same_message
from agentworld.export.ingest import import_file
from agentworld.pool import Pool
from agentworld.pool.fsck import fsck


def test_atif_shape(filled: Pool, tmp_path: Path) -> None:
    out = tmp_path / "atif"
    export(filled, "atif", out)
    files = sorted(p.name for p in out.iterdir())
    assert files == ["tr_a1.json", "tr_a2.json", "tr_b1.json", "tr_b2.json"]
    doc = json.loads((out / "tr_a1.json").read_text())
    assert doc["schema_version"] == "ATIF-v1.5" and doc["session_id"] == "tr_a1"
    assert doc["agent"]["name"] == "calc" and doc["agent"]["model_name"] == "tiny"
    assert doc["agent"]["tool_definitions"][0]["function"]["name"] == "calc"
    assert [s["step_id"] for s in doc["steps"]] == [1, 2, 3, 4, 5]
    assert [s["source"] for s in doc["steps"]] == ["system", "user", "agent", "agent", "agent"]
    agent = doc["steps"][2]
    assert agent["tool_calls"] == [
        {"tool_call_id": "call_0", "function_name": "calc", "arguments": {"e": "0+1"}}
    ]
    assert agent["observation"] == {"results": [{"source_call_id": "call_0", "content": "1"}]}
    assert agent["metrics"]["prompt_token_ids"] == [1, 2, 3, 4]
    assert agent["metrics"]["completion_token_ids"] == [100, 200, 300]
    assert agent["metrics"]["logprobs"] == [-0.5, -0.25, -0.125]
    assert doc["steps"][4]["message"] == "The answer is 6."
    assert doc["extra"]["reward"] == 1.0 and doc["extra"]["group"] == "g1"
    assert doc["final_metrics"]["total_completion_tokens"] == 9


def test_atif_round_trip_keeps_messages_tool_calls_and_ids(filled: Pool, tmp_path: Path) -> None:
    filled.labels.set(["step:tr_a1_s1"], {"trainable": False}, author="me")
    out = tmp_path / "atif.jsonl"
    export(filled, "atif", out)
    other = Pool.create(tmp_path / "other")
    report = import_file(other, out, "atif")
    assert report.trajectories == 4 and report.steps == 12
    for t in other.iter_trajectories():
        orig = filled.get_trajectory(t.id)
        assert t.reward == orig.reward and t.first("group") == orig.first("group")
        assert len(t.steps) == len(orig.steps)
        for new, old in zip(t.steps, orig.steps, strict=True):
            assert new["protocol"] == "import"
            a, b = new["request"]["messages"], old["request"]["messages"]
            assert len(a) == len(b) and all(map(same_message, a, b))
            assert same_message(new["response"]["message"], old["response"]["message"])
            assert new["tokens"] == old["tokens"]
            assert new["id"] == old["id"]
    moved = other.get_trajectory("tr_a1")
    assert moved.steps[1]["_labels"].get("trainable") is False


def test_records_after_atif_of_the_same_trajectories_add_no_second_end(
    filled: Pool, tmp_path: Path
) -> None:
    export(filled, "atif", tmp_path / "atif.jsonl")
    recs = tmp_path / "records.jsonl"
    recs.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in filled.iter_records()))
    other = Pool.create(tmp_path / "other")
    import_file(other, tmp_path / "atif.jsonl", "atif")
    report = import_file(other, recs, "records")
    # ATIF keeps the step ids but not the end records': those are found by trajectory.
    assert (report.written, report.skipped_existing) == (0, 16)
    assert fsck(other).ok


def test_atif_bad_step_is_named(pool: Pool, tmp_path: Path) -> None:
    doc = {
        "schema_version": "ATIF-v1.4",
        "session_id": "s1",
        "agent": {"name": "harbor", "version": "1"},
        "steps": [
            {"step_id": 1, "source": "user", "message": "hi"},
            {"step_id": 2, "source": "robot", "message": "?"},
        ],
    }
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(RecordError, match=r"t\.json: steps\[1\]\.source"):
        import_file(pool, path, "atif")


def test_harbor_file_without_ids_imports_as_source_none(pool: Pool, tmp_path: Path) -> None:
    doc = {
        "schema_version": "ATIF-v1.4",
        "session_id": "025B810F-B3A2",
        "agent": {"name": "harbor-agent", "version": "1.0.0", "model_name": "gemini"},
        "steps": [
            {"step_id": 1, "source": "user", "message": "Price of GOOGL?"},
            {
                "step_id": 2,
                "source": "agent",
                "message": "Searching.",
                "tool_calls": [
                    {"tool_call_id": "c1", "function_name": "search", "arguments": {"t": "GOOGL"}}
                ],
                "observation": {"results": [{"source_call_id": "c1", "content": "$185"}]},
                "metrics": {"prompt_tokens": 520, "completion_tokens": 80},
            },
            {"step_id": 3, "source": "agent", "message": "It is $185."},
        ],
    }
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "trajectory.json").write_text(json.dumps(doc))
    import_file(pool, tmp_path / "d", "atif")
    t = pool.get_trajectory("025B810F-B3A2")
    assert t.first("agent") == "harbor-agent"
    assert [s["tokens"]["source"] for s in t.steps] == ["none", "none"]
    last = t.steps[1]["request"]["messages"]
    assert [m["role"] for m in last] == ["user", "assistant", "tool"]
    assert last[1]["tool_calls"][0] == {"id": "c1", "name": "search", "arguments": '{"t": "GOOGL"}'}
    assert last[2] == {"role": "tool", "content": "$185", "tool_call_id": "c1"}


def harbor_reference_problems(doc: dict) -> list[str]:
    """Harbor's rule for observation results, pinned (it needs Python >= 3.12 to import).

    Source: laude-institute/harbor, ``src/harbor/models/trajectories/trajectory.py``,
    ``Trajectory.validate_tool_call_references``: a result's ``source_call_id``,
    when not null, must be the ``tool_call_id`` of one of the same step's
    ``tool_calls``; a null one references nothing and is always accepted.
    """
    problems = []
    for step in doc["steps"]:
        ids = {c["tool_call_id"] for c in step.get("tool_calls") or ()}
        for r in (step.get("observation") or {}).get("results", ()):
            if r["source_call_id"] is not None and r["source_call_id"] not in ids:
                problems.append(
                    f"Observation result references source_call_id '{r['source_call_id']}' "
                    f"which is not found in step {step['step_id']}'s tool_calls"
                )
    return problems


def _orphan_doc(pool: Pool, tmp_path: Path) -> dict:
    from tests.export.trajectories import orphan_records

    with pool.writer() as w:
        for rec in orphan_records("tr_orphan"):
            w.append(rec)
    export(pool, "atif", tmp_path / "atif")
    return json.loads((tmp_path / "atif" / "tr_orphan.json").read_text())


def test_a_tool_result_with_no_call_before_it_has_a_null_source(
    filled: Pool, tmp_path: Path
) -> None:
    doc = _orphan_doc(filled, tmp_path)
    assert harbor_reference_problems(doc) == []
    holder = doc["steps"][1]
    assert holder["source"] == "system"
    assert holder["observation"] == {"results": [{"source_call_id": None, "content": "42"}]}
    for path in (tmp_path / "atif").iterdir():  # the tool-calling ones still name their calls
        assert harbor_reference_problems(json.loads(path.read_text())) == []
    # Imported back, the result is the message it was, id and all.
    other = Pool.create(tmp_path / "other")
    import_file(other, tmp_path / "atif" / "tr_orphan.json", "atif")
    (step,) = other.get_trajectory("tr_orphan").steps
    assert step["request"]["messages"][1] == {
        "role": "tool", "content": "42", "tool_call_id": "orphan"
    }  # fmt: skip


@pytest.mark.skipif(sys.version_info < (3, 12), reason="Harbor needs Python >= 3.12")
def test_harbor_validates_every_exported_document(filled: Pool, tmp_path: Path) -> None:
    pytest.importorskip("harbor", reason="harbor is not installed")
    from harbor.models.trajectories import Trajectory

    _orphan_doc(filled, tmp_path)
    for path in sorted((tmp_path / "atif").iterdir()):
        Trajectory.model_validate_json(path.read_text())
