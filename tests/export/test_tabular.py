"""Parquet, HF datasets and verl: columns and values as pyarrow and datasets read them back."""

from __future__ import annotations

import builtins
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from agentworld.errors import MissingExtraError
from agentworld.export import ExportOptions, export
from agentworld.pool import Pool, Selection
from tests.export.trajectories import fill, trajectory_records


def test_step_rows_have_ids_masks_logprobs_rewards_groups(filled: Pool, tmp_path: Path) -> None:
    filled.labels.set(["trajectory:tr_a2"], {"reward": 0.25, "quality": "bad"}, author="me")
    out = tmp_path / "steps.parquet"
    export(filled, "parquet", out)
    table = pq.read_table(out)
    assert table.num_rows == 12
    for col in ("trajectory", "step", "group", "reward", "trajectory_reward", "token_source",
                "prompt_ids", "completion_ids", "completion_logprobs", "input_ids", "assistant_masks",
                "messages", "response"):  # fmt: skip
        assert col in table.column_names
    rows = {r["step"]: r for r in table.to_pylist()}
    r = rows["tr_a1_s1"]
    assert r["prompt_ids"] == [1, 2, 3, 4, 100, 200, 300, 50]
    assert r["completion_ids"] == [101, 201, 300]
    assert r["input_ids"] == r["prompt_ids"] + r["completion_ids"]
    assert r["assistant_masks"] == [0] * 8 + [1] * 3
    assert r["completion_logprobs"] == [-0.5, -0.25, -0.125]
    assert r["group"] == "g1" and r["token_source"] == "engine"
    # The pool's own message form, as the README says (-f hf gives the chat-template one).
    assert r["response"]["tool_calls"] == [
        {"id": "call_1", "name": "calc", "arguments": '{"e": "1+1"}'}
    ]
    assert r["messages"][2]["tool_calls"][0]["arguments"] == '{"e": "0+1"}'
    assert r["messages"][0]["tool_calls"] == [] and r["messages"][0]["name"] is None
    assert rows["tr_a2_s0"]["trajectory_reward"] == 0.25
    assert rows["tr_a2_s0"]["quality"] == "bad"
    assert rows["tr_a1_s0"]["trajectory_reward"] == 1.0


def test_untrainable_step_has_no_row(filled: Pool, tmp_path: Path) -> None:
    filled.labels.set(["step:tr_a1_s1"], {"trainable": False}, author="me")
    out = tmp_path / "steps.parquet"
    m = export(filled, "parquet", out)
    steps = pq.read_table(out).column("step").to_pylist()
    assert "tr_a1_s1" not in steps and len(steps) == 11
    assert m["counts"]["steps_untrainable"] == 1


def test_trajectory_rows_merge_chained_steps(filled: Pool, tmp_path: Path) -> None:
    filled.labels.set(["step:tr_a1_s1"], {"trainable": False}, author="me")
    out = tmp_path / "traj.parquet"
    export(filled, "parquet", out, options=ExportOptions(rows="trajectory"))
    rows = {r["trajectory"]: r for r in pq.read_table(out).to_pylist()}
    r = rows["tr_a1"]
    assert r["sequence_breaks"] == 0
    assert r["input_ids"] == [1, 2, 3, 4, 100, 200, 300, 50, 101, 201, 300, 51, 102, 202, 301]
    assert r["assistant_masks"] == [0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1]
    assert r["logprobs"][4:7] == [-0.5, -0.25, -0.125]
    assert r["step_trainable"] == [True, False, True]
    assert r["trajectory_reward"] == 1.0
    assert [m["role"] for m in r["messages"]][-1] == "assistant"
    assert len(r["prompt_ids"]) == 3


