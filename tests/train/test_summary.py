"""What `aw train` says of its plan and its run."""

from __future__ import annotations

from agentworld.train.data import Plan
from agentworld.train.summary import plan_line


def test_the_plan_line_counts_in_words_and_names_groups_only_when_there_are_some() -> None:
    """It said "from 1 shards", and "2 trajectories in - groups" for SFT (no groups)."""
    sft = Plan(sources=[], advantages={"a": 1.0, "b": 1.0}, matched=2)
    assert plan_line(sft, 1) == (
        "plan: 2 trajectories from 1 shard (2 matched; dropped 0 zero-advantage, "
        "0 without reward, 0 infrastructure failures)"
    )
    grpo = Plan(sources=[], advantages={"a": 0.7}, groups=1, matched=3, zero_advantage=2)
    assert plan_line(grpo, 2).startswith("plan: 1 trajectory in 1 group from 2 shards (3 matched")
