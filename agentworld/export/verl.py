"""verl's RL dataset Parquet: one row per task, for re-rolling the pool's tasks in verl.

verl's trainer reads ``data_source``, ``prompt`` (a chat list), ``ability``,
``reward_model`` ``{style, ground_truth}``, ``extra_info`` and, for its
multi-turn agent loop, ``agent_name`` and ``extra_info.tools_kwargs``
(``verl/utils/dataset/rl_dataset.py``, ``verl/experimental/agent_loop/``).
The prompt is the first call's messages as the agent sent them, in the shape
Hugging Face chat templates take, as ``-f trl`` writes them (developer as
system; tool calls as ``{id, type, function: {name, arguments}}`` with
arguments an object, tool results with their ``name``). verl hands
``prompt`` to ``apply_chat_template`` as ``datasets`` reads it back, so the
column's Parquet type decides what a template sees: an Arrow struct gives
every message every field (a null ``tool_calls`` fails Llama 3.1's template)
and arguments one type (a JSON string, which ``| tojson`` quotes a second
time). A prompt of role and content only is a struct of those two; once a
prompt holds tool traffic, each message is Arrow's JSON type, which
``datasets`` (5 and later) reads back as the message's own keys. The
ground truth is the dataset's reference answer that ``aw run`` records as
``metadata.ground_truth`` (never the agent's own ``metadata.answer``); tasks
without one get ``""`` and are counted as ``tasks_without_ground_truth``.

Reward routing: verl picks its scorer by ``data_source``, and its
``default_compute_score`` raises NotImplementedError for sources it does not
know. When a row's data source is not one of those, the export writes
``<out>.reward.py``, a ``custom_reward_function`` that applies AgentWorld's
own scorer from ``datasets.toml``, and says so; without a datasets file it
warns instead.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from agentworld.export.conversation import openai_tools, trl_messages
from agentworld.export.select import fold_tasks
from agentworld.export.tabular import import_pyarrow
from agentworld.pool import Trajectory

# The data sources verl's own default_compute_score scores (and any "aime*"): read from
# volcengine/verl verl/utils/reward_score/__init__.py at b178a3cd56f58b2d502255daba591e92833930a7.
VERL_SCORED = frozenset(
    {
        "openai/gsm8k",
        "lighteval/MATH",
        "DigitalLearningGmbH/MATH-lighteval",
        "HuggingFaceH4/MATH-500",
        "math_dapo",
        "math",
        "math_dapo_reasoning",
        "numina_aops_forum",
        "numina_synthetic_math",
        "numina_amc_aime",
        "numina_synthetic_amc",
        "numina_cn_k12",
        "numina_olympiads",
        "codecontests",
        "apps",
        "codeforces",
        "taco",
        "hiyouga/geometry3k",
        "searchR1_nq",
        "searchR1_triviaqa",
        "searchR1_popqa",
        "searchR1_hotpotqa",
        "searchR1_2wikimultihopqa",
        "searchR1_musique",
        "searchR1_bamboogle",
    }
)
TOOL_AGENT = "tool_agent"  # verl's registered ToolAgentLoop
SINGLE_TURN_AGENT = "single_turn_agent"


def verl_scores(data_source: str) -> bool:
    """Whether verl's default_compute_score has a scorer for ``data_source``."""
    return data_source in VERL_SCORED or data_source.startswith("aime")


PLAIN_KEYS = frozenset({"role", "content"})


def schema(tool_names: Iterable[str] = (), *, json_prompt: bool = False) -> Any:
    """The Arrow schema of verl rows (``tools_kwargs`` has one field per tool offered;
    a prompt message a ``{role, content}`` struct, or with ``json_prompt`` a JSON object)."""
    pa = import_pyarrow()
    if json_prompt:
        message = pa.json_()
    else:
        message = pa.struct([("role", pa.string()), ("content", pa.string())])
    create = pa.struct([("create_kwargs", pa.struct([("ground_truth", pa.string())]))])
    extra = [
        ("split", pa.string()),
        ("index", pa.int64()),
        ("dataset", pa.string()),
        ("task", pa.string()),
        ("agent", pa.string()),
        ("trajectories", pa.int64()),
        ("mean_reward", pa.float64()),
        ("tools", pa.string()),
        ("need_tools_kwargs", pa.bool_()),
    ]
    names = sorted(set(tool_names))
    if names:  # Parquet cannot hold a struct with no fields
        extra.append(("tools_kwargs", pa.struct([(n, create) for n in names])))
    return pa.schema(
        [
            ("data_source", pa.string()),
            ("agent_name", pa.string()),
            ("prompt", pa.list_(message)),
            ("ability", pa.string()),
            ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
            ("extra_info", pa.struct(extra)),
        ]
    )


