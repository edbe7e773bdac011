"""verl: rows its dataset and agent loop read as they are, rewards routed to a scorer that exists."""

from __future__ import annotations

import importlib.util
import json
import tempfile
from pathlib import Path

import pytest

from agentworld import records
from agentworld.export import ExportOptions, export
from agentworld.pool import Pool
from tests.export.chat_templates import LLAMA31_TOOL_LOOP, QWEN25_TOOL_LOOP
from tests.export.trajectories import TOOLS, trajectory_records
from tests.export.verl_pinned import (
    agent_loop,
    naive_reward,
    rl_dataset_item,
    tool_create_kwargs,
)

datasets = pytest.importorskip("datasets")  # verl reads its Parquet with datasets


def _rows(path: Path) -> list[dict]:
    """The rows as verl's RLHFDataset has them: read by ``datasets.load_dataset("parquet")``."""
    cache = tempfile.mkdtemp(dir=path.parent, prefix=".hf-cache-")  # a fresh read each time
    ds = datasets.load_dataset("parquet", data_files=str(path), cache_dir=cache)["train"]
    return [rl_dataset_item(dict(r)) for r in ds]


def _datasets_toml(tmp_path: Path) -> Path:
    (tmp_path / "tasks.jsonl").write_text(
        "\n".join(json.dumps({"id": t, "prompt": "1+2+3?", "answer": "6"}) for t in ("t1", "t2"))
    )
    path = tmp_path / "datasets.toml"
    path.write_text(
        '[datasets.arith]\nsource = { type = "jsonl" }\nsplits = { train = "tasks.jsonl" }\n'
        'scorer = "numeric"\n'
    )
    return path


def test_verl_rows_one_per_task(filled: Pool, tmp_path: Path) -> None:
    out = tmp_path / "verl.parquet"
    export(filled, "verl", out, options=ExportOptions(ability="math"))
    rows = _rows(out)
    assert len(rows) == 2
    r = next(r for r in rows if r["extra_info"]["task"] == "t1")
    assert r["data_source"] == "arith" and r["ability"] == "math"
    assert [(m["role"], m["content"]) for m in r["raw_prompt"]] == [
        ("system", "Use the calc tool."),
        ("user", "Task t1: what is 1+2+3?"),
    ]
    # only the keys a message has: a null tool_calls fails Llama 3.1's template on every row
    assert [sorted(m) for m in r["raw_prompt"]] == [["content", "role"]] * 2
    assert r["reward_model"] == {"style": "rule", "ground_truth": "6"}
    assert r["extra_info"]["trajectories"] == 2 and r["extra_info"]["mean_reward"] == 0.5


def test_tools_reach_verls_tool_agent_loop(filled: Pool, tmp_path: Path) -> None:
    out = tmp_path / "verl.parquet"
    export(filled, "verl", out)
    row = _rows(out)[0]
    assert agent_loop(row) == "tool_agent"
    assert row["tools_kwargs"] == {"calc": {"create_kwargs": {"ground_truth": "6"}}}
    assert not row["warned_tools_kwargs_empty"]
    assert json.loads(row["extra_info"]["tools"]) == TOOLS


def test_every_tool_row_has_create_kwargs_for_every_tool(pool: Pool, tmp_path: Path) -> None:
    """verl offers each row every tool of its tool config. Tasks offered different tools
    gave ``tools_kwargs`` a None for each tool a row lacked (one Arrow struct for all), so
    calling it failed in ToolAgentLoop where a tool no row names gets ``{}``."""
    recs = trajectory_records("tr_c", answer="6", reward=1.0, turns=0)
    recs += trajectory_records("tr_s", answer="6", reward=1.0, turns=0, task="t2")
    search = [{"type": "function", "function": {"name": "search", "parameters": {}}}]
    for rec in recs:
        if rec["trajectory"] == "tr_s" and "request" in rec:
            rec["request"]["tools"] = search
    with pool.writer() as w:
        for rec in recs:
            w.append(rec)
    out = tmp_path / "verl.parquet"
    export(pool, "verl", out)
    rows = {r["extra_info"]["task"]: r for r in _rows(out)}
    for task in ("t1", "t2"):
        row = rows[task]
        assert agent_loop(row) == "tool_agent" and not row["warned_tools_kwargs_empty"]
        for name in ("calc", "search"):
            assert tool_create_kwargs(row["tools_kwargs"], name) == {"ground_truth": "6"}
    # What the row was offered stays in extra_info.tools.
    assert [t["function"]["name"] for t in json.loads(rows["t2"]["extra_info"]["tools"])] == [
        "search"
    ]


def _resumed(pool: Pool) -> None:
    """Task t1 first recorded mid-conversation (a resumed or forked agent): its first
    prompt holds a tool call and its result. Task t2 starts plainly."""
    recs = trajectory_records("tr_h", answer="6", reward=1.0, turns=1)
    step = recs[1]  # the second call: history with an assistant tool call and its result
    step["request"]["messages"][0]["role"] = "developer"
    recs = [r for r in recs if r.get("id") != recs[0]["id"]]
    recs[0] = records.make_step(**{**step, "index": 0})  # it is the first call recorded
    recs += trajectory_records("tr_p", answer="6", reward=1.0, turns=0, task="t2")
    with pool.writer() as w:
        for rec in recs:
            w.append(rec)


