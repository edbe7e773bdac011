"""Task sources (JSONL, Parquet, reasoning-gym, Python) and scorers."""

from __future__ import annotations

import json

import pytest
from aw_run_fakes import write

from agentworld.config import load_datasets
from agentworld.errors import ConfigError, CorruptDataError
from agentworld.run.scoring import last_number, make_scorer, score_exact, score_numeric, score_regex
from agentworld.run.tasks import Task, load_tasks


def _load(tmp_path, body, name="d"):
    return load_datasets(write(tmp_path / "datasets.toml", body))[name]


def test_jsonl_with_field_mapping_and_limit(tmp_path):
    rows = [{"qid": f"q{i}", "text": f"Q{i}", "gold": i, "extra": [1, 2]} for i in range(5)]
    write(tmp_path / "t.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n\n")
    d = _load(
        tmp_path,
        '[datasets.d]\nsource = { type = "jsonl", fields = { id = "qid", prompt = "text", answer = "gold" } }\n'
        'splits = { test = "t.jsonl" }\n',
    )
    tasks = load_tasks(d, None, 3)
    assert [(t.id, t.prompt, t.answer) for t in tasks] == [
        ("q0", "Q0", 0),
        ("q1", "Q1", 1),
        ("q2", "Q2", 2),
    ]
    assert tasks[0].metadata == {"extra": [1, 2]}
    assert tasks[0].public() == {"id": "q0", "prompt": "Q0", "dataset": "d", "split": "test"}


def test_a_split_without_tasks_is_an_error(tmp_path):
    # An empty (or all-blank) file ran "0 x 1" episodes and exited 0 without a word.
    write(tmp_path / "t.jsonl", "\n\n")
    d = _load(
        tmp_path, '[datasets.d]\nsource = { type = "jsonl" }\nsplits = { test = "t.jsonl" }\n'
    )
    with pytest.raises(ConfigError, match=r"dataset 'd': splits\.test: no tasks in .*t\.jsonl"):
        load_tasks(d, None)


def test_jsonl_errors_name_the_row(tmp_path):
    write(tmp_path / "t.jsonl", '{"question": "ok"}\nnot json\n')
    d = _load(
        tmp_path, '[datasets.d]\nsource = { type = "jsonl" }\nsplits = { test = "t.jsonl" }\n'
    )
    with pytest.raises(CorruptDataError, match=r"t\.jsonl:2"):
        load_tasks(d)
    write(tmp_path / "t.jsonl", '{"q": "no prompt column"}\n')
    with pytest.raises(
        ConfigError, match=r"dataset 'd': source\.fields\.prompt: no prompt text in .*row 1"
    ):
        load_tasks(d)
    write(tmp_path / "t.jsonl", '{"id": 1, "prompt": "a"}\n{"id": 1, "prompt": "b"}\n')
    with pytest.raises(ConfigError, match="task id '1' appears twice"):
        load_tasks(d)


