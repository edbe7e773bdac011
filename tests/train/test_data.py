"""Pool selection for training: labels, reward overrides, staleness, process split, exact resume."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from agentworld.errors import PoolError
from agentworld.pool.reader import source_paths
from agentworld.train.advantages import group_advantages
from agentworld.train.config import TrainConfig
from agentworld.train.data import (
    Plan,
    PoolBatches,
    check_plan,
    group_of,
    make_plan,
    pack,
    rank_of,
    selection_for,
    sft_reward_note,
)
from agentworld.train.sequences import Row, stop_ids_of


def plan_for(builder, current_version: int = 0, **kw: Any):
    cfg = TrainConfig(model="m", **kw)
    labels = builder.pool.labels.effective()
    return make_plan(builder.pool.layout, labels, cfg, selection_for(cfg, current_version)), cfg


def test_untrainable_trajectories_are_excluded_and_label_rewards_replace_recorded(builder) -> None:
    g1, (a, b, c) = builder.group([1.0, 0.0, 0.0])
    _, (d, e) = builder.group([1.0, 0.0])
    builder.pool.labels.set([f"trajectory:{c}"], {"reward": 1.0}, author="me")
    builder.pool.labels.set([f"trajectory:{d}"], {"trainable": False}, author="me")
    plan, _ = plan_for(builder, algo="grpo", skip_zero_advantage=True)
    assert plan.rewards[c] == 1.0
    assert [plan.advantages[t] for t in (a, b, c)] == pytest.approx(
        group_advantages([1.0, 0.0, 1.0], [g1] * 3)
    )
    # d is not trainable; e is then alone in its group: no baseline, no signal, dropped
    assert d not in plan.advantages and e not in plan.advantages
    assert plan.matched == 4 and plan.zero_advantage == 1
    assert plan.groups == 1  # the group of e alone is not one trained on ("in 2 groups")


def test_failed_stale_and_unlabelled_quality_are_filtered(builder) -> None:
    _, (good, plain) = builder.group([1.0, 1.0], policy_version=2)
    _, (failed,) = builder.group([0.0], status="failed", policy_version=2)
    _, (old,) = builder.group([1.0], policy_version=0)
    builder.pool.labels.set([f"trajectory:{good}"], {"quality": "good"}, author="me")
    plan, _ = plan_for(builder, algo="sft", current_version=3, max_staleness=1)
    assert set(plan.advantages) == {good, plain}  # not failed, not older than 3 - 1
    assert failed not in plan.advantages and old not in plan.advantages
    plan, _ = plan_for(builder, algo="sft", quality=("good",))
    assert set(plan.advantages) == {good}
    plan, cfg = plan_for(builder, algo="sft", agent="nobody")
    with pytest.raises(PoolError, match="nothing to train on"):
        check_plan(plan, cfg, builder.pool.root)


def test_nothing_to_train_on_because_every_group_was_flat_says_so(builder) -> None:
    # A first run of a newcomer's agent: every rollout scored 0. The error said "6 in
    # groups with one reward" and told them to run `aw run`, which they had just done.
    builder.group([0.0, 0.0], agent="mine", dataset="qa")
    builder.group([1.0, 1.0], agent="mine", dataset="qa")
    plan, cfg = plan_for(builder, algo="grpo", agent="mine", dataset="qa")
    with pytest.raises(PoolError) as err:
        check_plan(plan, cfg, builder.pool.root)
    message = str(err.value)
    assert "4 with no advantage (every reward of their group equal)" in message
    assert (
        "grpo learns from rewards that differ within a group, and none did: roll out more "
        "per task (`aw run --agent mine --dataset qa -n 8`), score with partial credit, or "
        "train with --algo sft (--set min_reward=1 keeps the successes)"
    ) in message
    assert "rolls out trajectories to train on" not in message


def test_label_snapshot_replays_labels_as_they_were(builder) -> None:
    _, (a, b) = builder.group([1.0, 0.0])
    builder.pool.labels.set([f"trajectory:{a}"], {"quality": "good"}, author="me")
    snap = builder.pool.labels.snapshot()
    builder.pool.labels.set([f"trajectory:{b}"], {"trainable": False}, author="me")
    builder.pool.labels.set([f"trajectory:{a}"], {"quality": "bad"}, author="other")
    then = builder.pool.labels.effective(upto=snap)
    assert then[f"trajectory:{a}"]["quality"].value == "good"
    assert f"trajectory:{b}" not in then


def dataset(builder, plan, cfg, **kw: Any) -> PoolBatches:
    return PoolBatches(
        builder.pool,
        plan,
        builder.pool.labels.effective(),
        builder.tok,
        cfg,
        stop_ids=stop_ids_of(builder.tok),
        **kw,
    )


def test_processes_split_by_group_deterministically(builder) -> None:
    # Groups go to processes by a hash of their random id: with 24 groups the chance
    # that one process gets none is 2^-23, so "both get work" below is not flaky.
    for _ in range(24):
        builder.group([1.0, 0.0])
    plan, cfg = plan_for(builder, algo="grpo", batch_tokens=4096, epochs=1)
    per_rank = []
    for rank in range(2):
        trajs = [
            t
            for b in dataset(builder, plan, cfg, rank=rank, world=2)
            for t in b["meta"]["trajectories"]
        ]
        again = [
            t
            for b in dataset(builder, plan, cfg, rank=rank, world=2)
            for t in b["meta"]["trajectories"]
        ]
        assert trajs == again
        per_rank.append(set(trajs))
    assert per_rank[0].isdisjoint(per_rank[1])
    assert per_rank[0] | per_rank[1] == set(plan.advantages)
    assert per_rank[0] and per_rank[1]  # both processes get work
    for t in builder.pool.iter_trajectories():
        assert (t.id in per_rank[1]) == (rank_of(group_of(t), 2) == 1)


def snapshot(batch: dict[str, Any]) -> tuple:
    return (
        batch["input_ids"].tolist(),
        batch["sampled"].tolist(),
        batch["advantages"].tolist(),
    )


@pytest.mark.parametrize("taken", [1, 3, 4, 7])
def test_resume_mid_epoch_reproduces_the_same_batches(builder, taken: int) -> None:
    for _ in range(4):
        builder.group([1.0, 0.0, 0.25], turns=2)
    # small buffers and batches: several buffers per epoch, several batches per buffer
    plan, cfg = plan_for(
        builder,
        algo="grpo",
        batch_tokens=48,
        buffer_trajectories=5,
        max_seq_len=48,
        epochs=2,
        seed=7,
    )
    ds = dataset(builder, plan, cfg)
    it = iter(ds)
    for _ in range(taken):
        next(it)
    state = ds.state_dict()
    rest = [snapshot(b) for b in it]
    assert len(rest) > 3
    resumed = dataset(builder, plan, cfg, state=state)
    assert [snapshot(b) for b in resumed] == rest
    # a different seed orders the batches differently
    plan2, cfg2 = plan_for(
        builder,
        algo="grpo",
        batch_tokens=48,
        buffer_trajectories=5,
        max_seq_len=48,
        epochs=2,
        seed=8,
    )
    assert [snapshot(b) for b in dataset(builder, plan2, cfg2)][taken:] != rest


def test_pack_respects_the_token_budget() -> None:
    rows = [
        Row(ids=[1] * n, sampled=[1] * n, logprobs=[0.0] * n, trajectory="t", group="g")
        for n in (3, 9, 4, 5, 1)
    ]
    batches = pack(rows, 10)
    assert [[len(r) for r in b] for b in batches] == [[1, 3], [4, 5], [9]]
    assert all(len(b) * max(len(r) for r in b) <= 10 for b in batches)


def test_collated_batches_align_masks_and_logprobs(builder) -> None:
    builder.group([1.0, 0.0], turns=2)
    plan, cfg = plan_for(builder, algo="ppo", epochs=1)
    batch = next(iter(dataset(builder, plan, cfg)))
    assert batch["input_ids"].shape == batch["sampled"].shape == batch["rollout_logprobs"].shape
    assert torch.equal(batch["has_logprob"], batch["sampled"] > 0)  # engine data: all have them
    assert int(batch["sampled"].sum()) == batch["meta"]["sampled_tokens"] == 2 * 2 * 6
    assert source_paths(builder.pool.layout, journals=False)


def test_sft_says_it_imitates_failures_too_unless_rewards_or_labels_chose() -> None:
    plan = Plan(sources=[], rewards={"a": 0.0, "b": 1.0, "c": None, "d": 0.0})
    note = sft_reward_note(plan, TrainConfig(algo="sft"))
    assert note is not None and "3 scored, reward 0 to 1 (mean 0.333)" in note
    assert "--set min_reward=1" in note
    assert sft_reward_note(plan, TrainConfig(algo="sft", min_reward=1.0)) is None
    assert sft_reward_note(plan, TrainConfig(algo="sft", quality=("good",))) is None
    assert sft_reward_note(plan, TrainConfig(algo="grpo")) is None
    unscored = Plan(sources=[], rewards={"a": None})
    assert sft_reward_note(unscored, TrainConfig(algo="sft")) is None
