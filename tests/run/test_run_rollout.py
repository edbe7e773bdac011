"""`aw run` end to end against a fake proxy: agents, failures, scoring, groups, summary, Ctrl-C, CLI."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
from collections import Counter
from pathlib import Path

import pytest
import typer
from aw_run_fakes import CLI_AGENT, HERE, PYTHON, FakeProxy, tasks_jsonl, write
from rich.console import Console
from typer.testing import CliRunner

from agentworld.errors import ConfigError
from agentworld.pool import Pool
from agentworld.run.command import run as run_command
from agentworld.run.lifecycle import ProxyHTTPError, TrajectoryHandle
from agentworld.run.rollout import run_rollouts
from agentworld.run.session import RunOptions, run_session
from agentworld.run.summary import render
from agentworld.run.tasks import Task
from agentworld.seeds import derive

TASKS = [("Compute 2 + 3?", "5"), ("Compute 4 * 5?", "20"), ("Compute 7 - 1? WRONG", "6")]

# A command agent that reports what it was given: argv, stdin, environment.
PROBE = (
    "import json, os, sys; print(json.dumps({'argv': sys.argv[1:], 'stdin': json.load(sys.stdin),"
    " 'env': {k: os.environ.get(k) for k in ('OPENAI_BASE_URL', 'OPENAI_API_KEY',"
    " 'ANTHROPIC_BASE_URL', 'AW_TRAJECTORY', 'AW_TASK_ID', 'AW_MODEL', 'AW_MAX_TURNS', 'EXTRA')}}))"
)


def _setup(tmp_path: Path, agents: str, test_agents: str = "") -> tuple[Path, Path]:
    tasks_jsonl(tmp_path / "tasks.jsonl", TASKS)
    datasets = write(
        tmp_path / "datasets.toml",
        '[datasets.arith]\nsource = { type = "jsonl" }\nsplits = { test = "tasks.jsonl" }\n'
        'scorer = "numeric"\n',
    )
    agents_path = write(tmp_path / "agents.toml", agents.replace("TESTMOD", test_agents))
    return agents_path, datasets


def _opts(
    tmp_path: Path, proxy: FakeProxy, agents: Path, datasets: Path, agent: str, **kw
) -> RunOptions:
    return RunOptions(
        agent=agent,
        dataset="arith",
        agents_path=agents,
        datasets_path=datasets,
        proxy_url=proxy.url,
        pool=tmp_path / "pool",
        environ={"PATH": os.environ.get("PATH", "")},
        **kw,
    )


async def test_math_agent_rollouts_are_scored_grouped_and_completed(tmp_path, fake_proxy):
    agents, datasets = _setup(
        tmp_path,
        '[agents.math]\nkind = "python"\nfunction = "agentworld.run.agents.math_agent:solve"\n'
        'model = "tiny"\nparams = { temperature = 0.7 }\n',
    )
    report, summary = await run_session(_opts(tmp_path, fake_proxy, agents, datasets, "math", n=2))

    assert len(report.results) == 6 and not report.interrupted
    by_task = {r.task: [] for r in report.results}
    for r in report.results:
        by_task[r.task].append(r)
    assert {t: sorted(r.reward for r in rs) for t, rs in by_task.items()} == {
        "t0": [1.0, 1.0],
        "t1": [1.0, 1.0],
        "t2": [0.0, 0.0],  # the fake model answers WRONG prompts off by one
    }
    # One group per task, n trajectories in it.
    groups = {t: {r.group for r in rs} for t, rs in by_task.items()}
    assert (
        all(len(g) == 1 for g in groups.values()) and len({*map(frozenset, groups.values())}) == 3
    )
    assert sorted(r.rollout for r in by_task["t0"]) == [0, 1]
    # The proxy saw the lifecycle: create with agent/dataset/split/task/group, complete with reward.
    for r in report.results:
        created = fake_proxy.trajectories[r.trajectory]
        assert (created["agent"], created["dataset"], created["split"], created["task"]) == (
            "math",
            "arith",
            "test",
            r.task,
        )
        assert created["group"] == r.group and created["steps"] == 2
        done = fake_proxy.completed[r.trajectory]
        assert done["status"] == "done" and done["reward"] == r.reward
        assert 0 < done["wait_s"] < 30  # the end may wait for a call: not past the client's timeout
        assert done["metadata"]["ended_by"] == "tool" and done["metadata"]["answer"] == r.answer
    assert summary["reward_mean"] == pytest.approx(2 / 3)
    assert summary["success_rate"] == pytest.approx(2 / 3)
    assert summary["turns_mean"] == 2.0  # calculator call, then final_answer
    assert (summary["prompt_tokens"], summary["completion_tokens"]) == (120, 60)
    assert summary["by_group_size"] == [
        {
            "group_size": 2,
            "groups": 3,
            "reward_mean": pytest.approx(2 / 3),
            "reward_std": pytest.approx(0.4714, abs=1e-4),
            "within_group_std": 0.0,
            "flat_groups": 3,
        }
    ]
    assert summary["errors"] == 0 and summary["statuses"] == {"done": 6}
    # The end records are in the pool with their rewards.
    pool = Pool.open(tmp_path / "pool")
    ends = [rec for rec in pool.iter_records() if rec["kind"] == "end"]
    assert sorted(e["reward"] for e in ends) == [0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    pool.close()


@pytest.mark.slow
async def test_unmodified_openai_sdk_program_runs_as_a_command_agent(tmp_path, fake_proxy):
    agents, datasets = _setup(
        tmp_path,
        f'[agents.cli]\nkind = "command"\ncommand = ["{PYTHON}", "{CLI_AGENT}"]\nmodel = "tiny"\n',
    )
    report, summary = await run_session(_opts(tmp_path, fake_proxy, agents, datasets, "cli"))
    assert sorted((r.task, r.status, r.answer, r.reward) for r in report.results) == [
        ("t0", "done", "5", 1.0),
        ("t1", "done", "20", 1.0),
        ("t2", "done", "7", 0.0),
    ]
    assert summary["turns_mean"] == 1.0


async def test_command_agent_gets_trajectory_urls_task_and_argv_template(tmp_path, fake_proxy):
    agents, datasets = _setup(
        tmp_path,
        f'[agents.probe]\nkind = "command"\ncommand = ["{PYTHON}", "-c", "{PROBE}", "{{task_id}}", '
        '"{prompt}"]\nenv = { EXTRA = "x" }\nmodel = "tiny"\nmax_turns = 3\n'.replace(
            "{PROBE}", PROBE.replace('"', '\\"')
        ),
    )
    report, _ = await run_session(
        _opts(tmp_path, fake_proxy, agents, datasets, "probe", limit=1, proxy_token="tok")
    )
    (r,) = report.results
    seen = json.loads(r.answer)
    assert seen["argv"] == ["t0", "Compute 2 + 3?"]
    assert seen["stdin"] == {
        "id": "t0",
        "prompt": "Compute 2 + 3?",
        "dataset": "arith",
        "split": "test",
    }
    assert seen["env"] == {
        "OPENAI_BASE_URL": f"{fake_proxy.url}/t/{r.trajectory}/v1",
        "OPENAI_API_KEY": "tok",
        "ANTHROPIC_BASE_URL": f"{fake_proxy.url}/t/{r.trajectory}",
        "AW_TRAJECTORY": r.trajectory,
        "AW_TASK_ID": "t0",
        "AW_MODEL": "tiny",
        "AW_MAX_TURNS": "3",
        "EXTRA": "x",
    }
    assert set(fake_proxy.seen_auth) == {"Bearer tok"}


async def test_answer_file_wins_over_stdout(tmp_path, fake_proxy):
    code = "import os; print('noise'); open(os.environ['AW_ANSWER_FILE'], 'w').write(' 5 ')"
    agents, datasets = _setup(
        tmp_path, f'[agents.f]\nkind = "command"\ncommand = ["{PYTHON}", "-c", "{code}"]\n'
    )
    report, _ = await run_session(_opts(tmp_path, fake_proxy, agents, datasets, "f", limit=1))
    assert [(r.answer, r.reward) for r in report.results] == [("5", 1.0)]


async def test_crashing_and_hanging_agents_fail_their_own_trajectory_only(
    tmp_path, fake_proxy, test_agents
):
    pid_file = tmp_path / "pids"
    hang_code = f"import os, time; open({str(pid_file)!r}, 'a').write(str(os.getpid()) + chr(10)); time.sleep(60)"
    agents, datasets = _setup(
        tmp_path,
        '[agents.odd]\nkind = "python"\nfunction = "TESTMOD:crash_on_odd"\n'
        '[agents.hang]\nkind = "python"\nfunction = "TESTMOD:hang"\nepisode_timeout_s = 0.5\n'
        '[agents.hang_sync]\nkind = "python"\nfunction = "TESTMOD:hang_sync"\nepisode_timeout_s = 0.5\n'
        f'[agents.exit3]\nkind = "command"\ncommand = ["{PYTHON}", "-c", "import sys; sys.stderr.write(\'bad thing\'); sys.exit(3)"]\n'
        f'[agents.cmdhang]\nkind = "command"\ncommand = ["{PYTHON}", "-c", "{hang_code}"]\nepisode_timeout_s = 1\n'
        '[agents.missing]\nkind = "command"\ncommand = ["/no/such/program"]\n',
        test_agents,
    )

    report, summary = await run_session(_opts(tmp_path, fake_proxy, agents, datasets, "odd"))
    assert sorted((r.task, r.status) for r in report.results) == [
        ("t0", "done"),
        ("t1", "failed"),
        ("t2", "done"),
    ]
    failed = next(r for r in report.results if r.status == "failed")
    module = HERE / "aw_run_test_agents.py"
    line_no = next(
        n for n, text in enumerate(module.read_text().splitlines(), 1) if '"odd task"' in text
    )
    odd_task = f"odd task (at {module}:{line_no})"  # what, and where
    assert failed.error == {"type": "ValueError", "message": odd_task}
    assert fake_proxy.completed[failed.trajectory]["status"] == "failed"
    assert fake_proxy.completed[failed.trajectory]["error"]["message"] == odd_task
    assert summary["errors"] == 1 and summary["error_types"] == {"ValueError": 1}
    assert summary["error_example"] == odd_task  # what went wrong, in words
    console = Console(width=120, record=True, file=io.StringIO())
    console.print(render(summary))
    (line,) = [line for line in console.export_text().splitlines() if "e.g." in line]
    assert "odd task" in line
    assert summary["success_rate"] == pytest.approx(2 / 3)  # t0 and t2 answer right

    for agent, status, kind in [
        ("hang", "timeout", "timeout"),
        ("hang_sync", "timeout", "timeout"),
        ("exit3", "failed", "exit"),
        ("cmdhang", "timeout", "timeout"),
        ("missing", "failed", "spawn"),
    ]:
        report, _ = await run_session(
            _opts(tmp_path, fake_proxy, agents, datasets, agent, limit=2, concurrency=2)
        )
        assert [(r.status, r.error["type"]) for r in report.results] == [(status, kind)] * 2, agent
        for r in report.results:
            assert fake_proxy.completed[r.trajectory]["status"] == status
    exit3 = [c for c in fake_proxy.completed.values() if "exit status 3" in str(c.get("error"))]
    assert exit3 and "bad thing" in exit3[0]["error"]["message"]
    # The hung programs were killed, not left behind.
    for pid in map(int, pid_file.read_text().split()):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


async def test_sync_and_two_argument_python_agents(tmp_path, fake_proxy, test_agents):
    agents, datasets = _setup(
        tmp_path,
        '[agents.sync]\nkind = "python"\nfunction = "TESTMOD:sync_agent"\n'
        '[agents.two]\nkind = "python"\nfunction = "TESTMOD:two_args"\n',
        test_agents,
    )
    report, _ = await run_session(_opts(tmp_path, fake_proxy, agents, datasets, "sync"))
    assert sorted((r.task, r.reward) for r in report.results) == [
        ("t0", 1.0),
        ("t1", 1.0),
        ("t2", 0.0),
    ]
    report, _ = await run_session(_opts(tmp_path, fake_proxy, agents, datasets, "two", limit=1))
    (r,) = report.results
    assert r.reward == 1.0
    assert fake_proxy.completed[r.trajectory]["metadata"]["style"] == "two-args"


async def test_the_end_record_keeps_the_reference_answer_apart_from_the_agents(
    tmp_path, fake_proxy, test_agents
):
    agents, datasets = _setup(
        tmp_path,
        '[agents.liar]\nkind = "python"\nfunction = "TESTMOD:claims_ground_truth"\n',
        test_agents,
    )
    report, _ = await run_session(_opts(tmp_path, fake_proxy, agents, datasets, "liar"))
    completed = {r.task: fake_proxy.completed[r.trajectory]["metadata"] for r in report.results}
    # The dataset's answers, never the agent's: verl's export reads this as the ground truth.
    assert {t: m["ground_truth"] for t, m in completed.items()} == {
        "t0": "5",
        "t1": "20",
        "t2": "6",
    }
    assert {m["answer"] for m in completed.values()} == {"41"}


async def test_a_failing_scorer_fails_the_trajectory(tmp_path, fake_proxy, test_agents):
    agents, _ = _setup(
        tmp_path, '[agents.b]\nkind = "python"\nfunction = "agentworld.run.agents.baseline:solve"\n'
    )
    datasets = write(
        tmp_path / "datasets.toml",
        '[datasets.arith]\nsource = { type = "jsonl" }\nsplits = { test = "tasks.jsonl" }\n'
        f'scorer = "{test_agents}:score_broken"\n',
    )
    report, summary = await run_session(_opts(tmp_path, fake_proxy, agents, datasets, "b", limit=1))
    (r,) = report.results
    assert (r.status, r.reward, r.error["type"]) == ("failed", None, "scorer")
    # Where in the user's own code it raised, not only what.
    assert re.search(r"^KeyError: 'oops' \(at \S*aw_run_test_agents\.py:\d+\)$", r.error["message"])
    assert fake_proxy.completed[r.trajectory]["status"] == "failed"
    assert summary["reward_mean"] is None


async def test_a_crashing_python_agent_names_where_it_raised(tmp_path, fake_proxy, test_agents):
    agents, datasets = _setup(
        tmp_path, '[agents.a]\nkind = "python"\nfunction = "TESTMOD:crash"\n', test_agents
    )
    report, _ = await run_session(_opts(tmp_path, fake_proxy, agents, datasets, "a", limit=1))
    (r,) = report.results
    assert (r.status, r.error["type"]) == ("failed", "RuntimeError")
    assert re.search(r"^boom on \S+ \(at \S*aw_run_test_agents\.py:\d+\)$", r.error["message"])


async def test_cancelling_the_run_keeps_finished_trajectories(tmp_path, fake_proxy, test_agents):
    agents, datasets = _setup(
        tmp_path,
        '[agents.slow]\nkind = "python"\nfunction = "TESTMOD:wait_forever_after_first"\n',
        test_agents,
    )
    run = asyncio.create_task(run_session(_opts(tmp_path, fake_proxy, agents, datasets, "slow")))
    for _ in range(400):  # until the first episode is completed and the others are running
        if len(fake_proxy.completed) == 1 and len(fake_proxy.trajectories) == 3:
            break
        await asyncio.sleep(0.025)
    run.cancel()  # maybe while a create call is still being answered: see the next test
    report, summary = await run
    assert report.interrupted and summary["interrupted"]
    statuses = {
        fake_proxy.trajectories[t]["task"]: c["status"] for t, c in fake_proxy.completed.items()
    }
    assert statuses == {"t0": "done", "t1": "cancelled", "t2": "cancelled"}
    assert Counter(r.status for r in report.results) == {"done": 1, "cancelled": 2}
    assert "interrupted" in str(render(summary).title)


async def test_a_run_cancelled_while_the_proxy_opens_a_trajectory_still_ends_it(
    tmp_path, fake_proxy, test_agents
):
    """The runner names its trajectories, so a create call it gave up on is ended too."""
    agents, datasets = _setup(
        tmp_path,
        '[agents.slow]\nkind = "python"\nfunction = "TESTMOD:wait_forever_after_first"\n',
        test_agents,
    )
    fake_proxy.create_delay_s = 30.0  # every create call is opened, then hangs
    run = asyncio.create_task(run_session(_opts(tmp_path, fake_proxy, agents, datasets, "slow")))
    for _ in range(400):
        if len(fake_proxy.trajectories) == 3:
            break
        await asyncio.sleep(0.025)
    assert len(fake_proxy.trajectories) == 3 and not fake_proxy.completed
    run.cancel()
    report, _ = await run
    assert report.interrupted
    assert {c["status"] for c in fake_proxy.completed.values()} == {"cancelled"}
    assert fake_proxy.completed.keys() == fake_proxy.trajectories.keys()
    assert sorted(r.trajectory for r in report.results) == sorted(fake_proxy.trajectories)


class SlowToEndProxy:
    """A lifecycle client whose complete calls take a while, the later ones longer."""

    def __init__(self) -> None:
        self.created: list[str] = []
        self.completed: dict[str, str] = {}
        self.ending = 0

    async def create_trajectory(
        self, *, trajectory: str | None = None, **_: object
    ) -> TrajectoryHandle:
        trajectory = trajectory or f"tr_{len(self.created)}"
        self.created.append(trajectory)
        return TrajectoryHandle(trajectory, "http://proxy/v1", "http://proxy")

    async def complete(self, trajectory: str, *, status: str, **_: object) -> dict:
        self.ending += 1
        await asyncio.sleep(0.05 * self.ending)
        self.completed[trajectory] = status
        return {}


class NeverDone:
    async def run(self, task: Task, handle: TrajectoryHandle) -> object:
        await asyncio.sleep(3600)


def endless_run(proxy: object, tasks: int) -> asyncio.Task:
    """``run_rollouts`` of episodes that never finish, all at once, through ``proxy``."""

    async def score(answer: str | None, task: Task) -> float:
        return 0.0

    return asyncio.create_task(
        run_rollouts(
            proxy=proxy,  # type: ignore[arg-type]
            runner=NeverDone(),  # type: ignore[arg-type]
            scorer=score,
            agent="a",
            dataset="d",
            split="test",
            tasks=[Task(f"t{i}", "?") for i in range(tasks)],
            concurrency=tasks,
        )
    )


async def test_a_cancelled_run_lets_every_episode_finish_ending_its_trajectory():
    """The first episode to end must not cut the others' complete calls short."""
    proxy = SlowToEndProxy()
    run = endless_run(proxy, 3)
    for _ in range(200):
        if len(proxy.created) == 3:
            break
        await asyncio.sleep(0.01)
    run.cancel()
    report = await run
    assert report.interrupted
    assert proxy.completed == dict.fromkeys(proxy.created, "cancelled")
    assert sorted(r.trajectory for r in report.results) == sorted(proxy.created)