def rows(
    trajs: Iterable[Trajectory],
    counts: Counter[str],
    *,
    ability: str | None = None,
    data_source: str | None = None,
) -> list[dict[str, Any]]:
    """One row per (dataset, split, task); trajectories of the same task are folded into it."""
    out = []
    for index, fold in enumerate(fold_tasks(trajs, counts)):
        tools = openai_tools(fold.first["request"].get("tools"))
        gt = fold.ground_truth
        info: dict[str, Any] = {
            "split": fold.split,
            "index": index,
            "dataset": fold.dataset,
            "task": fold.task,
            "agent": fold.agent,
            "trajectories": len(fold.rewards),
            "mean_reward": fold.mean_reward,
            "tools": orjson.dumps(tools).decode() if tools else None,
            "need_tools_kwargs": bool(tools),
        }
        if tools:
            # What verl's ToolAgentLoop hands each tool's create(); the ground truth, as
            # verl's own gsm8k tool example does, so a scoring tool can use it.
            create = {"create_kwargs": {"ground_truth": gt}}
            info["tools_kwargs"] = {tool["function"]["name"]: create for tool in tools}
        out.append(
            {
                "data_source": data_source or fold.dataset or fold.agent,
                "agent_name": TOOL_AGENT if tools else SINGLE_TURN_AGENT,
                "prompt": trl_messages(fold.first["request"]["messages"]),
                "ability": ability or fold.agent,
                "reward_model": {"style": "rule", "ground_truth": gt},
                "extra_info": info,
            }
        )
    # verl offers every row the tools of its own config, and ToolAgentLoop looks a called
    # tool up with tools_kwargs.get(name, {}): the one Arrow struct of all rows would give
    # a tool this row was not offered None there, and the call fails. So each tool row
    # names every tool (extra_info.tools keeps what it was offered).
    names = tool_names(out)
    for row in out:
        if row["extra_info"].get("tools_kwargs"):
            create = {"create_kwargs": {"ground_truth": row["reward_model"]["ground_truth"]}}
            row["extra_info"]["tools_kwargs"] = {name: create for name in names}
    return out


def plain_prompts(rows_: list[dict[str, Any]]) -> bool:
    """Whether every prompt message is role and content only (no tool traffic, no
    reasoning): then ``prompt`` is a plain struct list, as verl's own examples write it."""
    return all(PLAIN_KEYS.issuperset(m) for r in rows_ for m in r["prompt"])


def json_prompts(rows_: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Rows with each prompt message as JSON text, the storage of Arrow's JSON type."""
    for row in rows_:
        yield {**row, "prompt": [orjson.dumps(m).decode() for m in row["prompt"]]}


def tool_names(rows_: list[dict[str, Any]]) -> list[str]:
    """Every tool name the rows offer (the fields of the ``tools_kwargs`` struct)."""
    return sorted({n for r in rows_ for n in r["extra_info"].get("tools_kwargs") or ()})


def reward_path(out: Path) -> Path:
    """``<out>.reward.py``: the custom reward function beside the export."""
    return out.with_name(out.name + ".reward.py")


REWARD_TEMPLATE = '''"""verl custom_reward_function for {out_name}: AgentWorld's own scorer for its tasks.

Written by `aw export -f verl`: verl's default_compute_score does not score the
data_source {sources}, so point verl at this file:

    custom_reward_function.path={path}
    custom_reward_function.name=compute_score

It scores each response with the scorer {datasets_toml} gives the row's dataset
(extra_info.dataset), the task's own verifier included; agentworld must be
installed where verl computes rewards.
"""

from __future__ import annotations

import asyncio
from functools import cache
from pathlib import Path

DATASETS_TOML = {datasets_toml!r}


@cache
def _dataset(name):
    from agentworld.config import load_datasets
    from agentworld.run.scoring import make_scorer

    dataset = load_datasets(Path(DATASETS_TOML))[name]
    return dataset, make_scorer(dataset)


@cache
def _tasks(name, split):
    from agentworld.run.tasks import load_tasks

    return {{task.id: task for task in load_tasks(_dataset(name)[0], split)}}


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """verl's reward signature: the score of one response to one task."""
    from agentworld.run.tasks import Task

    info = extra_info or {{}}
    name = info.get("dataset") or data_source
    dataset, scorer = _dataset(name)
    if dataset.scorer.type == "verifier":  # needs the task's own source row
        task = _tasks(name, info.get("split"))[info["task"]]
    else:
        task = Task(id=str(info.get("task")), prompt="", answer=ground_truth, dataset=name)
    return asyncio.run(scorer(solution_str, task))
'''


def route_rewards(
    rows_: list[dict[str, Any]], out: Path, datasets_toml: Path | None
) -> dict[str, Any]:
    """Say how verl will score the rows; write ``<out>.reward.py`` when verl cannot by itself."""
    sources = sorted({r["data_source"] for r in rows_})
    unscored = [s for s in sources if not verl_scores(s)]
    path = reward_path(out)
    path.unlink(missing_ok=True)  # never leave one from an earlier export that no longer fits
    routing: dict[str, Any] = {
        "data_sources": sources,
        "verl_scores": sorted(set(sources) - set(unscored)),
    }
    if not unscored:
        return routing
    if datasets_toml is None or not datasets_toml.is_file():
        routing["warning"] = (
            f"verl's default_compute_score does not score data_source {', '.join(unscored)}; "
            "give --datasets datasets.toml to get a custom reward function from AgentWorld's "
            "scorer, or --data-source one verl scores (e.g. openai/gsm8k)"
        )
        return routing
    path.write_text(
        REWARD_TEMPLATE.format(
            out_name=out.name,
            sources=json.dumps(unscored),
            path=path.resolve(),
            datasets_toml=str(datasets_toml.resolve()),
        )
    )
    routing["custom_reward_function"] = {"path": str(path.resolve()), "name": "compute_score"}
    routing["warning"] = (
        f"verl's default_compute_score does not score data_source {', '.join(unscored)}; wrote "
        f"{path}: run verl with custom_reward_function.path={path} "
        "custom_reward_function.name=compute_score"
    )
    return routing