def test_a_first_call_with_history_keeps_its_prompt(pool: Pool, tmp_path: Path) -> None:
    _resumed(pool)
    out = tmp_path / "verl.parquet"
    export(pool, "verl", out)
    rows = _rows(out)
    prompt = next(r for r in rows if r["extra_info"]["task"] == "t1")["raw_prompt"]
    assert [m["role"] for m in prompt] == ["system", "user", "assistant", "tool"]
    # The chat-template shape -f trl writes: arguments an object, each message its own keys.
    assert prompt[2] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "call_0", "type": "function", "function": {"name": "calc", "arguments": {"e": "0+1"}}}
        ],
    }  # fmt: skip
    assert prompt[3] == {"role": "tool", "content": "1", "tool_call_id": "call_0", "name": "calc"}
    plain = next(r for r in rows if r["extra_info"]["task"] == "t2")["raw_prompt"]
    assert [sorted(m) for m in plain] == [["content", "role"]] * 2  # no null tool_calls beside


def test_prompts_render_through_chat_templates_without_double_encoding(
    pool: Pool, tmp_path: Path
) -> None:
    """Qwen2.5's and Llama 3.1's templates `tojson` the arguments: a JSON string came out
    quoted again ("{\\"e\\": ...}"), and a null tool_calls failed Llama's on plain prompts."""
    from transformers import AutoTokenizer

    from agentworld.serve.tiny import make_tiny_tokenizer

    make_tiny_tokenizer(tmp_path / "tok")
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "tok"))
    _resumed(pool)
    out = tmp_path / "verl.parquet"
    export(pool, "verl", out)
    rows = {r["extra_info"]["task"]: r["raw_prompt"] for r in _rows(out)}

    def render(prompt: list[dict], template: str) -> str:
        return tok.apply_chat_template(
            prompt, chat_template=template, tokenize=False, add_generation_prompt=True
        )

    qwen = render(rows["t1"], QWEN25_TOOL_LOOP)
    assert '{"name": "calc", "arguments": {"e": "0+1"}}' in qwen
    llama = render(rows["t1"], LLAMA31_TOOL_LOOP)
    assert '{"name": "calc", "parameters": {"e": "0+1"}}' in llama
    assert "\\" not in qwen + llama  # nothing escaped twice
    assert "Task t2: what is 1+2+3?" in render(rows["t2"], LLAMA31_TOOL_LOOP)


def test_rewards_go_to_a_scorer_that_exists(filled: Pool, tmp_path: Path) -> None:
    out = tmp_path / "verl.parquet"
    # verl cannot score "arith": its default_compute_score raises.
    manifest = export(filled, "verl", out)
    row = _rows(out)[0]
    with pytest.raises(NotImplementedError):
        naive_reward(row, "The answer is 6.")
    assert "does not score data_source arith" in manifest["reward"]["warning"]
    assert not (tmp_path / "verl.parquet.reward.py").exists()
    # With the datasets file, a custom reward function applies AgentWorld's scorer.
    toml = _datasets_toml(tmp_path)
    manifest = export(filled, "verl", out, options=ExportOptions(datasets=str(toml)))
    reward_py = tmp_path / "verl.parquet.reward.py"
    fn = manifest["reward"]["custom_reward_function"]
    assert fn == {"path": str(reward_py.resolve()), "name": "compute_score"}
    spec = importlib.util.spec_from_file_location("aw_reward", reward_py)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    score = getattr(module, fn["name"])
    assert naive_reward(row, "The answer is 6.", score) == 1.0
    assert naive_reward(row, "The answer is 7.", score) == 0.0
    # A data source verl scores by itself needs no reward file, and none is left behind.
    opts = ExportOptions(data_source="openai/gsm8k", datasets=str(toml))
    manifest = export(filled, "verl", out, options=opts)
    assert "warning" not in manifest["reward"] and not reward_py.exists()
    assert naive_reward(_rows(out)[0], "so #### 6") == 1.0


def test_the_reward_function_applies_the_tasks_own_verifier(pool: Pool, tmp_path: Path) -> None:
    """`aw demo`'s dataset: reasoning-gym arithmetic scored by its own score_answer."""
    pytest.importorskip("reasoning_gym")
    from agentworld.config import load_datasets
    from agentworld.run.tasks import load_tasks

    toml = tmp_path / "datasets.toml"
    toml.write_text(
        '[datasets.arithmetic]\nsource = { type = "reasoning-gym", task = "basic_arithmetic", '
        "config = { min_terms = 2, max_terms = 2, min_digits = 1, max_digits = 1 } }\n"
        'splits = { train = { size = 3, seed = 1 } }\nscorer = "verifier"\n'
    )
    task = load_tasks(load_datasets(toml)["arithmetic"], "train")[1]
    recs = trajectory_records("tr_v", answer=task.answer, reward=1.0, turns=0, task=task.id)
    for rec in recs:
        rec["dataset"] = "arithmetic"
    recs[-1]["metadata"] = {"ground_truth": task.answer}
    with pool.writer() as w:
        for rec in recs:
            w.append(rec)
    out = tmp_path / "verl.parquet"
    manifest = export(pool, "verl", out, options=ExportOptions(datasets=str(toml)))
    spec = importlib.util.spec_from_file_location(
        "aw_reward_v", manifest["reward"]["custom_reward_function"]["path"]
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    (row,) = _rows(out)
    assert naive_reward(row, str(task.answer), module.compute_score) == 1.0
    assert naive_reward(row, "no idea", module.compute_score) == 0.0
