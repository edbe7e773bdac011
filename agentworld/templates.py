"""Annotated example agents.toml and datasets.toml written by `aw init`.

The repository's own top-level agents.toml and datasets.toml are these same
texts (a test keeps them equal), so the examples are always ones that load.
"""

from __future__ import annotations

from pathlib import Path

AGENTS_TOML = """\
# agents.toml: how each agent runs and which model server (upstream) it talks to.
# `aw run --agent NAME --dataset D` rolls one out; `aw proxy` (run in this folder, or
# with --config agents.toml) routes each agent's calls to its upstream and records them
# in the pool.
#
# Keys of every agent:
#   kind               "python" (white-box: a module:function) or "command" (any program)
#   description        free text
#   max_turns          most model calls the agent should make per episode (default 10)
#   concurrency        episodes at once (default 8; `aw run --concurrency` overrides)
#   episode_timeout_s  an episode running longer is stopped and marked "timeout" (default 600)
# Upstream keys (read by the proxy):
#   upstream           OpenAI-compatible base URL of the model server, or a list of them
#   model              model name sent upstream
#   api_key_env        name of the environment variable holding the upstream's API key
#   engine             "vllm" (ask for token ids and log-probs; also `aw serve`) or "openai"
#   timeout_s          longest wait for the upstream, per call
#   params             sampling defaults, e.g. { temperature = 0.7, max_tokens = 512 }

# The defaults are sized for the embedded model (`aw serve` with no arguments:
# SmolLM2-135M on a CPU, ~0.1 s of one core a token): short answers, few turns,
# four episodes at once, and a timeout that catches a hung agent, not a slow CPU, so
# a first `aw run --agent math --dataset mini-gsm -n 4` finishes on two shared
# cores. On a GPU server raise max_tokens, max_turns and concurrency.
#
# A multi-turn, tool-using math agent. `module:function` is called as
# function(task, client, settings): `task` is an object (task.prompt, task.id,
# task.metadata: the row's other columns), not a dict; `client` is an openai.AsyncOpenAI
# already bound to the episode's trajectory (a plain `def` gets an openai.OpenAI);
# `settings` has model, sampling, max_turns. It returns the answer text. Your own
# agent in my_agent.py beside this file is `function = "my_agent:solve"` (modules
# are looked up in this file's folder first, then in the installed packages).
[agents.math]
kind = "python"
description = "GSM8K-style solver with a calculator tool (OpenAI tool calls)"
function = "agentworld.run.agents.math_agent:solve"
max_turns = 4
concurrency = 4
episode_timeout_s = 1800
upstream = "http://127.0.0.1:8000/v1"
model = "default"
engine = "vllm"
params = { temperature = 0.8, max_tokens = 256 }

# Calls that name no agent (no X-AW-Agent header, no trajectory: the README's first
# curl, any SDK pointed at `aw proxy --config agents.toml`) are recorded as agent
# "default" and go to its upstream. Rolled out with `aw run`, it answers in one call.
[agents.default]
kind = "python"
description = "calls that name no agent; as a rollout, one model call"
function = "agentworld.run.agents.baseline:solve"
max_turns = 1
upstream = "http://127.0.0.1:8000/v1"
model = "default"
engine = "vllm"
params = { temperature = 0.8, max_tokens = 256 }

# The same task in one model call, no tools: the baseline to beat.
[agents.baseline]
kind = "python"
description = "single-turn baseline"
function = "agentworld.run.agents.baseline:solve"
max_turns = 1
upstream = "http://127.0.0.1:8000/v1"
model = "default"
params = { temperature = 0.8, max_tokens = 256 }

# A black-box agent: any program, one process per episode. It gets the proxy's
# trajectory URL in OPENAI_BASE_URL / ANTHROPIC_BASE_URL (OPENAI_API_KEY is a
# dummy or the proxy token), the task as JSON on stdin ({"id", "prompt",
# "dataset", "split"}), and prints its answer on stdout (or writes it to the
# file named by AW_ANSWER_FILE). Placeholders in `command`: {python} (this
# Python), {prompt}, {task_id}, {task_json}, {answer_file}, {base_url}.
# `command` may be a list (no shell) or a string (split like a shell would).
[agents.cli]
kind = "command"
description = "a standalone script using the official openai SDK, unmodified"
command = ["{python}", "-m", "agentworld.run.agents.cli_agent"]
# env = { MY_SETTING = "1" }   # extra environment for the program
# cwd = "."                    # working folder, relative to this file
episode_timeout_s = 300
upstream = "http://127.0.0.1:8000/v1"
model = "default"
params = { temperature = 0.8, max_tokens = 256 }
"""