def test_a_prefix_break_gives_one_row_per_chain_never_empty_ids(pool: Pool, tmp_path: Path) -> None:
    recs = trajectory_records("tr_x", answer="6", reward=1.0)
    # The agent summarised its history before the last call: new prompt, new ids.
    last = recs[2]
    last["request"]["messages"] = [{"role": "user", "content": "Summary: 1+2+3, calc said 2."}]
    last["tokens"]["prompt_ids"] = [9, 9, 9]
    with pool.writer() as w:
        for rec in recs:
            w.append(rec)
    out = tmp_path / "traj.parquet"
    m = export(pool, "parquet", out, options=ExportOptions(rows="trajectory"))
    rows = sorted(pq.read_table(out).to_pylist(), key=lambda r: r["sequence"])
    assert [r["sequence"] for r in rows] == [0, 1] and m["counts"]["rows"] == 2
    assert all(r["input_ids"] and r["sequence_breaks"] == 1 for r in rows)
    assert rows[0]["step_ids"] == ["tr_x_s0", "tr_x_s1"]
    assert rows[0]["input_ids"] == [1, 2, 3, 4, 100, 200, 300, 50, 101, 201, 300]
    assert rows[1]["input_ids"] == [9, 9, 9, 102, 202, 301]
    assert rows[1]["assistant_masks"] == [0, 0, 0, 1, 1, 1]
    assert rows[1]["messages"][0]["content"].startswith("Summary")
    assert m["counts"]["trajectories_with_sequence_breaks"] == 1


def test_rows_without_token_ids_are_empty_and_flagged(pool: Pool, tmp_path: Path) -> None:
    fill(pool, [{"tid": "tr_x", "answer": "6", "reward": 1.0, "engine": False}])
    out = tmp_path / "steps.parquet"
    export(pool, "parquet", out)
    rows = pq.read_table(out).to_pylist()
    assert {r["token_source"] for r in rows} == {"none"}
    assert all(r["input_ids"] == [] and r["assistant_masks"] == [] for r in rows)


def test_hf_folder_reads_back_with_datasets(filled: Pool, tmp_path: Path) -> None:
    import datasets

    out = tmp_path / "hf"
    export(filled, "hf", out, Selection(trainable_only=True, group="g2"))
    ds = datasets.load_from_disk(str(out))
    assert ds.num_rows == 6
    assert {"input_ids", "assistant_masks", "completion_logprobs", "group", "reward"} <= set(
        ds.column_names
    )
    row = next(r for r in ds if r["step"] == "tr_b1_s0")
    assert row["input_ids"] == [1, 2, 3, 4, 100, 200, 300]
    # Each message keeps its own keys (nothing None-filled by an Arrow struct), in the shape
    # chat templates take: a tool call's function and its arguments as an object.
    assert row["messages"][0] == {"role": "system", "content": "Use the calc tool."}
    assert row["response"] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "call_0", "type": "function", "function": {"name": "calc", "arguments": {"e": "0+1"}}}
        ],
    }  # fmt: skip
    later = next(r for r in ds if r["step"] == "tr_b1_s1")["messages"]
    assert later[3] == {"role": "tool", "content": "1", "tool_call_id": "call_0", "name": "calc"}

    assert row["group"] == "g2"
    assert (tmp_path / "hf.manifest.json").exists()


@pytest.mark.parametrize("rows", ["step", "trajectory"])
def test_hf_messages_with_content_parts_are_text_as_trl_writes_them(
    pool: Pool, tmp_path: Path, rows: str
) -> None:
    """Content given as a list of parts reached the hf messages as the parts' JSON text
    (Parquet's encoding), which a chat template then showed the model verbatim."""
    import datasets

    recs = trajectory_records("tr_p", answer="6", reward=1.0, turns=1)
    for rec in recs[:2]:
        msgs = rec["request"]["messages"]
        msgs[1]["content"] = [{"type": "text", "text": "Task t1: "}, {"type": "text", "text": "go"}]
        if len(msgs) > 3:
            msgs[3]["content"] = [{"type": "text", "text": "1"}]
    with pool.writer() as w:
        for rec in recs:
            w.append(rec)
    export(pool, "hf", tmp_path / "hf", options=ExportOptions(rows=rows))
    export(pool, "trl", tmp_path / "trl")
    messages = list(datasets.load_from_disk(str(tmp_path / "hf"))[-1]["messages"])
    trl = datasets.load_from_disk(str(tmp_path / "trl"))[-1]
    assert messages[1] == {"role": "user", "content": "Task t1: go"}
    assert messages[3] == {"role": "tool", "content": "1", "tool_call_id": "call_0", "name": "calc"}
    assert messages[:4] == trl["prompt"]
    # Parquet keeps the pool's own form: the parts, as JSON text.
    export(pool, "parquet", tmp_path / "rows.parquet", options=ExportOptions(rows=rows))
    raw = pq.read_table(tmp_path / "rows.parquet").to_pylist()[-1]["messages"]
    assert json.loads(raw[1]["content"]) == recs[0]["request"]["messages"][1]["content"]


