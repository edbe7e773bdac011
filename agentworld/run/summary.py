"""The end-of-run summary: rewards per group size, success rate, turns, tokens, errors, wall time.

Turns and tokens come from the pool (the proxy recorded every call there);
without a readable pool they are shown as unknown.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text

from agentworld.run.rollout import RunReport


@dataclass(frozen=True)
class TrajectoryStats:
    """What the pool knows about one trajectory."""

    steps: int
    prompt_tokens: int
    completion_tokens: int


def pool_stats(
    pool_path: Path,
    trajectory_ids: list[str],
    *,
    ended: Collection[str] = (),
    wait_s: float = 10.0,
    poll_s: float = 0.05,
) -> dict[str, TrajectoryStats] | None:
    """Step and token counts per trajectory from the pool's index; None when there is no pool.

    A running `aw proxy` acknowledges an end record before its group commit writes it
    out (``commit_interval_s``, batched durability), so the pool is read once the end
    records of ``ended`` (the trajectories the proxy said it closed) are readable, or after
    ``wait_s``: read at once, a run of one-step trajectories showed 0.5 turns each.
    """
    from agentworld.errors import AgentWorldError
    from agentworld.pool.opener import open_pool
    from agentworld.pool.remote_store import remote_url

    if remote_url(pool_path) is None and not (pool_path / "POOL.toml").exists():
        return None
    try:
        pool = open_pool(pool_path, recover=False)
    except AgentWorldError:
        return None
    try:
        deadline = time.monotonic() + wait_s
        while True:
            idx = pool.index()  # incremental: the journals' new tails only
            rows = {tid: idx.trajectory(tid) for tid in trajectory_ids}
            waiting = [t for t in ended if (rows.get(t) or {}).get("status", "open") == "open"]
            if not waiting or time.monotonic() >= deadline:
                break
            time.sleep(poll_s)
        out = {}
        for tid, row in rows.items():
            if row is None:  # no step recorded: the agent never called the model
                out[tid] = TrajectoryStats(0, 0, 0)
            else:
                out[tid] = TrajectoryStats(
                    int(row.get("n_steps") or 0),
                    int(row.get("prompt_tokens") or 0),
                    int(row.get("completion_tokens") or 0),
                )
        return out
    finally:
        pool.close()


def summarise(
    report: RunReport,
    *,
    success_threshold: float = 1.0,
    stats: Mapping[str, TrajectoryStats] | None = None,
) -> dict[str, Any]:
    """The run's figures as plain data (what `--json` prints and the table shows)."""
    results = report.results
    statuses = Counter(r.status for r in results)
    rewards = [r.reward for r in results if r.reward is not None]
    by_group: dict[str, list[float]] = defaultdict(list)
    for r in results:
        if r.reward is not None:
            by_group[r.group].append(r.reward)
    groups_by_size: dict[int, list[list[float]]] = defaultdict(list)
    for rs in by_group.values():
        groups_by_size[len(rs)].append(rs)
    sizes = []
    for size, groups in sorted(groups_by_size.items()):
        flat = [x for g in groups for x in g]
        sizes.append(
            {
                "group_size": size,
                "groups": len(groups),
                "reward_mean": statistics.fmean(flat),
                "reward_std": statistics.pstdev(flat),
                # GRPO learns nothing from a group whose rewards are all equal.
                "within_group_std": statistics.fmean(statistics.pstdev(g) for g in groups),
                "flat_groups": sum(1 for g in groups if max(g) == min(g)),
            }
        )
    out: dict[str, Any] = {
        "agent": report.agent,
        "dataset": report.dataset,
        "split": report.split,
        "tasks": report.tasks,
        "n": report.n,
        "trajectories": len(results),
        "statuses": dict(statuses),
        # Cancelled (Ctrl-C) episodes are not the agent's errors.
        "errors": sum(1 for r in results if r.status in ("failed", "timeout")),
        "scored": len(rewards),
        "reward_mean": statistics.fmean(rewards) if rewards else None,
        "reward_std": statistics.pstdev(rewards) if rewards else None,
        "success_rate": (
            sum(1 for x in rewards if x >= success_threshold) / len(results) if results else None
        ),
        "success_threshold": success_threshold,
        "by_group_size": sizes,
        "wall_s": report.wall_s,
        "interrupted": report.interrupted,
        "turns_mean": None,
        "prompt_tokens": None,
        "completion_tokens": None,
    }
    known = [stats[r.trajectory] for r in results if stats and r.trajectory in stats]
    if known:
        out["turns_mean"] = statistics.fmean(s.steps for s in known)
        out["prompt_tokens"] = sum(s.prompt_tokens for s in known)
        out["completion_tokens"] = sum(s.completion_tokens for s in known)
    # A done episode without a model call or an answer is the agent's bug more often than
    # not (it called its server directly, or printed to stderr), and scores 0 silently.
    done = [r for r in results if r.status == "done"]
    out["done"] = len(done)
    out["empty_answers"] = sum(1 for r in done if not (r.answer or "").strip())
    out["no_model_calls"] = (
        sum(1 for r in done if r.trajectory in stats and stats[r.trajectory].steps == 0)
        if stats
        else None
    )
    errors = Counter(
        (r.error or {}).get("type", "?")
        for r in results
        if r.status in ("failed", "timeout") and r.error
    )
    out["error_types"] = dict(errors)
    # What went wrong, in words: the first message of the commonest error type.
    out["error_example"] = None
    if errors:
        commonest = errors.most_common(1)[0][0]
        out["error_example"] = next(
            (r.error or {}).get("message")
            for r in results
            if r.status in ("failed", "timeout")
            and r.error
            and r.error.get("type", "?") == commonest
        )
    return out


