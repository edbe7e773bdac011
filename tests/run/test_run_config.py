"""agents.toml / datasets.toml: what loads, and every error naming file, entry and key."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from aw_run_fakes import REPO, write

from agentworld.config import load_agents, load_datasets
from agentworld.errors import ConfigError, NotFoundError
from agentworld.run.runners import make_runner
from agentworld.run.scoring import make_scorer
from agentworld.run.tasks import load_tasks
from agentworld.templates import AGENTS_TOML, DATASETS_TOML, write_templates


def _agents(tmp_path: Path, body: str) -> Path:
    return write(tmp_path / "agents.toml", body)


def _datasets(tmp_path: Path, body: str) -> Path:
    write(tmp_path / "tasks.jsonl", '{"prompt": "Compute 1 + 1?", "answer": "2"}\n')
    return write(tmp_path / "datasets.toml", body)


def _error(fn, *args, **kwargs) -> str:
    with pytest.raises(ConfigError) as info:
        fn(*args, **kwargs)
    return str(info.value)


def test_shipped_examples_load_and_match_the_templates(tmp_path):
    agents = load_agents(REPO / "agents.toml")
    datasets = load_datasets(REPO / "datasets.toml")
    assert {"math", "baseline", "cli"} <= set(agents)
    assert agents["math"].kind == "python" and agents["cli"].kind == "command"
    assert agents["math"].upstream["upstream"] == "http://127.0.0.1:8000/v1"
    assert agents["math"].sampling == {"temperature": 0.8, "max_tokens": 256}
    # Sized for the embedded SmolLM2 on a CPU (issue 27): few turns, a few at once.
    assert (agents["math"].max_turns, agents["math"].concurrency) == (4, 4)
    assert agents["default"].upstream["upstream"] == "http://127.0.0.1:8000/v1"
    assert {"mini-gsm", "arithmetic"} <= set(datasets)
    assert (REPO / "agents.toml").read_text() == AGENTS_TOML
    assert (REPO / "datasets.toml").read_text() == DATASETS_TOML
    # The shipped agents' functions resolve.
    for name in ("math", "baseline"):
        make_runner(agents[name], base_env={})


def test_write_templates_keeps_existing_files(tmp_path):
    write(tmp_path / "agents.toml", "# mine\n")
    written = write_templates(tmp_path)
    assert written == [tmp_path / "datasets.toml"]
    assert (tmp_path / "agents.toml").read_text() == "# mine\n"
    # The written datasets.toml works from any folder (pkg: paths).
    tasks = load_tasks(load_datasets(tmp_path / "datasets.toml")["mini-gsm"], "train", 3)
    assert [t.id for t in tasks] == ["train-00", "train-01", "train-02"]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            '[agents.a]\nkind = "python"\nfunction = "m:f"\nmax_turn = 3\n',
            "agent 'a': max_turn: unknown key; did you mean 'max_turns'? (allowed: ",
        ),
        ('[agents.a]\nkind = "shell"\n', "agent 'a': kind: must be one of python, command"),
        ('[agents.a]\nkind = "python"\n', "agent 'a': function: missing"),
        (
            '[agents.a]\nkind = "python"\nfunction = "no_colon"\n',
            "agent 'a': function: must be 'module:function'",
        ),
        ('[agents.a]\nkind = "command"\n', "agent 'a': command: missing"),
        ('[agents.a]\nkind = "command"\ncommand = []\n', "agent 'a': command: is empty"),
        (
            '[agents.a]\nkind = "command"\ncommand = "x"\nfunction = "m:f"\n',
            "agent 'a': function: only for kind = 'python'",
        ),
        (
            '[agents.a]\nkind = "python"\nfunction = "m:f"\ncommand = "x"\n',
            "agent 'a': command: only for kind = 'command'",
        ),
        (
            '[agents.a]\nkind = "python"\nfunction = "m:f"\nmax_turns = "3"\n',
            "agent 'a': max_turns: must be int",
        ),
        (
            '[agents.a]\nkind = "python"\nfunction = "m:f"\nconcurrency = 0\n',
            "agent 'a': concurrency: must be > 0",
        ),
        (
            '[agents.a]\nkind = "command"\ncommand = "x"\ncwd = "nowhere"\n',
            "agent 'a': cwd: no such folder",
        ),
        (
            '[agents.a]\nkind = "command"\ncommand = "echo \\"unterminated"\n',
            "agent 'a': command: cannot split 'echo \"unterminated' into arguments:"
            " No closing quotation",
        ),
        ('[agent.a]\nkind = "python"\n', "unknown top-level key 'agent'"),
        ("[agents.a\n", "not valid TOML"),
    ],
)
def test_agents_errors_name_file_agent_and_key(tmp_path, body, expected):
    path = _agents(tmp_path, body)
    message = _error(load_agents, path)
    assert str(path) in message
    assert expected in message


def test_upstream_keys_are_allowed_and_kept_raw(tmp_path):
    path = _agents(
        tmp_path,
        '[agents.a]\nkind = "python"\nfunction = "m:f"\nupstream = "http://x/v1"\n'
        'model = "q"\napi_key_env = "K"\nengine = "openai"\ntimeout_s = 5\nparams = { top_p = 0.9 }\n',
    )
    a = load_agents(path)["a"]
    assert a.upstream == {
        "upstream": "http://x/v1",
        "model": "q",
        "api_key_env": "K",
        "engine": "openai",
        "timeout_s": 5,
        "params": {"top_p": 0.9},
    }
    assert a.model == "q" and a.sampling == {"top_p": 0.9}


def test_missing_agents_file_is_a_config_error(tmp_path):
    message = _error(load_agents, tmp_path / "nope.toml")
    assert "nope.toml: no such file" in message


@pytest.mark.parametrize("load", [load_agents, load_datasets])
def test_unreadable_files_are_config_errors_naming_the_file(tmp_path, load):
    folder = tmp_path / "configs"
    folder.mkdir()
    assert _error(load, folder) == f"{folder}: is a folder, not a TOML file"
    latin1 = tmp_path / "latin1.toml"
    latin1.write_bytes(b'# caf\xc3\xa9\n[x.a]\ndescription = "caf\xe9"\n')
    assert _error(load, latin1) == (
        f"{latin1}: not valid TOML: line 3: byte 0xe9 is not UTF-8 (TOML files are)"
    )


def test_bad_module_function_is_reported_when_resolved(tmp_path, test_agents):
    for spec, expected in [
        ("no_such_module_xyz:f", "function: cannot import module 'no_such_module_xyz'"),
        (f"{test_agents}:missing", f"function: module '{test_agents}' has no attribute 'missing'"),
        (f"{test_agents}:NOT_CALLABLE", "is not callable"),
    ]:
        path = _agents(tmp_path, f'[agents.a]\nkind = "python"\nfunction = "{spec}"\n')
        agent = load_agents(path)["a"]
        message = _error(make_runner, agent, base_env={})
        assert f"{path}: agent 'a': " in message
        assert expected in message


def test_a_module_beside_the_config_file_resolves_from_any_folder(tmp_path, monkeypatch):
    # The installed `aw` script does not put the current folder on sys.path (only
    # `python -m` does): a newcomer's agent.py beside agents.toml did not import.
    monkeypatch.setattr(sys, "path", list(sys.path))
    write(tmp_path / "mine_beside_agent.py", "def solve(task, client):\n    return '2'\n")
    write(tmp_path / "mine_beside_score.py", "def score(answer, task):\n    return 1.0\n")
    agents = _agents(
        tmp_path,
        '[agents.a]\nkind = "python"\nfunction = "mine_beside_agent:solve"\n'
        '[agents.b]\nkind = "python"\nfunction = "mine_beside_nothing:solve"\n',
    )
    datasets = _datasets(
        tmp_path,
        '[datasets.d]\nsource = { type = "jsonl" }\nsplits = { test = "tasks.jsonl" }\n'
        'scorer = "mine_beside_score:score"\n',
    )
    monkeypatch.chdir(REPO)
    assert make_runner(load_agents(agents)["a"], base_env={}).fn.__name__ == "solve"
    make_scorer(load_datasets(datasets)["d"])
    message = _error(make_runner, load_agents(agents)["b"], base_env={})
    assert "cannot import module 'mine_beside_nothing'" in message
    assert f"looked in {tmp_path} (the folder of {agents.name}) and the installed packages" in (
        message
    )


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            '[datasets.d]\nsource = { type = "jsonl" }\nsplits = { test = "tasks.jsonl" }\ncolour = 1\n',
            "dataset 'd': colour: unknown key",
        ),
        (
            '[datasets.d]\nsource = { type = "jsonl" }\nsplits = { test = "missing.jsonl" }\n',
            "dataset 'd': splits.test: no such file",
        ),
        (  # once an OSError from the file system ("File name too long")
            '[datasets.d]\nsource = { type = "jsonl" }\nsplits = { test = "' + "x" * 300 + '" }\n',
            "dataset 'd': splits.test: cannot be read",
        ),
        (  # once a ModuleNotFoundError from looking for the package
            '[datasets.d]\nsource = { type = "jsonl" }\nsplits = { test = "pkg:nosuch.sub/t.jsonl" }\n',
            "dataset 'd': splits.test: no such file",
        ),
        (
            '[datasets.d]\nsource = { type = "csv" }\nsplits = { test = "tasks.jsonl" }\n',
            "dataset 'd': source.type: must be one of",
        ),
        (
            '[datasets.d]\nsource = { type = "jsonl", column = "q" }\nsplits = { test = "tasks.jsonl" }\n',
            "dataset 'd': source.column: unknown key",
        ),
        (
            '[datasets.d]\nsource = { type = "jsonl", fields = { question = "q" } }\nsplits = { test = "tasks.jsonl" }\n',
            "dataset 'd': source.fields.question: unknown key",
        ),
        (
            '[datasets.d]\nsource = { type = "jsonl" }\nsplits = { test = "tasks.jsonl" }\nscorer = "fuzzy"\n',
            "dataset 'd': scorer.type: must be one of",
        ),
        (
            '[datasets.d]\nsource = { type = "jsonl" }\nsplits = { test = "tasks.jsonl" }\nscorer = { type = "numeric", tol = 1 }\n',
            "dataset 'd': scorer.tol: unknown key",
        ),
        (
            '[datasets.d]\nsource = { type = "jsonl" }\nsplits = { test = "tasks.jsonl" }\nscorer = { type = "regex", pattern = "(" }\n',
            "dataset 'd': scorer.pattern: not a valid regular expression",
        ),
        (
            '[datasets.d]\nsource = { type = "jsonl" }\nsplits = { test = "tasks.jsonl" }\nscorer = "verifier"\n',
            "dataset 'd': scorer: 'verifier' needs a reasoning-gym source",
        ),
        (
            '[datasets.d]\nsource = { type = "jsonl" }\nsplits = { test = "tasks.jsonl" }\nscorer = { type = "python", function = "nocolon" }\n',
            "dataset 'd': scorer.function: must be 'module:function'",
        ),
        (
            '[datasets.d]\nsource = { type = "reasoning-gym", task = "basic_arithmetic" }\nsplits = { test = { size = 3 } }\n',
            "dataset 'd': splits.test: needs size and seed",
        ),
        (
            '[datasets.d]\nsource = { type = "reasoning-gym" }\nsplits = { test = { size = 3, seed = 1 } }\n',
            "dataset 'd': source.task: missing",
        ),
        (
            '[datasets.d]\nsource = { type = "jsonl" }\nsplits = {}\n',
            "dataset 'd': splits: missing or empty",
        ),
        (
            '[datasets.d]\nsource = { type = "jsonl" }\nsplits = { test = "tasks.jsonl" }\ndefault_split = "train"\n',
            "dataset 'd': default_split: 'train' is not one of the splits",
        ),
    ],
)
def test_datasets_errors_name_file_dataset_and_key(tmp_path, body, expected):
    path = _datasets(tmp_path, body)
    message = _error(load_datasets, path)
    assert str(path) in message
    assert expected in message


def test_bad_scorer_function_is_reported_when_resolved(tmp_path, test_agents):
    path = _datasets(
        tmp_path,
        '[datasets.d]\nsource = { type = "jsonl" }\nsplits = { test = "tasks.jsonl" }\n'
        f'scorer = "{test_agents}:nope"\n',
    )
    message = _error(make_scorer, load_datasets(path)["d"])
    assert (
        f"{path}: dataset 'd': scorer.function: module '{test_agents}' has no attribute 'nope'"
        in message
    )


def test_unknown_reasoning_gym_task_names_dataset(tmp_path):
    path = _datasets(
        tmp_path,
        '[datasets.d]\nsource = { type = "reasoning-gym", task = "no_such_task" }\n'
        "splits = { test = { size = 3, seed = 1 } }\n",
    )
    message = _error(load_tasks, load_datasets(path)["d"], None, None)
    assert f"{path}: dataset 'd': source: reasoning-gym rejected task 'no_such_task'" in message


def test_unknown_split_lists_the_splits(tmp_path):
    path = _datasets(
        tmp_path, '[datasets.d]\nsource = { type = "jsonl" }\nsplits = { test = "tasks.jsonl" }\n'
    )
    with pytest.raises(NotFoundError, match="no split 'train' \\(splits: test\\)"):
        load_datasets(path)["d"].split("train")


def test_an_unknown_agent_or_dataset_names_the_likely_one(tmp_path: Path) -> None:
    from agentworld.config import find
    from agentworld.errors import NotFoundError

    path = tmp_path / "agents.toml"
    with pytest.raises(NotFoundError) as info:
        find({"math": 1, "cli": 2}, "maths", "agent", path)
    assert str(info.value) == f"{path}: no agent 'maths'; did you mean 'math'? (known: cli, math)"
    with pytest.raises(NotFoundError) as info:
        find({"math": 1}, "gsm8k", "dataset", path)
    assert str(info.value) == f"{path}: no dataset 'gsm8k' (known: math)"
