"""verl's own reward dispatch and dataset row handling, copied minimally (verl is too heavy to install).

Source: volcengine/verl at b178a3cd56f58b2d502255daba591e92833930a7 (2026-01-29):
- ``verl/utils/reward_score/__init__.py``: ``default_compute_score`` (the
  data-source dispatch; only the gsm8k branch's scorer is copied, the other
  known sources answer with a marker instead of importing their modules);
- ``verl/utils/reward_score/gsm8k.py``: ``extract_solution`` (strict) and
  ``compute_score``;
- ``verl/workers/reward_manager/naive.py``: how a row reaches the scorer
  (``data_source``, ``reward_model.ground_truth``, ``extra_info``);
- ``verl/utils/dataset/rl_dataset.py``: ``RLHFDataset.__getitem__`` (text
  rows: ``raw_prompt``, ``index``, ``tools_kwargs``, ``interaction_kwargs``);
- ``verl/experimental/agent_loop/agent_loop.py``: the row's ``agent_name`` or
  the configured default agent loop;
- ``verl/experimental/agent_loop/tool_agent_loop.py``: ``ToolAgentLoop._call_tool``
  (the ``create_kwargs`` a called tool's ``create`` gets from the row's
  ``tools_kwargs``).
"""

from __future__ import annotations

import re
from typing import Any

KNOWN = {
    "lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500",
    "math_dapo", "math", "math_dapo_reasoning", "numina_aops_forum", "numina_synthetic_math",
    "numina_amc_aime", "numina_synthetic_amc", "numina_cn_k12", "numina_olympiads",
    "codecontests", "apps", "codeforces", "taco", "hiyouga/geometry3k", "searchR1_nq",
    "searchR1_triviaqa", "searchR1_popqa", "searchR1_hotpotqa", "searchR1_2wikimultihopqa",
    "searchR1_musique", "searchR1_bamboogle",
}  # fmt: skip


def gsm8k_compute_score(solution_str: str, ground_truth: str) -> float:
    solution_str = solution_str[-300:]
    solutions = re.findall("#### (\\-?[0-9\\.\\,]+)", solution_str)
    if not solutions:
        return 0
    return 1.0 if solutions[-1].replace(",", "").replace("$", "") == ground_truth else 0.0


def default_compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info=None):
    if data_source == "openai/gsm8k":
        return float(gsm8k_compute_score(solution_str, ground_truth))
    if data_source in KNOWN or data_source.startswith("aime"):
        return "scored by verl"
    raise NotImplementedError(f"Reward function is not implemented for {data_source=}")


def naive_reward(row: dict[str, Any], solution_str: str, compute_score=None) -> Any:
    """NaiveRewardManager's call for one item (reward_fn_key = "data_source")."""
    compute_score = compute_score or default_compute_score
    return compute_score(
        data_source=row["data_source"],
        solution_str=solution_str,
        ground_truth=row["reward_model"]["ground_truth"],
        extra_info=row.get("extra_info", {}),
    )


def rl_dataset_item(row_dict: dict[str, Any], need_tools_kwargs: bool = False) -> dict[str, Any]:
    """RLHFDataset.__getitem__ for a text row (prompt_key = "prompt")."""
    row_dict["raw_prompt"] = row_dict["prompt"]
    if "extra_info" not in row_dict or row_dict["extra_info"] is None:
        row_dict["extra_info"] = dict()
    index = row_dict.get("extra_info", {}).get("index", 0)
    tools_kwargs = row_dict.get("extra_info", {}).get("tools_kwargs", {})
    interaction_kwargs = row_dict.get("extra_info", {}).get("interaction_kwargs", {})
    need = row_dict.get("extra_info", {}).get("need_tools_kwargs", need_tools_kwargs)
    row_dict["warned_tools_kwargs_empty"] = bool(need and not tools_kwargs)
    row_dict["index"] = index
    row_dict["tools_kwargs"] = tools_kwargs
    row_dict["interaction_kwargs"] = interaction_kwargs
    return row_dict


def agent_loop(row: dict[str, Any], default_agent_loop: str = "single_turn_agent") -> str:
    return row.get("agent_name") or default_agent_loop


def tool_create_kwargs(tools_kwargs: dict[str, Any], tool_name: str) -> Any:
    """ToolAgentLoop._call_tool's lookup (an exception there is the tool's error to the policy)."""
    kwargs = tools_kwargs.get(tool_name, {})
    return kwargs.get("create_kwargs", {})