class NeverOpensProxy(SlowToEndProxy):
    """Its create calls never arrive; it knows no trajectory to complete (the proxy's 404)."""

    async def create_trajectory(self, **_: object) -> TrajectoryHandle:
        self.created.append("asked")
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    async def complete(self, trajectory: str, **_: object) -> dict:
        raise ProxyHTTPError(f"no trajectory {trajectory}", 404)


async def test_a_create_call_that_never_reached_the_proxy_leaves_no_trajectory(caplog):
    proxy = NeverOpensProxy()
    run = endless_run(proxy, 1)
    for _ in range(200):
        if proxy.created:
            break
        await asyncio.sleep(0.01)
    run.cancel()
    report = await run
    [result] = report.results
    assert result.status == "cancelled" and result.trajectory is None
    assert "could not end" not in caplog.text  # a 404 here is expected, not a warning


async def test_in_process_proxy_needs_an_upstream(tmp_path, test_agents):
    agents, datasets = _setup(
        tmp_path, '[agents.a]\nkind = "python"\nfunction = "TESTMOD:crash"\n', test_agents
    )
    opts = RunOptions(
        agent="a",
        dataset="arith",
        agents_path=agents,
        datasets_path=datasets,
        pool=tmp_path / "pool",
    )
    with pytest.raises(
        ConfigError, match=r"agent 'a': upstream: required to start a proxy in-process"
    ):
        await run_session(opts)


