"""OpenAI JSONL: chat lines with weights and tools, DPO pairs from groups, and the way back in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentworld.errors import RecordError
from agentworld.export import ExportOptions, export
from agentworld.export.ingest import ImportOptions, import_file
from agentworld.pool import Pool, Selection


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_chat_line_has_messages_tools_and_weights(filled: Pool, tmp_path: Path) -> None:
    out = tmp_path / "sft.jsonl"
    manifest = export(filled, "openai-jsonl", out)
    lines = _lines(out)
    assert len(lines) == 4 and manifest["counts"]["lines"] == 4
    first = lines[0]
    roles = [m["role"] for m in first["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]
    call = first["messages"][2]["tool_calls"][0]
    assert call == {
        "id": "call_0",
        "type": "function",
        "function": {"name": "calc", "arguments": '{"e": "0+1"}'},
    }
    assert first["messages"][3] == {"role": "tool", "content": "1", "tool_call_id": "call_0"}
    assert [m.get("weight") for m in first["messages"] if m["role"] == "assistant"] == [1, 1, 1]
    assert first["tools"][0]["function"]["name"] == "calc"
    assert first["parallel_tool_calls"] is False


def test_labels_change_what_is_exported(filled: Pool, tmp_path: Path) -> None:
    filled.labels.set(["trajectory:tr_b2"], {"trainable": False}, author="me")
    filled.labels.set(["step:tr_a1_s1"], {"trainable": False}, author="me")
    filled.labels.set(["trajectory:tr_a2"], {"reward": 0.9}, author="me")
    out = tmp_path / "sft.jsonl"
    export(filled, "openai-jsonl", out, Selection(trainable_only=True, min_reward=0.5))
    lines = _lines(out)
    # tr_b2 untrainable and reward 0; tr_a2's reward overridden to 0.9 -> kept.
    assert len(lines) == 3
    texts = [line["messages"][-1]["content"] for line in lines]
    assert "The answer is 7." in texts
    a1 = next(line for line in lines if "Task t1" in line["messages"][1]["content"]
              and line["messages"][-1]["content"] == "The answer is 6.")  # fmt: skip
    weights = [m["weight"] for m in a1["messages"] if m["role"] == "assistant"]
    assert weights == [1, 0, 1]  # the untrainable step stays as context only
    export(filled, "openai-jsonl", out, Selection(trainable_only=False))
    assert len(_lines(out)) == 4


def test_chat_export_import_export_is_identical(filled: Pool, tmp_path: Path) -> None:
    filled.labels.set(["step:tr_a1_s1"], {"trainable": False}, author="me")
    first = tmp_path / "a.jsonl"
    export(filled, "openai-jsonl", first)
    other = Pool.create(tmp_path / "other")
    report = import_file(other, first, "openai-jsonl", ImportOptions(agent="ext"))
    assert report.trajectories == 4 and report.steps == 12 and not report.bad_rows
    t = next(iter(other.iter_trajectories()))
    assert {s["protocol"] for s in t.steps} == {"import"}
    assert {s["tokens"]["source"] for s in t.steps} == {"none"}
    second = tmp_path / "b.jsonl"
    export(other, "openai-jsonl", second)
    key = lambda line: json.dumps(line, sort_keys=True)  # noqa: E731
    assert sorted(map(key, _lines(first))) == sorted(map(key, _lines(second)))
    again = import_file(other, first, "openai-jsonl")
    assert again.trajectories == 0 and again.already_present == 4


def test_preference_pairs_better_against_worse(filled: Pool, tmp_path: Path) -> None:
    out = tmp_path / "dpo.jsonl"
    manifest = export(filled, "openai-jsonl", out, options=ExportOptions(variant="preference"))
    lines = _lines(out)
    assert len(lines) == 2 and manifest["counts"]["groups"] == 2
    by_task = {line["input"]["messages"][1]["content"]: line for line in lines}
    t1 = by_task["Task t1: what is 1+2+3?"]
    # Shared context up to the final answer, where the two diverge.
    assert [m["role"] for m in t1["input"]["messages"]][-1] == "tool"
    assert t1["preferred_output"] == [{"role": "assistant", "content": "The answer is 6."}]
    assert t1["non_preferred_output"] == [{"role": "assistant", "content": "The answer is 7."}]
    assert t1["input"]["tools"][0]["function"]["name"] == "calc"
    other = Pool.create(tmp_path / "other")
    import_file(other, out, "openai-jsonl")
    trajs = list(other.iter_trajectories())
    assert sorted(t.reward for t in trajs) == [0.0, 0.0, 1.0, 1.0]
    assert len({t.first("group") for t in trajs}) == 2


def test_bad_rows_are_refused_with_line_numbers(pool: Pool, tmp_path: Path) -> None:
    good = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}
    bad_role = {"messages": [{"role": "wizard", "content": "hi"}]}
    bad_call = {
        "messages": [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": None, "tool_calls": [{"function": {}}]},
        ]
    }
    path = tmp_path / "in.jsonl"
    path.write_text(
        "\n".join([json.dumps(good), "{not json", json.dumps(bad_role), json.dumps(bad_call)])
        + "\n"
    )
    with pytest.raises(RecordError) as err:
        import_file(pool, path, "openai-jsonl")
    msg = str(err.value)
    assert f"{path}:2: not JSON" in msg
    assert f"{path}:3: messages[0].role" in msg
    assert f"{path}:4: messages[1].tool_calls[0].function.name" in msg
    assert f"{path}:1" not in msg
    assert list(pool.iter_trajectories()) == []  # nothing half-imported
    report = import_file(pool, path, "openai-jsonl", ImportOptions(skip_bad=True))
    assert report.trajectories == 1 and len(report.bad_rows) == 3
