"""TRL: its own SFTTrainer and DPO data checks read `-f trl` exports as they are."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from agentworld.export import ExportOptions, export
from agentworld.pool import Pool, Selection

datasets = pytest.importorskip("datasets")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from agentworld.serve.tiny import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def _config(tmp_path: Path, cls: type, batch: int) -> Any:
    return cls(
        output_dir=str(tmp_path / "out"),
        max_steps=1,
        per_device_train_batch_size=batch,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        max_length=None,
    )


def test_chat_rows_are_conversational_prompt_completion(filled: Pool, tmp_path: Path) -> None:
    filled.labels.set(["step:tr_a1_s1"], {"trainable": False}, author="me")
    manifest = export(filled, "trl", tmp_path / "ds")
    ds = datasets.load_from_disk(str(tmp_path / "ds"))
    assert len(ds) == manifest["counts"]["rows"] == 11  # 12 steps, one labelled not trainable
    assert "input_ids" not in ds.column_names  # TRL would skip its chat template
    row = next(r for r in ds if r["step"] == "tr_a1_s2")
    assert [m["role"] for m in row["prompt"]] == [
        "system", "user", "assistant", "tool", "assistant", "tool"
    ]  # fmt: skip
    assert row["completion"] == [{"role": "assistant", "content": "The answer is 6."}]
    # TRL's documented tool-call shape, with arguments as an object; nothing None-filled.
    assert row["prompt"][2] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "call_0", "type": "function", "function": {"name": "calc", "arguments": {"e": "0+1"}}}
        ],
    }  # fmt: skip
    assert row["prompt"][3] == {
        "role": "tool",
        "content": "1",
        "tool_call_id": "call_0",
        "name": "calc",
    }
    assert row["prompt"][0] == {"role": "system", "content": "Use the calc tool."}
    assert json.loads(row["tools"])[0]["function"]["name"] == "calc"
    assert row["trajectory_reward"] == 1.0 and row["group"] == "g1"


def test_preference_rows_pair_best_with_worst(filled: Pool, tmp_path: Path) -> None:
    manifest = export(filled, "trl", tmp_path / "dpo", options=ExportOptions(variant="preference"))
    ds = datasets.load_from_disk(str(tmp_path / "dpo"))
    assert len(ds) == manifest["counts"]["rows"] == 2
    row = next(r for r in ds if r["group"] == "g1")
    assert row["chosen"] == [{"role": "assistant", "content": "The answer is 6."}]
    assert row["rejected"] == [{"role": "assistant", "content": "The answer is 7."}]
    assert row["prompt"][-1]["role"] == "tool"  # the shared context, tool turns kept


@pytest.mark.parametrize("variant", ["chat", "preference", "prompt"])
def test_an_empty_selection_is_an_empty_dataset(filled: Pool, tmp_path: Path, variant: str) -> None:
    opts = ExportOptions(variant=variant)
    export(filled, "trl", tmp_path / "ds", Selection(min_reward=5), opts)
    ds = datasets.load_from_disk(str(tmp_path / "ds"))
    assert ds.num_rows == 0 and "prompt" in ds.column_names


@pytest.mark.slow
def test_trl_sft_trainer_trains_on_completions_only(
    filled: Pool, tmp_path: Path, tiny_dir: Path
) -> None:
    """TRL's own SFTTrainer takes the export without glue; prompt tokens carry no loss."""
    pytest.importorskip("trl")
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    tok = AutoTokenizer.from_pretrained(str(tiny_dir))
    export(filled, "trl", tmp_path / "ds")
    ds = datasets.load_from_disk(str(tmp_path / "ds"))
    model = AutoModelForCausalLM.from_pretrained(str(tiny_dir))
    config = _config(tmp_path, SFTConfig, 4)
    trainer = SFTTrainer(model=model, args=config, train_dataset=ds, processing_class=tok)
    prepared = trainer.train_dataset
    assert len(prepared) == len(ds)
    for src, ex in zip(ds, prepared, strict=True):
        tools = json.loads(src["tools"])
        prompt_ids = tok.apply_chat_template(
            src["prompt"], tools=tools, add_generation_prompt=True, tokenize=True, return_dict=True
        )["input_ids"]
        n = len(prompt_ids)
        assert ex["input_ids"][:n] == prompt_ids  # the chat template rendered the prompt
        assert set(ex["labels"][:n]) == {-100}  # no loss on the prompt
        trained = [t for t in ex["labels"][n:] if t != -100]
        assert trained == ex["input_ids"][n:]  # loss on the whole completion
        text = tok.decode(trained)
        content = src["completion"][0]["content"]
        assert (content or "<tool_call>") in text
    batch = trainer.data_collator([prepared[i] for i in range(4)])
    assert (batch["labels"] != -100).sum() < batch["attention_mask"].sum()
    result = trainer.train()
    assert math.isfinite(result.training_loss)