@pytest.mark.parametrize("rows", ["step", "trajectory"])
def test_hf_tools_are_in_the_shape_chat_templates_take(
    pool: Pool, tmp_path: Path, rows: str
) -> None:
    """An Anthropic agent's tools (``{name, description, input_schema}``) reached the hf
    rows as recorded, which a chat template renders without a schema; -f trl converted
    them. Parquet keeps them as recorded."""
    import datasets

    anthropic_tool = {
        "name": "calc",
        "description": "Evaluate arithmetic.",
        "input_schema": {"type": "object", "properties": {"expr": {"type": "string"}}},
    }
    recs = trajectory_records("tr_a", answer="6", reward=1.0, turns=1)
    for rec in recs:
        if rec.get("request"):
            rec["request"]["tools"] = [anthropic_tool]
    with pool.writer() as w:
        for rec in recs:
            w.append(rec)
    export(pool, "hf", tmp_path / "hf", options=ExportOptions(rows=rows))
    tools = json.loads(datasets.load_from_disk(str(tmp_path / "hf"))[-1]["tools"])
    assert tools == [
        {
            "type": "function",
            "function": {
                "name": "calc",
                "parameters": anthropic_tool["input_schema"],
                "description": "Evaluate arithmetic.",
            },
        }
    ]
    export(pool, "parquet", tmp_path / "rows.parquet", options=ExportOptions(rows=rows))
    raw = pq.read_table(tmp_path / "rows.parquet").to_pylist()[-1]["tools"]
    assert json.loads(raw) == [anthropic_tool]


@pytest.mark.parametrize("rows", ["step", "trajectory"])
def test_hf_export_of_nothing_is_an_empty_dataset(filled: Pool, tmp_path: Path, rows: str) -> None:
    import datasets

    out = tmp_path / "hf"
    manifest = export(filled, "hf", out, Selection(min_reward=5), ExportOptions(rows=rows))
    ds = datasets.load_from_disk(str(out))
    assert ds.num_rows == 0 and "input_ids" in ds.column_names
    assert manifest["counts"]["rows"] == 0
    # A later export replaces the folder it wrote.
    export(filled, "hf", out, Selection(group="g2"), ExportOptions(rows=rows))
    assert datasets.load_from_disk(str(out)).num_rows > 0


def test_verl_never_takes_the_agents_answer_for_the_ground_truth(
    pool: Pool, tmp_path: Path
) -> None:
    # As `aw run` records it: the agent's answer under `answer`, and here no reference.
    recs = trajectory_records("tr_x", answer="7", reward=0.0)
    recs[-1]["metadata"] = {"answer": "The answer is 7.", "expected": "7", "rollout": 0}
    with pool.writer() as w:
        for rec in recs:
            w.append(rec)
    manifest = export(pool, "verl", tmp_path / "verl.parquet")
    (row,) = pq.read_table(tmp_path / "verl.parquet").to_pylist()
    assert row["reward_model"]["ground_truth"] == ""
    assert manifest["counts"]["tasks_without_ground_truth"] == 1


def test_manifest_says_what_made_it(filled: Pool, tmp_path: Path) -> None:
    filled.labels.set(["trajectory:tr_a2"], {"trainable": False}, author="me")
    out = tmp_path / "steps.parquet"
    export(
        filled, "parquet", out, Selection(trainable_only=True, dataset="arith", status=("done",))
    )
    m = json.loads((tmp_path / "steps.parquet.manifest.json").read_text())
    assert m["format"] == "parquet" and m["options"] == {"rows": "step"}
    assert m["filters"] == {"dataset": "arith", "status": ["done"], "trainable_only": True}
    assert len(m["shards"]) == 1 and m["shards"][0].startswith("sha256:")
    assert next(f["path"] for f in m["label_files"]).startswith("labels/me/")
    assert m["counts"]["trajectories"] == 3 and m["counts"]["rows"] == 9
    assert m["files"][0]["path"] == "steps.parquet"


def test_missing_pyarrow_names_the_extra(
    filled: Pool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = builtins.__import__

    def fake(name: str, *a: Any, **k: Any) -> Any:
        if name.startswith("pyarrow"):
            raise ImportError(name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", fake)
    with pytest.raises(MissingExtraError, match=r"agentworld\[export\]"):
        export(filled, "parquet", tmp_path / "x.parquet")
