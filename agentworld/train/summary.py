"""What `aw train` says of its data and of its run, for people: the plan line before the
first update and the summary table after the last."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from agentworld.plural import plural
from agentworld.train.data import Plan
from agentworld.train.fidelity import FidelityReport


def plan_line(plan: Plan, sources: int) -> str:
    """How many trajectories the plan trains on, from what, and what it dropped and why."""
    groups = f" in {plural(plan.groups, 'group')}" if plan.groups else ""  # none for SFT
    return (
        f"plan: {plural(len(plan.advantages), 'trajectory')}{groups} "
        f"from {plural(sources, 'shard')} ({plan.matched} matched; dropped "
        f"{plan.zero_advantage} zero-advantage, {plan.no_reward} without reward, "
        f"{plan.infra_failures} infrastructure failures)"
    )


def summary_table(summary: dict[str, Any]) -> Table:
    """The run's summary as a two-column table (``interrupted`` only when it was)."""
    table = Table(title="aw train", show_header=False)
    for k, v in summary.items():
        if k == "interrupted" and not v:
            continue
        if isinstance(v, FidelityReport):
            v = v.line().removeprefix("fidelity: ")  # the row is named already
        elif isinstance(v, float):
            v = f"{v:,.4g}"
        table.add_row(k, Text(str(v)))
    return table