def _cli() -> typer.Typer:
    app = typer.Typer()
    app.command("run")(run_command)
    app.command("noop", hidden=True)(lambda: None)  # keep `run` a subcommand
    return app


def test_cli_prints_a_summary_table_or_json(tmp_path, fake_proxy):
    agents, datasets = _setup(
        tmp_path, '[agents.b]\nkind = "python"\nfunction = "agentworld.run.agents.baseline:solve"\n'
    )
    args = [
        "run", "--agent", "b", "--dataset", "arith", "--proxy", fake_proxy.url,
        "--pool", str(tmp_path / "pool"), "--agents", str(agents), "--datasets", str(datasets),
        "-n", "2",
    ]  # fmt: skip
    result = CliRunner().invoke(_cli(), [*args, "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["trajectories"], summary["reward_mean"]) == (6, pytest.approx(2 / 3))
    assert summary["by_group_size"][0]["group_size"] == 2

    result = CliRunner().invoke(_cli(), args)
    assert result.exit_code == 0, result.output
    for text in (
        "aw run: b on arith/test",
        "reward mean ± std",
        "groups of 2",
        "66.7%",
        "wall time",
    ):
        assert text in result.stdout


def test_cli_warns_of_episodes_that_called_no_model_or_gave_no_answer(tmp_path, fake_proxy):
    """A command agent that prints nothing, or calls its model server directly instead of
    $OPENAI_BASE_URL, ended "done" with reward 0 and nothing recorded, without a word."""
    silent = f'[agents.silent]\nkind = "command"\ncommand = ["{PYTHON}", "-c", "pass"]\n'
    agents, datasets = _setup(
        tmp_path,
        silent + '[agents.b]\nkind = "python"\nfunction = "agentworld.run.agents.baseline:solve"\n',
    )
    args = [
        "run", "--dataset", "arith", "--proxy", fake_proxy.url,
        "--pool", str(tmp_path / "pool"), "--agents", str(agents), "--datasets", str(datasets),
    ]  # fmt: skip
    result = CliRunner().invoke(_cli(), [*args, "--agent", "silent", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["no_model_calls"], summary["empty_answers"]) == (3, 3)
    assert (
        "warning: 3 of 3 done episodes made no model call through the proxy: nothing of "
        "them is recorded to train on"
    ) in result.stderr
    assert "$OPENAI_BASE_URL" in result.stderr
    assert "warning: 3 of 3 done episodes gave an empty answer" in result.stderr
    assert "prints its answer on stdout or writes it to $AW_ANSWER_FILE" in result.stderr

    result = CliRunner().invoke(_cli(), [*args, "--agent", "b", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["no_model_calls"] == 0
    assert "warning" not in result.stderr


def test_cli_exits_1_when_every_episode_failed(tmp_path, fake_proxy):
    """Every episode of a crashing agent failed and `aw run` exited 0, so a script's
    `aw run ... && aw train ...` went on as if it had rollouts. One failure among
    successes is still a run that worked."""
    crash = (
        f'[agents.crash]\nkind = "command"\ncommand = ["{PYTHON}", "-c", "raise SystemExit(3)"]\n'
    )
    agents, datasets = _setup(tmp_path, crash)
    args = [
        "run", "--agent", "crash", "--dataset", "arith", "--proxy", fake_proxy.url,
        "--pool", str(tmp_path / "pool"), "--agents", str(agents), "--datasets", str(datasets),
    ]  # fmt: skip
    result = CliRunner().invoke(_cli(), args)
    assert result.exit_code == 1, result.output
    assert "aw: error: every episode failed (3 of 3): the summary's errors say why" in (
        result.stderr
    )
    assert "errors" in result.stdout  # the summary is printed first


def test_cli_seed_opens_each_episode_with_its_own_seed(tmp_path, fake_proxy):
    """--seed S: each trajectory opens with derive(S, task, rollout) (the proxy seeds its
    calls from it), the end record's metadata names it; without --seed, none is sent."""
    agents, datasets = _setup(
        tmp_path, '[agents.b]\nkind = "python"\nfunction = "agentworld.run.agents.baseline:solve"\n'
    )
    args = [
        "run", "--agent", "b", "--dataset", "arith", "--proxy", fake_proxy.url,
        "--pool", str(tmp_path / "pool"), "--agents", str(agents), "--datasets", str(datasets),
        "-n", "2",
    ]  # fmt: skip
    result = CliRunner().invoke(_cli(), [*args, "--seed", "9"])
    assert result.exit_code == 0, result.output
    opened = list(fake_proxy.trajectories.values())
    assert len(opened) == 6
    expected = {derive(9, t["task"], t["metadata"]["rollout"]) for t in opened}
    assert {t["seed"] for t in opened} == expected and len(expected) == 6
    for tid, t in fake_proxy.trajectories.items():
        assert fake_proxy.completed[tid]["metadata"]["seed"] == t["seed"]
    fake_proxy.trajectories.clear()
    result = CliRunner().invoke(_cli(), args)
    assert result.exit_code == 0, result.output
    assert not any("seed" in t for t in fake_proxy.trajectories.values())
    bad = CliRunner().invoke(_cli(), [*args, "--seed", "-1"])
    assert bad.exit_code == 2 and "--seed" in bad.output


def test_cli_config_errors_surface_as_agentworld_errors(tmp_path):
    agents, datasets = _setup(
        tmp_path, '[agents.b]\nkind = "python"\nfunction = "m:f"\nturns = 1\n'
    )
    args = ["run", "-a", "b", "-d", "arith", "--agents", str(agents), "--datasets", str(datasets)]
    result = CliRunner().invoke(_cli(), args)
    assert isinstance(result.exception, ConfigError)
    assert f"{agents}: agent 'b': turns: unknown key" in str(result.exception)


async def test_in_process_proxy_records_a_real_run(tmp_path):
    """With the real proxy (branch proxy) and its fake vLLM upstream: no --proxy given."""
    pytest.importorskip("agentworld.proxy.inprocess")
    from aiohttp.test_utils import TestServer

    from agentworld.proxy.fake_upstream import FakeUpstream, make_fake_app

    upstream = TestServer(
        make_fake_app(FakeUpstream("u", reply="Final answer: 5")), host="127.0.0.1"
    )
    await upstream.start_server()
    try:
        url = str(upstream.make_url("")).rstrip("/")
        agents, datasets = _setup(
            tmp_path,
            '[agents.b]\nkind = "python"\nfunction = "agentworld.run.agents.baseline:solve"\n'
            f'upstream = "{url}"\nmodel = "fake-model"\n',
        )
        opts = RunOptions(
            agent="b", dataset="arith", agents_path=agents, datasets_path=datasets,
            pool=tmp_path / "pool", n=2,
        )  # fmt: skip
        report, summary = await run_session(opts)
    finally:
        await upstream.close()
    assert sorted((r.task, r.status, r.reward) for r in report.results) == [
        ("t0", "done", 1.0), ("t0", "done", 1.0), ("t1", "done", 0.0),
        ("t1", "done", 0.0), ("t2", "done", 0.0), ("t2", "done", 0.0),
    ]  # fmt: skip
    assert summary["turns_mean"] == 1.0 and summary["completion_tokens"] > 0
    pool = Pool.open(tmp_path / "pool")
    recs = list(pool.iter_records())
    pool.close()
    ends = {r["trajectory"]: r for r in recs if r["kind"] == "end"}
    steps = [r for r in recs if r["kind"] == "step"]
    assert len(ends) == 6 and len(steps) == 6
    assert {(s["agent"], s["dataset"], s["split"]) for s in steps} == {("b", "arith", "test")}
    assert all(ends[s["trajectory"]]["group"] == s["group"] for s in steps)


async def test_summary_counts_what_a_running_proxy_has_not_written_out_yet(tmp_path):
    """A running `aw proxy` commits in batches: the summary waits until the run's end records
    are readable, so turns and tokens are what the pool holds (no half counts)."""
    pytest.importorskip("agentworld.proxy.inprocess")
    from aiohttp.test_utils import TestServer

    from agentworld.proxy.config import ProxyConfig, UpstreamConfig
    from agentworld.proxy.fake_upstream import FakeUpstream, make_fake_app
    from agentworld.proxy.inprocess import ProxyServer

    upstream = TestServer(
        make_fake_app(FakeUpstream("u", reply="Final answer: 5")), host="127.0.0.1"
    )
    await upstream.start_server()
    url = str(upstream.make_url("")).rstrip("/")
    agents, datasets = _setup(
        tmp_path,
        '[agents.b]\nkind = "python"\nfunction = "agentworld.run.agents.baseline:solve"\n'
        'model = "fake-model"\n',
    )
    Pool.create(tmp_path / "pool").close()
    # A long batch window: without waiting, the summary reads before anything is written.
    config = ProxyConfig(default_upstream=UpstreamConfig.single(url), commit_interval_s=1.5)
    try:
        async with ProxyServer(config, tmp_path / "pool", host="127.0.0.1", port=0) as proxy:
            opts = RunOptions(
                agent="b", dataset="arith", agents_path=agents, datasets_path=datasets,
                pool=tmp_path / "pool", n=2, proxy_url=proxy.url,
            )  # fmt: skip
            _, summary = await run_session(opts)
    finally:
        await upstream.close()
    pool = Pool.open(tmp_path / "pool")
    steps = [r for r in pool.iter_records() if r["kind"] == "step"]
    pool.close()
    assert len(steps) == 6 and summary["turns_mean"] == 1.0
    usage = [s["response"]["usage"] for s in steps]
    assert summary["prompt_tokens"] == sum(u["prompt_tokens"] for u in usage) > 0
    assert summary["completion_tokens"] == sum(u["completion_tokens"] for u in usage) > 0


def test_cli_takes_a_proxy_url_ending_in_v1_and_refuses_one_without_scheme(tmp_path, fake_proxy):
    """An agent's base URL pasted as --proxy (…/v1/) reaches the proxy; host:port alone is
    refused, naming the flag and an example."""
    from agentworld.errors import ConfigError
    from agentworld.run.lifecycle import proxy_base

    agents, datasets = _setup(
        tmp_path, '[agents.b]\nkind = "python"\nfunction = "agentworld.run.agents.baseline:solve"\n'
    )
    args = [
        "run", "--agent", "b", "--dataset", "arith", "--proxy", fake_proxy.url + "/v1/",
        "--pool", str(tmp_path / "pool"), "--agents", str(agents), "--datasets", str(datasets),
        "-n", "2", "--json",
    ]  # fmt: skip
    result = CliRunner().invoke(_cli(), args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["trajectories"] == 6
    assert proxy_base("http://h:8000/v1") == proxy_base("http://h:8000/") == "http://h:8000"
    with pytest.raises(ConfigError, match=r"--proxy: 'localhost:8000' is not an http\(s\) URL"):
        proxy_base("localhost:8000")
