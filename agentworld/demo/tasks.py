"""The demo's task and agent files: 1-digit addition and subtraction, held-out split disjoint.

The task is chosen so a 135M model starts in the middle (about half right,
greedy) and so the reward is binary and exact: 1 for the right number, 0
otherwise. reasoning-gym's own verifier gives 0.03-0.11 partial credit to
wrong-format replies such as "9 + 8 = 17.", which std-normalised GRPO
advantages turn into a strong signal for the wrong thing (issue 30).

All 200 problems `a + b` and `a - b` (a, b in 0..9) are shuffled with the
seed; the first ``eval_tasks`` are held out, and training iterations draw
fresh tasks from the rest, so no held-out question is ever trained on.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

DATASET = "add-sub"
TRAIN_AGENT = "solver"  # samples at the training temperature
EVAL_AGENT = "solver-greedy"  # the same agent, greedy, for held-out evaluation

AGENTS_TOML = """\
# Written by `aw demo`: one single-turn answer agent, talking to the demo's embedded server.
# Two entries differ only in sampling: rollouts for training, greedy for evaluation.
[agents.{train}]
kind = "python"
description = "single-turn answer agent (training rollouts, sampled)"
function = "agentworld.run.agents.baseline:solve"
max_turns = 1
concurrency = 32
episode_timeout_s = 600
upstream = "{upstream}"
model = "default"
engine = "vllm"
params = {{ temperature = {temperature}, max_tokens = {max_tokens} }}

[agents.{eval}]
kind = "python"
description = "single-turn answer agent (held-out evaluation, greedy)"
function = "agentworld.run.agents.baseline:solve"
max_turns = 1
concurrency = 32
episode_timeout_s = 600
upstream = "{upstream}"
model = "default"
engine = "vllm"
params = {{ temperature = 0.0, max_tokens = {max_tokens} }}
"""

# Binary and exact: 1.0 when the reply's last number is the answer, else 0.0.
SCORER = '{ type = "numeric" }'

DATASETS_TOML = """\
# Written by `aw demo`: 1-digit + and -, split by the demo (held-out disjoint from training).
[datasets.{name}]
description = "1-digit addition and subtraction, exact number scored 1 else 0"
source = {{ type = "jsonl" }}
scorer = {scorer}
default_split = "heldout"

[datasets.{name}.splits]
{splits}
"""


@dataclass(frozen=True)
class DemoSplit:
    """How the problems were divided: held out, available for training, and reuse."""

    heldout: int
    train_pool: int
    reused: bool  # iterations x tasks needed more training problems than there are


def problems() -> list[dict[str, object]]:
    """Every 1-digit `a + b` and `a - b` as a task row (id, prompt, answer)."""
    rows: list[dict[str, object]] = []
    for a in range(10):
        for b in range(10):
            for op, value in (("+", a + b), ("-", a - b)):
                name = "add" if op == "+" else "sub"
                rows.append(
                    {"id": f"{name}-{a}-{b}", "prompt": f"Calculate {a} {op} {b}.", "answer": value}
                )
    return rows


def write_demo_files(
    folder: Path,
    *,
    upstream: str,
    eval_tasks: int,
    iterations: int,
    tasks_per_iteration: int,
    max_tokens: int,
    temperature: float,
    seed: int,
) -> DemoSplit:
    """Write agents.toml, datasets.toml and tasks/*.jsonl (one split per iteration)."""
    rows = problems()
    random.Random(seed).shuffle(rows)
    # At least one problem stays for training whatever --eval-tasks says.
    heldout, rest = rows[: min(eval_tasks, len(rows) - 1)], rows[min(eval_tasks, len(rows) - 1) :]
    task_dir = folder / "tasks"
    task_dir.mkdir(parents=True, exist_ok=True)
    splits = {"heldout": heldout}
    for it in range(1, iterations + 1):
        start = (it - 1) * tasks_per_iteration
        splits[f"iter-{it:02d}"] = [
            rest[(start + k) % len(rest)] for k in range(min(tasks_per_iteration, len(rest)))
        ]
    lines = []
    for name, split_rows in splits.items():
        path = task_dir / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in split_rows))
        lines.append(f'{name} = "tasks/{name}.jsonl"')
    (folder / "datasets.toml").write_text(
        DATASETS_TOML.format(name=DATASET, scorer=SCORER, splits="\n".join(lines))
    )
    (folder / "agents.toml").write_text(
        AGENTS_TOML.format(
            train=TRAIN_AGENT,
            eval=EVAL_AGENT,
            upstream=upstream,
            temperature=temperature,
            max_tokens=max_tokens,
        )
    )
    return DemoSplit(
        heldout=len(heldout),
        train_pool=len(rest),
        reused=iterations * tasks_per_iteration > len(rest),
    )