DATASETS_TOML = """\
# datasets.toml: where each dataset's tasks come from and how answers are scored.
#
# source.type:
#   "jsonl" / "parquet"  a file per split; source.fields maps task fields to columns:
#                        { id = "...", prompt = "...", answer = "..." } (defaults: id,
#                        prompt|question|problem|input, answer|solution|target|output)
#   "reasoning-gym"      a procedurally generated reasoning-gym task (offline);
#                        source.config is passed to its config; each split has size and seed
#   "python"             source.function = "module:function", called as
#                        function(split=NAME, **split_table) -> iterable of row dicts
# Paths are relative to this file; "pkg:<package>/<path>" points inside an installed package.
# A "module:function" is looked up in this file's folder first (my_scorer.py here is
# "my_scorer:score"), then in the installed packages.
#
# scorer (a name, "module:function", or a table with `type`):
#   "exact"     stripped answer == expected (ignore_case = true to fold case)
#   "numeric"   last number in the answer within `tolerance` (absolute, default 1e-6)
#               or `relative_tolerance` of the expected number
#   "regex"     `pattern` extracts the answer (group 1, else the whole match), then exact
#   "verifier"  the task's own verifier (reasoning-gym's score_answer; partial credit)
#   "python"    function = "module:function", called as function(answer, task) -> float:
#               `answer` is the agent's text (or None), task.answer the expected one,
#               task.metadata the row's other columns (`task` is an object, not a dict)
#
# default_split: the split `aw run` uses without --split (default: the first listed).
# success_threshold: a trajectory with reward >= this counts as a success (default 1.0).

# A small GSM8K-style set shipped with AgentWorld (hand-written problems).
[datasets.mini-gsm]
description = "20 grade-school word problems with numeric answers"
source = { type = "jsonl", fields = { id = "id", prompt = "question", answer = "answer" } }
splits = { train = "pkg:agentworld/run/data/mini_gsm_train.jsonl", test = "pkg:agentworld/run/data/mini_gsm_test.jsonl" }
default_split = "test"
scorer = { type = "numeric", tolerance = 1e-6 }

# reasoning-gym arithmetic: unlimited fresh tasks, different seeds per split.
[datasets.arithmetic]
description = "reasoning-gym basic_arithmetic, scored by its own verifier"
source = { type = "reasoning-gym", task = "basic_arithmetic" }
splits = { train = { size = 1000, seed = 1 }, test = { size = 100, seed = 2 } }
default_split = "test"
scorer = "verifier"

# reasoning-gym's symbolic GSM variants (templated word problems).
[datasets.gsm-symbolic]
description = "reasoning-gym gsm_symbolic"
source = { type = "reasoning-gym", task = "gsm_symbolic" }
splits = { train = { size = 1000, seed = 1 }, test = { size = 100, seed = 2 } }
default_split = "test"
scorer = { type = "numeric" }
"""


TEMPLATE_NAMES = ("agents.toml", "datasets.toml")


def write_templates(folder: Path) -> list[Path]:
    """Write the example config files that do not exist yet; return what was written."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in zip(TEMPLATE_NAMES, (AGENTS_TOML, DATASETS_TOML), strict=True):
        path = folder / name
        if path.exists():
            continue
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
