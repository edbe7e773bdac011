"""Small deterministic pools for the TUI tests (fixed ids and times, so snapshots are stable)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentworld import records
from agentworld.pool import Pool
from agentworld.tui.app import AgentWorldApp, make_app
from agentworld.tui.data import TuiConfig

T0 = 1_790_000_000.0  # a fixed "now" for the monitor's rate window
MARKUP = "[bold]not bold[/bold] [link=http://x]x[/link] \x1b[31mred?"


def step(
    tid: str,
    i: int,
    *,
    group: str,
    agent: str = "coder",
    dataset: str = "gsm8k",
    content: str | None = None,
    t: float = T0 - 30,
    pv: int = 1,
    error: bool = False,
    prompt_ids: list[int] | None = None,
) -> dict:
    msgs = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": f"What is {i} + {i}? ({tid})"},
    ]
    response = {
        "message": {
            "role": "assistant",
            "content": content if content is not None else f"The answer is {2 * i}.",
            "reasoning": "add the numbers",
            "tool_calls": [{"id": "c1", "name": "calc", "arguments": '{"a": 1, "b": 2}'}]
            if i == 0
            else None,
        },
        "finish_reason": "stop",
        "usage": {"prompt_tokens": 10, "completion_tokens": 3},
    }
    response["message"] = {k: v for k, v in response["message"].items() if v is not None}
    prompt = prompt_ids if prompt_ids is not None else [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    return records.make_step(
        id=f"st_{tid}_{i}",
        trajectory=tid,
        index=i,
        agent=agent,
        dataset=dataset,
        group=group,
        task=group,
        policy_version=pv,
        timings={
            "started_at": t + i,
            "ended_at": t + i + 0.5,
            "first_token_s": 0.1,
            "upstream_s": 0.4,
        },
        request={"model": "tiny", "messages": msgs},
        response=None if error else response,
        status="error" if error else "ok",
        error={"type": "upstream", "message": "boom [red]x[/red]"} if error else None,
        tokens={
            "source": "engine",
            "prompt_ids": prompt,
            "completion_ids": [11, 12, 13],
            "completion_logprobs": [-0.01, -0.7, -3.0],
        },
    )


def build_pool(path: Path) -> Pool:
    """Two groups of three trajectories, two steps each; one failed; one with markup content."""
    pool = Pool.create(path)
    w = pool.writer(name="test")
    n = 0
    for g, agent in (("grp-a", "coder"), ("grp-b", "solver")):
        for k in range(3):
            tid = f"tr_{g}_{k}"
            t = T0 - 100 + 10 * n
            n += 1
            content = MARKUP if (g, k) == ("grp-a", 0) else None
            w.append(step(tid, 0, group=g, agent=agent, t=t, content=content))
            # The second prompt continues the first (prompt + completion) except in grp-b/1.
            p2 = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 20, 21]
            if (g, k) == ("grp-b", 1):
                p2 = [1, 2, 3, 99, 5, 6, 7, 8, 9, 10, 11, 12, 13, 20, 21]
            w.append(
                step(tid, 1, group=g, agent=agent, t=t, prompt_ids=p2, error=(g, k) == ("grp-b", 2))
            )
            w.append(
                records.make_end(
                    id=f"en_{tid}",
                    trajectory=tid,
                    agent=agent,
                    dataset="gsm8k",
                    group=g,
                    task=g,
                    status="failed" if (g, k) == ("grp-b", 2) else "done",
                    steps=2,
                    reward=[1.0, 0.0, 0.5][k],
                    policy_version=1,
                    ended_at=t + 5,
                )
            )
    w.close()
    return pool


def write_pool(path: Path, recs: list[dict]) -> Path:
    """A new pool holding ``recs``, indexed (see ``pool_path``); its path."""
    pool = Pool.create(path)
    w = pool.writer(name="test")
    for rec in recs:
        w.append(rec)
    w.close()
    pool.index()
    pool.close()
    return path


@pytest.fixture
def pool_path(tmp_path: Path) -> Path:
    path = tmp_path / "pool"
    pool = build_pool(path)
    # Index up front: the app's first refresh then finds nothing new, so no reload
    # can move the cursor between a test's key press and its check.
    pool.index()
    pool.close()
    return path


@pytest.fixture
def started_with(monkeypatch: pytest.MonkeyPatch) -> dict:
    """What `aw tui` hands ``make_app`` (its keyword arguments), the app itself not run."""
    from agentworld.tui import app as app_module

    seen: dict = {}

    class NotRun:
        def run(self) -> None:
            pass

    def fake_make_app(config: TuiConfig, **kw: object) -> NotRun:
        seen.update(kw)
        return NotRun()

    monkeypatch.setattr(app_module, "make_app", fake_make_app)
    return seen


def app_for(pool_path: Path, *, start: str = "trajectories", **kw) -> AgentWorldApp:
    config = TuiConfig(
        str(pool_path),
        "tester",
        proxy_url=kw.pop("proxy_url", None),
        runs_path=str(kw.pop("runs_path", pool_path.parent / "runs")),
    )
    return make_app(config, start=start, clock=lambda: T0, **kw)


def write_run(folder: Path, rows: list[dict]) -> Path:
    """A training run folder as `aw train` leaves it: metrics.jsonl, one row per update."""
    import json

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def run_rows(n: int, **extra: float) -> list[dict]:
    """``n`` updates of made-up but plausible numbers (fixed: snapshots stay stable)."""
    return [
        {
            "step": s,
            "loss": round(1.0 / s, 4),
            "reward_mean": round(0.2 + 0.1 * s, 3),
            "kl": round(0.001 * s, 4),
            "clip_frac": round(0.05 * (s % 3), 3),
            "tokens_per_s": 100.0 + 5 * s,
            "policy_version": s,
            **extra,
        }
        for s in range(1, n + 1)
    ]
