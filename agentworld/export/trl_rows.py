"""Datasets TRL's trainers take as they are: prompt/completion (SFT), prompt/chosen/rejected (DPO), prompts (GRPO).

TRL decides how to read a dataset from its columns: an ``input_ids`` column
means "already tokenized" and skips the chat template, ``prompt`` +
``completion`` means "train on the completion only" (TRL builds the
``completion_mask`` itself), and ``tools`` may be a JSON string it decodes
(``trl/trainer/sft_trainer.py``, ``tokenize_fn``). So these rows carry no
token ids: one SFT row per trainable sampled step (``prompt`` = the
conversation the policy saw, ``completion`` = what it sampled), messages in
the shape Hugging Face chat templates read (``tool_calls`` as
``{"type": "function", "function": {"name", "arguments": {...}}}``, tool
results with ``name``), stored as ``List(Json())`` so each message keeps
exactly its own keys (an Arrow struct would give every message every key,
``None``-filled, which templates then render).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

import orjson

from agentworld.errors import MissingExtraError
from agentworld.export.conversation import openai_tools, trl_messages, usable
from agentworld.export.manifest import left_out
from agentworld.export.pairs import preference_pairs
from agentworld.export.select import fold_tasks, step_reward, step_trainable
from agentworld.pool import Trajectory

VARIANTS = ("chat", "preference", "prompt")
MESSAGE_COLUMNS = ("prompt", "completion", "chosen", "rejected")


def _tools(tools: list[Any] | None) -> str | None:
    converted = openai_tools(tools)
    return orjson.dumps(converted).decode() if converted else None


def features(variant: str) -> Any:
    """The ``datasets.Features`` of a variant's rows."""
    try:
        from datasets import Features, Json, List, Value
    except ImportError:  # no datasets, or one older than 5 (no Json feature)
        raise MissingExtraError("datasets>=5", "export") from None

    messages = List(Json())
    text, number = Value("string"), Value("float64")
    if variant == "chat":
        cols = {
            "prompt": messages,
            "completion": messages,
            "tools": text,
            "trajectory": text,
            "step": text,
            "group": text,
            "agent": text,
            "dataset": text,
            "split": text,
            "task": text,
            "policy_version": Value("int64"),
            "reward": number,
            "trajectory_reward": number,
        }
    elif variant == "prompt":
        cols = {
            "prompt": messages,
            "tools": text,
            "ground_truth": text,
            "dataset": text,
            "split": text,
            "task": text,
            "agent": text,
            "trajectories": Value("int64"),
            "mean_reward": number,
        }
    else:
        cols = {
            "prompt": messages,
            "chosen": messages,
            "rejected": messages,
            "tools": text,
            "group": text,
            "chosen_trajectory": text,
            "rejected_trajectory": text,
            "chosen_reward": number,
            "rejected_reward": number,
        }
    return Features(cols)


def chat_rows(trajs: Iterable[Trajectory], counts: Counter[str]) -> Iterator[dict[str, Any]]:
    """One prompt/completion row per trainable sampled step (loss on the completion only)."""
    for t in trajs:
        counts["trajectories"] += 1
        for s in t.steps:
            if not usable(s):
                continue
            if not step_trainable(s):
                counts["steps_untrainable"] += 1
                continue
            yield {
                "prompt": trl_messages(s["request"]["messages"]),
                "completion": trl_messages([s["response"]["message"]]),
                "tools": _tools(s["request"].get("tools")),
                "trajectory": t.id,
                "step": s["id"],
                "group": t.first("group"),
                "agent": t.first("agent"),
                "dataset": t.first("dataset"),
                "split": t.first("split"),
                "task": t.first("task"),
                "policy_version": s["policy_version"],
                "reward": step_reward(s),
                "trajectory_reward": t.reward,
            }


def preference_rows(trajs: Iterable[Trajectory], counts: Counter[str]) -> Iterator[dict[str, Any]]:
    """One prompt/chosen/rejected row per pair (tool calls kept: TRL's templates render them)."""
    for pair in preference_pairs(trajs, counts):
        tools = _tools(pair.chosen_tools)
        if tools != _tools(pair.rejected_tools):
            # One tools column per row: a pair offered different tools compares two prompts.
            left_out(
                counts, "pairs_tools_differ", f"{pair.chosen_trajectory}/{pair.rejected_trajectory}"
            )
            continue
        yield {
            "prompt": trl_messages(pair.prompt),
            "chosen": trl_messages([*pair.prompt, pair.chosen])[-1:],
            "rejected": trl_messages([*pair.prompt, pair.rejected])[-1:],
            "tools": tools,
            "group": pair.group,
            "chosen_trajectory": pair.chosen_trajectory,
            "rejected_trajectory": pair.rejected_trajectory,
            "chosen_reward": pair.chosen_reward,
            "rejected_reward": pair.rejected_reward,
        }


def prompt_rows(trajs: Iterable[Trajectory], counts: Counter[str]) -> Iterator[dict[str, Any]]:
    """One prompt-only row per task, for GRPO: TRL hands the other columns to reward functions.

    ``tools`` among them, and only there: GRPOTrainer renders prompts with the
    callables of its own ``tools=[...]`` (``trl/trainer/grpo_trainer.py``), which
    no dataset column can supply; the README says how to match them.
    """
    for fold in fold_tasks(trajs, counts):
        yield {
            "prompt": trl_messages(fold.first["request"]["messages"]),
            "tools": _tools(fold.first["request"].get("tools")),
            "ground_truth": fold.ground_truth,
            "dataset": fold.dataset,
            "split": fold.split,
            "task": fold.task,
            "agent": fold.agent,
            "trajectories": len(fold.rewards),
            "mean_reward": fold.mean_reward,
        }


ROWS = {"chat": chat_rows, "preference": preference_rows, "prompt": prompt_rows}


def arrow_schema(variant: str) -> Any:
    """The Parquet schema rows are streamed through: each message a JSON text, cast to Json after."""
    from datasets import Value

    from agentworld.export.tabular import import_pyarrow

    pa = import_pyarrow()
    return pa.schema(
        [
            (name, pa.type_for_alias(f.dtype) if isinstance(f, Value) else pa.list_(pa.string()))
            for name, f in features(variant).items()
        ]
    )


def encoded(rows: Iterable[dict[str, Any]], variant: str) -> Iterator[dict[str, Any]]:
    """Rows with each message as JSON text, the way they are streamed to Parquet."""
    lists = [name for name in features(variant) if name in MESSAGE_COLUMNS]
    for row in rows:
        for name in lists:
            row[name] = [orjson.dumps(m).decode() for m in row[name]]
        yield row
