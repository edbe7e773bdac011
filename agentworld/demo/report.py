"""What `aw demo` prints: the per-iteration training table, the before/after table, the lift."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.table import Table
from rich.text import Text

from agentworld.run.evaluate import Evaluation, Lift

# The bar for "the agent got better": absolute lift and its size in standard errors.
GOAL_DELTA = 0.25
GOAL_Z = 3.0


def iteration_row(
    it: int,
    results: Sequence[Any],
    rollouts: Evaluation,
    train_info: dict[str, Any],
    version: int,
) -> dict[str, Any]:
    """One iteration as plain data (results.json and the table): reward, groups, update."""
    groups: dict[str, list[float]] = {}
    for r in results:
        groups.setdefault(r.group, []).append(r.reward or 0.0)
    return {
        "iteration": it,
        "reward_mean": round(rollouts.rate, 4),
        "successes": rollouts.successes,
        "rollouts": rollouts.n,
        "groups": len(groups),
        "groups_with_signal": sum(1 for g in groups.values() if max(g) > min(g)),
        "trained_trajectories": train_info.get("trajectories"),
        "loss": train_info.get("loss_last"),
        "skipped": train_info.get("skipped"),
        "policy_version": version,
    }


def iteration_line(row: dict[str, Any], total: int) -> str:
    """One iteration as a progress line (the table comes at the end)."""
    trained = (
        "skipped: no group with signal"
        if row.get("skipped")
        else (f"trained on {row.get('trained_trajectories') or 0}")
    )
    return (
        f"iteration {row['iteration']}/{total}: reward {row['reward_mean']:.3f} "
        f"({row['successes']}/{row['rollouts']}), {row['groups_with_signal']}/{row['groups']} "
        f"groups with signal, {trained}, policy v{row['policy_version']}, "
        f"{row.get('wall_s', 0):.0f} s"
    )


def iterations_table(rows: Sequence[dict[str, Any]], *, title: str | None = None) -> Table:
    """Training reward by iteration (the curve), with what each update trained on."""
    table = Table(title=title, title_justify="left")
    # Short headers and no fixed widths: the table fits an 80-column stderr that is not a
    # terminal (rich squeezes a column to nothing when fixed widths overflow it).
    for name in ("iter", "reward (rollouts)", "groups w/ signal", "trained", "policy", "wall s"):
        table.add_column(name, justify="right", no_wrap=True)
    for r in rows:
        trained = "-" if r.get("skipped") else str(r.get("trained_trajectories") or 0)
        table.add_row(
            str(r["iteration"]),
            f"{r['reward_mean']:.3f} ({r['successes']}/{r['rollouts']})",
            f"{r['groups_with_signal']}/{r['groups']}",
            trained,
            f"v{r['policy_version']}",
            f"{r.get('wall_s', 0):.0f}",
        )
    return table


def after_table(before: Evaluation, after: Evaluation) -> Table:
    """Held-out success before and after training, each with its standard error."""
    table = Table(title="held-out success (greedy, exact number)", title_justify="left")
    for name in ("policy", "solved", "success", "± SE"):
        table.add_column(name, justify="right" if name != "policy" else "left")
    for label, ev in (("before", before), ("after", after)):
        table.add_row(
            f"{label} (v{ev.policy_version})",
            f"{ev.successes}/{ev.n}",
            f"{ev.rate:.3f}",
            f"{ev.stderr:.3f}",
        )
    return table


def lift_line(d: Lift) -> Text:
    """The verdict: the lift, its standard error, and whether it meets the issue's bar."""
    met = d.delta >= GOAL_DELTA and d.z >= GOAL_Z
    z = f"{d.z:.1f}" if d.z != float("inf") else "inf"
    text = Text(f"lift: {d.delta:+.3f} ± {d.stderr:.3f} (SE), {z} standard errors; ")
    goal = f"goal >= +{GOAL_DELTA:.2f} and >= {GOAL_Z:.0f} SE: "
    text.append(goal + ("met" if met else "not met"), style="bold green" if met else "bold yellow")
    return text
