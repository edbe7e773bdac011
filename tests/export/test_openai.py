"""OpenAI JSONL: chat lines with weights and tools, DPO pairs from groups, and the way back in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentworld.errors import RecordError
from agentworld.export import ExportOptions, export
from agentworld.export.ingest import ImportOptions, import_file
from agentworld.pool import Pool, Selection
from tests.export.openai_schema import chat_line_problems, preference_line_problems
from tests.export.trajectories import fill, orphan_records, trajectory_records


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_chat_line_has_messages_tools_and_weights(filled: Pool, tmp_path: Path) -> None:
    out = tmp_path / "sft.jsonl"
    manifest = export(filled, "openai-jsonl", out)
    lines = _lines(out)
    assert len(lines) == 4 and manifest["counts"]["lines"] == 4
    assert all(chat_line_problems(line) == [] for line in lines)
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


def _write(pool: Pool, recs: list[dict]) -> None:
    with pool.writer() as w:
        for rec in recs:
            w.append(rec)


def test_sft_lines_pass_the_pinned_schema(pool: Pool, tmp_path: Path) -> None:
    fill(pool, [{"tid": "tr_n", "answer": "6", "reward": 1.0, "named_tools": True}])
    _write(pool, orphan_records("tr_orphan"))
    out = tmp_path / "sft.jsonl"
    manifest = export(pool, "openai-jsonl", out)
    lines = _lines(out)
    assert len(lines) == 1 and all(chat_line_problems(line) == [] for line in lines)
    tool = next(m for m in lines[0]["messages"] if m["role"] == "tool")
    assert "name" not in tool  # recorded with a name, which the schema has no field for
    assert manifest["counts"]["lines_orphan_tool_result"] == 1
    assert manifest["left_out"]["lines_orphan_tool_result"]["examples"] == ["tr_orphan"]


def test_preference_pairs_better_against_worse(pool: Pool, tmp_path: Path) -> None:
    fill(
        pool,
        [
            {"tid": "tr_a1", "answer": "6", "reward": 1.0, "group": "g1", "turns": 0},
            {"tid": "tr_a2", "answer": "7", "reward": 0.0, "group": "g1", "turns": 0},
            {"tid": "tr_b1", "answer": "6", "reward": 1.0, "group": "g2", "task": "t2", "turns": 0},
            {"tid": "tr_b2", "answer": "5", "reward": 0.0, "group": "g2", "task": "t2", "turns": 0},
        ],
    )
    out = tmp_path / "dpo.jsonl"
    manifest = export(pool, "openai-jsonl", out, options=ExportOptions(variant="preference"))
    lines = _lines(out)
    assert len(lines) == 2 and manifest["counts"]["groups"] == 2
    assert all(preference_line_problems(line) == [] for line in lines)
    t1 = next(line for line in lines if "Task t1" in line["input"]["messages"][1]["content"])
    assert [m["role"] for m in t1["input"]["messages"]] == ["system", "user"]
    assert t1["preferred_output"] == [{"role": "assistant", "content": "The answer is 6."}]
    assert t1["non_preferred_output"] == [{"role": "assistant", "content": "The answer is 7."}]
    assert t1["input"]["tools"][0]["function"]["name"] == "calc"
    other = Pool.create(tmp_path / "other")
    import_file(other, out, "openai-jsonl")
    trajs = list(other.iter_trajectories())
    assert sorted(t.reward for t in trajs) == [0.0, 0.0, 1.0, 1.0]
    assert len({t.first("group") for t in trajs}) == 2


def test_preference_leaves_out_what_the_dpo_guide_refuses(pool: Pool, tmp_path: Path) -> None:
    specs = [
        # g1 diverges on the final answer, after tool turns: not a one-turn input.
        {"tid": "tr_a1", "answer": "6", "reward": 1.0, "group": "g1"},
        {"tid": "tr_a2", "answer": "7", "reward": 0.0, "group": "g1"},
        # g3 diverges on the first call's arguments: a tool call is no text output.
        {"tid": "tr_c1", "answer": "6", "reward": 1.0, "group": "g3", "task": "t3", "turns": 1},
        {"tid": "tr_c2", "answer": "6", "reward": 0.0, "group": "g3", "task": "t3", "turns": 1},
        # g4 offered the two trajectories different tools.
        {"tid": "tr_d1", "answer": "6", "reward": 1.0, "group": "g4", "task": "t4", "turns": 0},
        {"tid": "tr_d2", "answer": "5", "reward": 0.0, "group": "g4", "task": "t4", "turns": 0},
    ]
    recs = [r for spec in specs for r in trajectory_records(**spec)]
    c2_first = next(r for r in recs if r.get("id") == "tr_c2_s0")
    c2_first["response"]["message"]["tool_calls"][0]["arguments"] = '{"e": "9*9"}'
    for r in recs:
        if r.get("id") == "tr_d2_s0":
            r["request"]["tools"] = [{"type": "function", "function": {"name": "other"}}]
    _write(pool, recs)
    out = tmp_path / "dpo.jsonl"
    manifest = export(pool, "openai-jsonl", out, options=ExportOptions(variant="preference"))
    assert _lines(out) == []
    counts, left = manifest["counts"], manifest["left_out"]
    assert counts["pairs_multi_turn_input"] == 1 and counts["pairs_with_tool_calls"] == 1
    assert counts["pairs_tools_differ"] == 1
    assert left["pairs_multi_turn_input"]["examples"] == ["tr_a1/tr_a2"]
    assert left["pairs_with_tool_calls"]["examples"] == ["tr_c1/tr_c2"]
    # TRL's DPO trainer takes tool turns and tool calls: only the tools mismatch is left out.
    trl = export(pool, "trl", tmp_path / "trl", options=ExportOptions(variant="preference"))
    assert trl["counts"]["rows"] == 2 and trl["counts"]["pairs_tools_differ"] == 1


def test_pairs_go_from_the_outside_in_each_trajectory_once(pool: Pool, tmp_path: Path) -> None:
    rewards = {"tr_1": 1.0, "tr_2": 1.0, "tr_3": 0.0, "tr_4": 0.0}  # two pairs
    rewards |= {"tr_5": 1.0, "tr_6": 0.5, "tr_7": 0.5, "tr_8": 0.0}  # one pair, one tie
    specs = [
        {"tid": tid, "answer": tid[-1], "reward": r, "group": "g1" if int(tid[-1]) <= 4 else "g2",
         "task": "t1" if int(tid[-1]) <= 4 else "t2", "turns": 0}
        for tid, r in rewards.items()
    ]  # fmt: skip
    specs.append({"tid": "tr_9", "answer": "9", "reward": 1.0, "group": "g3", "task": "t3"})
    fill(pool, specs)
    out = tmp_path / "dpo.jsonl"
    manifest = export(pool, "openai-jsonl", out, options=ExportOptions(variant="preference"))
    lines = _lines(out)
    pairs = sorted(
        (line["preferred_output"][0]["content"][-2], line["non_preferred_output"][0]["content"][-2])
        for line in lines
    )
    assert pairs == [("1", "4"), ("2", "3"), ("5", "8")]
    counts = manifest["counts"]
    assert counts["pairs_equal_reward"] == 1 and counts["groups_of_one"] == 1
    assert counts["groups"] == 3 and counts["lines"] == 3


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


def test_identical_rows_are_each_a_sample_and_a_second_import_adds_nothing(
    pool: Pool, tmp_path: Path
) -> None:
    """Three identical conversations (one prompt sampled thrice alike) were imported as one,
    the other two reported "already present" in an empty pool."""
    line = json.dumps(
        {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]}
    )
    path = tmp_path / "sft.jsonl"
    path.write_text(f"{line}\n{line}\n{line}\n")
    report = import_file(pool, path, "openai-jsonl")
    assert report.trajectories == 3 and report.already_present == 0
    again = import_file(pool, path, "openai-jsonl")  # the same file: nothing new
    assert again.trajectories == 0 and again.already_present == 3
    assert pool.index().count_trajectories() == 3


def test_an_assistant_turn_with_no_text_and_no_calls_has_empty_content(
    pool: Pool, tmp_path: Path
) -> None:
    """A response cut off in its reasoning (content null, no tool calls) was written with a
    null content, which the schema allows only beside tool_calls; the file was refused."""
    recs = trajectory_records("tr_r", answer="6", reward=1.0, turns=1)
    recs[1]["response"]["message"] = {"role": "assistant", "content": None, "reasoning": "hm"}
    recs[1]["response"]["finish_reason"] = "length"
    _write(pool, recs)
    out = tmp_path / "sft.jsonl"
    export(pool, "openai-jsonl", out)
    (line,) = _lines(out)
    assert chat_line_problems(line) == []
    last = line["messages"][-1]
    assert last == {"role": "assistant", "content": "", "weight": 1}
    assert line["messages"][2]["content"] is None  # beside tool_calls, null stays null