def test_parquet_source(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(
        pa.table({"problem": ["Compute 1 + 2?", "Compute 2 + 2?"], "solution": ["3", "4"]}),
        tmp_path / "t.parquet",
    )
    d = _load(
        tmp_path, '[datasets.d]\nsource = { type = "parquet" }\nsplits = { train = "t.parquet" }\n'
    )
    tasks = load_tasks(d, "train")
    assert [(t.id, t.prompt, t.answer) for t in tasks] == [
        ("train-0", "Compute 1 + 2?", "3"),
        ("train-1", "Compute 2 + 2?", "4"),
    ]


def test_python_source_gets_split_and_kwargs(tmp_path, test_agents):
    d = _load(
        tmp_path,
        f'[datasets.d]\nsource = {{ type = "python", function = "{test_agents}:rows" }}\n'
        "splits = { train = { count = 3 }, test = {} }\n",
    )
    assert [t.id for t in load_tasks(d, "train")] == ["train-0", "train-1", "train-2"]
    assert [t.prompt for t in load_tasks(d, "test")] == ["Compute 0 + 1?", "Compute 1 + 1?"]
    bad = _load(
        tmp_path,
        f'[datasets.d]\nsource = {{ type = "python", function = "{test_agents}:rows_fail" }}\n'
        "splits = { test = {} }\n",
    )
    with pytest.raises(ConfigError, match=r"source\.function: .*rows_fail failed for split 'test'"):
        load_tasks(bad)


async def test_reasoning_gym_tasks_and_verifier(tmp_path):
    d = _load(
        tmp_path,
        '[datasets.d]\nsource = { type = "reasoning-gym", task = "basic_arithmetic" }\n'
        "splits = { train = { size = 50, seed = 1 }, test = { size = 50, seed = 2 } }\n",
    )
    train, test = load_tasks(d, "train", 4), load_tasks(d, "test", 4)
    assert len(train) == 4 and [t.prompt for t in train] != [t.prompt for t in test]
    assert load_tasks(d, "train", 4) == train  # seeded: the same tasks every time
    json.dumps([t.metadata for t in train])  # metadata is JSON-safe (reasoning-gym uses tuples)
    score = make_scorer(d)  # default scorer of a reasoning-gym source: its verifier
    t = train[0]
    assert await score(str(t.answer), t) == 1.0
    assert await score(f"  {t.answer}\n", t) == 1.0
    assert await score("definitely wrong", t) == 0.0
    assert await score(None, t) == 0.0


def test_builtin_scorers():
    assert last_number("so 1,234.5 apples, then 7") == 7.0
    assert last_number("pay $1,234.50") == 1234.5
    assert last_number("none") is None
    assert score_exact(" 42 \n", "42") == 1.0
    assert score_exact("Paris", "paris") == 0.0
    assert score_exact("Paris", "paris", ignore_case=True) == 1.0
    assert score_numeric("The answer is 100.0", "100") == 1.0
    assert score_numeric("The answer is 1,000", 1000) == 1.0
    assert score_numeric("99.9", "100") == 0.0
    assert score_numeric("99.9", "100", tolerance=0.2) == 1.0
    assert score_numeric("99", "100", relative_tolerance=0.02) == 1.0
    assert score_numeric("no number", "100") == 0.0
    assert score_regex("#### 17", "17", pattern=r"####\s*(\d+)") == 1.0
    assert score_regex("#### 18", "17", pattern=r"####\s*(\d+)") == 0.0
    assert score_regex("DONE", None, pattern="done", ignore_case=True) == 1.0
    assert score_regex("nothing", "17", pattern=r"####\s*(\d+)") == 0.0


def test_a_task_used_as_a_dict_says_which_attribute_to_use():
    # A newcomer's agent or scorer wrote task["prompt"], as for the JSON a command agent
    # reads, and got only "'Task' object is not subscriptable".
    task = Task(id="x", prompt="p", answer="a", metadata={"solution": "a", "level": 2})
    with pytest.raises(TypeError, match=r"a Task is not a dict: use task\.prompt"):
        task["prompt"]
    with pytest.raises(TypeError, match=r"use task\.metadata\['level'\]"):
        task["level"]
    with pytest.raises(TypeError, match=r"task\.id, task\.prompt, task\.answer, task\.metadata"):
        task["gold"]


async def test_python_scorer_sync_async_and_bad_return(tmp_path, test_agents):
    write(tmp_path / "t.jsonl", '{"prompt": "p", "answer": "a"}\n')
    task = Task(id="x", prompt="p", answer="a")
    for fn, answer, expected in [("score_half", "x", 0.5), ("score_len", "abcd", 4.0)]:
        d = _load(
            tmp_path,
            f'[datasets.d]\nsource = {{ type = "jsonl" }}\nsplits = {{ t = "t.jsonl" }}\nscorer = "{test_agents}:{fn}"\n',
        )
        assert await make_scorer(d)(answer, task) == expected
    d = _load(
        tmp_path,
        f'[datasets.d]\nsource = {{ type = "jsonl" }}\nsplits = {{ t = "t.jsonl" }}\nscorer = "{test_agents}:score_text"\n',
    )
    with pytest.raises(TypeError, match="returned str, not a number"):
        await make_scorer(d)("x", task)