def warnings(summary: Mapping[str, Any]) -> list[str]:
    """What looks wrong with the agent although its episodes ended "done", with what to do."""
    out = []
    done = summary.get("done") or 0
    if summary.get("no_model_calls"):
        out.append(
            f"{summary['no_model_calls']} of {done} done episodes made no model call through "
            "the proxy: nothing of them is recorded to train on. An agent sends its calls to "
            "the base URL it is given: $OPENAI_BASE_URL or $ANTHROPIC_BASE_URL (a command "
            "agent), the `client` it is called with (a python agent)"
        )
    if summary.get("empty_answers"):
        out.append(
            f"{summary['empty_answers']} of {done} done episodes gave an empty answer, "
            "scored as such: a command agent prints its answer on stdout or writes it to "
            "$AW_ANSWER_FILE (its stderr is kept only when it fails); a python agent returns it"
        )
    return out


ERROR_EXAMPLE_CHARS = 200  # of the example error's message in the table


def _num(x: float | None, fmt: str = "{:.3f}") -> str:
    return "-" if x is None else fmt.format(x)


def render(summary: Mapping[str, Any]) -> Table:
    """A rich table of the summary (all values rendered as plain text, never markup)."""
    title = f"aw run: {summary['agent']} on {summary['dataset']}/{summary['split']}"
    if summary["interrupted"]:
        title += " (interrupted)"
    table = Table(title=Text(title), show_header=True, header_style="bold")
    table.add_column("")
    table.add_column("value", justify="right")

    def row(name: str, value: str) -> None:
        table.add_row(Text(name), Text(value))

    row("tasks x n", f"{summary['tasks']} x {summary['n']}")
    row("trajectories", str(summary["trajectories"]))
    row("reward mean ± std", f"{_num(summary['reward_mean'])} ± {_num(summary['reward_std'])}")
    for g in summary["by_group_size"]:
        row(
            f"  groups of {g['group_size']}",
            f"{g['groups']} group{'' if g['groups'] == 1 else 's'}, mean "
            f"{g['reward_mean']:.3f}, within-group std {g['within_group_std']:.3f}, "
            f"{g['flat_groups']} flat",
        )
    row(
        f"success (reward ≥ {summary['success_threshold']:g})",
        _num(summary["success_rate"], "{:.1%}"),
    )
    row("turns per trajectory", _num(summary["turns_mean"], "{:.2f}"))
    tokens = (
        "-"
        if summary["prompt_tokens"] is None
        else f"{summary['prompt_tokens']} prompt / {summary['completion_tokens']} completion"
    )
    row("tokens", tokens)
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(summary["statuses"].items()))
    row("status", statuses or "-")
    errors = ", ".join(f"{k} {v}" for k, v in sorted(summary["error_types"].items()))
    row("errors", f"{summary['errors']}" + (f" ({errors})" if errors else ""))
    example = summary.get("error_example")
    if example:
        one_line = " ".join(str(example).split())
        cut = one_line[:ERROR_EXAMPLE_CHARS]
        row("  e.g.", cut + ("…" if len(one_line) > len(cut) else ""))
    row("wall time", f"{summary['wall_s']:.1f} s")
    return table