@pytest.mark.slow
def test_trl_dpo_trainer_takes_preference_rows(
    filled: Pool, tmp_path: Path, tiny_dir: Path
) -> None:
    """TRL's own DPOTrainer tokenizes the pairs and trains a step on them."""
    pytest.importorskip("trl")
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    tok = AutoTokenizer.from_pretrained(str(tiny_dir))
    export(filled, "trl", tmp_path / "dpo", options=ExportOptions(variant="preference"))
    ds = datasets.load_from_disk(str(tmp_path / "dpo"))
    config = _config(tmp_path, DPOConfig, 2)
    model = AutoModelForCausalLM.from_pretrained(str(tiny_dir))
    trainer = DPOTrainer(model=model, args=config, train_dataset=ds, processing_class=tok)
    ex = trainer.train_dataset[0]
    assert "The answer is 6." in tok.decode(ex["chosen_ids"])
    assert "The answer is 6." not in tok.decode(ex["prompt_ids"])
    result = trainer.train()
    assert math.isfinite(result.training_loss)


@pytest.mark.slow
def test_trl_reads_the_tokenized_hf_export_mask(
    filled: Pool, tmp_path: Path, tiny_dir: Path
) -> None:
    """`-f hf` rows are pre-tokenized: TRL folds `assistant_masks` into its labels as is."""
    pytest.importorskip("trl")
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    filled.labels.set(["step:tr_a1_s1"], {"trainable": False}, author="me")
    export(filled, "hf", tmp_path / "hf", options=ExportOptions(rows="trajectory"))
    ds = datasets.load_from_disk(str(tmp_path / "hf"))
    tok = AutoTokenizer.from_pretrained(str(tiny_dir))
    model = AutoModelForCausalLM.from_pretrained(str(tiny_dir))
    trainer = SFTTrainer(
        model=model, args=_config(tmp_path, SFTConfig, 4), train_dataset=ds, processing_class=tok
    )
    for src, ex in zip(ds, trainer.train_dataset, strict=True):
        assert ex["input_ids"] == src["input_ids"]  # the engine's ids, not re-rendered
        want = [
            t if m else -100 for t, m in zip(src["input_ids"], src["assistant_masks"], strict=True)
        ]
        assert ex["labels"] == want
    assert math.isfinite(trainer.train().training_loss)


@pytest.mark.slow
def test_trl_grpo_trainer_takes_prompt_rows(filled: Pool, tmp_path: Path, tiny_dir: Path) -> None:
    """One prompt row per task; TRL's GRPOTrainer hands the ground truth to reward functions."""
    pytest.importorskip("trl")
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    manifest = export(filled, "trl", tmp_path / "grpo", options=ExportOptions(variant="prompt"))
    ds = datasets.load_from_disk(str(tmp_path / "grpo"))
    assert len(ds) == manifest["counts"]["rows"] == 2  # two tasks, two trajectories each
    row = next(r for r in ds if r["task"] == "t1")
    assert row["prompt"] == [
        {"role": "system", "content": "Use the calc tool."},
        {"role": "user", "content": "Task t1: what is 1+2+3?"},
    ]
    assert row["ground_truth"] == "6" and row["mean_reward"] == 0.5
    seen: list[str] = []
    tools_seen: list[str] = []

    def reward(prompts: list, completions: list, ground_truth: list, **kw: Any) -> list[float]:
        seen.extend(ground_truth)
        tools_seen.extend(kw["tools"])
        return [0.0] * len(completions)

    config = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        max_steps=1,
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=4,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
    )
    tok = AutoTokenizer.from_pretrained(str(tiny_dir))
    model = AutoModelForCausalLM.from_pretrained(str(tiny_dir))
    trainer = GRPOTrainer(
        model=model, reward_funcs=reward, args=config, train_dataset=ds, processing_class=tok
    )
    # The README's word: without tools=[...] of its own, TRL renders prompts with no tools;
    # the column reaches reward functions only.
    assert not trainer.tools
    trainer.train()
    assert seen and set(seen) <= {"6"}
    assert tools_seen and {json.loads(t)[0]["function"]["name"] for t in tools_seen} == {"calc"}
