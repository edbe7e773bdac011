"""Pool -> micro-batches, streamed: selection, group advantages, a per-process split, exact resume.

Two passes over a fixed set of shards. The plan pass reads only summaries
(which trajectories pass the selection, their rewards and groups) to compute
group-relative advantages, since a group's members may sit in different
shards. The batch pass streams trajectories again, tokenizes a buffer at a
time, packs rows of similar length into micro-batches and yields them.
Processes split the work by a hash of the group id (a trajectory's steps can
span shards, so whole shards cannot be dealt out without splitting
trajectories), which keeps each group on one process.
"""

from __future__ import annotations

import random
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import IterableDataset

from agentworld.errors import PoolError
from agentworld.plural import plural
from agentworld.pool import Pool, Selection
from agentworld.pool.labels import LabelEntry
from agentworld.pool.reader import Trajectory, iter_trajectories, source_paths
from agentworld.train.advantages import group_advantages, scale_std_for
from agentworld.train.config import TrainConfig
from agentworld.train.sequences import Row, SequenceStats, trajectory_rows

Labels = dict[str, dict[str, LabelEntry]]


def selection_for(cfg: TrainConfig, current_version: int) -> Selection:
    """The pool selection a config asks for; never anything labelled not trainable."""
    min_policy = cfg.min_policy
    if cfg.max_staleness is not None:
        floor = current_version - cfg.max_staleness
        min_policy = floor if min_policy is None else max(min_policy, floor)
    return Selection(
        agent=cfg.agent,
        dataset=cfg.dataset,
        split=cfg.split,
        status=cfg.status,
        min_reward=cfg.min_reward,
        max_reward=cfg.max_reward,
        min_policy=min_policy,
        max_policy=cfg.max_policy,
        trainable_only=True,
        quality=cfg.quality,
        tag=cfg.tag,
    )


# End-record error types that say the episode was cut short around the model, not by it:
# the proxy refused or lost the trajectory, the agent could not start, the run was
# interrupted, the proxy's idle sweep closed it, the scorer (user code) raised.
INFRA_ERROR_TYPES = frozenset({"proxy", "spawn", "cancelled", "idle_timeout", "timeout", "scorer"})


def infra_failure(t: Trajectory) -> str | None:
    """Why a trajectory ended by an infrastructure failure, or None if it did not.

    Its reward (often 0) says nothing about the model: a call the upstream failed or
    cut (step status error/cancelled), a timeout, a cancelled run, a lost proxy.
    """
    end = t.end or {}
    status = end.get("status")
    if status in ("timeout", "cancelled"):
        return status
    kind = (end.get("error") or {}).get("type")
    if kind in INFRA_ERROR_TYPES:
        return str(kind)
    for step in t.steps:
        if step.get("status") == "error":
            return "upstream error"
        if step.get("status") == "cancelled":
            return "cancelled call"
    return None


def group_of(t: Trajectory) -> str:
    return t.first("group") or (t.end or {}).get("group") or t.id


def rank_of(group: str, world: int) -> int:
    """Which process trains a group: a stable hash, the same on every machine."""
    return zlib.crc32(group.encode()) % world


@dataclass
class Plan:
    """What a run trains on: the exact shards and labels, and each kept trajectory's advantage."""

    sources: list[tuple[str, Path]]
    advantages: dict[str, float] = field(default_factory=dict)
    rewards: dict[str, float | None] = field(default_factory=dict)
    groups: int = 0
    matched: int = 0  # trajectories the selection matched
    zero_advantage: int = 0  # dropped: their whole group had the same reward
    no_reward: int = 0  # dropped from RL: no reward recorded or labelled
    infra_failures: int = 0  # dropped: ended by an infrastructure failure, not the model
    # Ended trajectories read, by (agent, dataset): what a selection that matched none could have
    read: Counter[tuple[str | None, str | None]] = field(default_factory=Counter)


def make_plan(
    layout: Any,
    labels: Labels,
    cfg: TrainConfig,
    selection: Selection,
    sources: list[tuple[str, Path]] | None = None,
) -> Plan:
    """First pass: select trajectories and compute group-relative advantages (RL) from rewards."""
    if sources is None:
        sources = source_paths(layout, journals=cfg.include_journals)
    plan = Plan(sources=sources)
    ids: list[str] = []
    groups: list[str] = []
    rewards: list[float] = []
    for t in iter_trajectories(layout, labels, sources=sources, include_open=False):
        plan.read[(t.first("agent"), t.first("dataset"))] += 1
        if not selection.admits(t):
            continue
        plan.matched += 1
        if not cfg.include_infra_failures and infra_failure(t) is not None:
            plan.infra_failures += 1
            continue
        reward = t.reward
        if cfg.algo == "sft":
            plan.advantages[t.id] = 1.0
            plan.rewards[t.id] = reward
            continue
        if reward is None:
            plan.no_reward += 1
            continue
        ids.append(t.id)
        groups.append(group_of(t))
        rewards.append(float(reward))
    advs = group_advantages(rewards, groups, scale_std=scale_std_for(cfg.normaliser))
    kept: set[Any] = set()  # the groups trained on: a group whose members all drop is not
    for tid, g, r, a in zip(ids, groups, rewards, advs, strict=True):
        if a == 0.0 and cfg.skip_zero_advantage:
            plan.zero_advantage += 1
            continue
        plan.advantages[tid] = a
        plan.rewards[tid] = r
        kept.add(g)
    plan.groups = len(kept)
    return plan


def pack(rows: list[Row], batch_tokens: int) -> list[list[Row]]:
    """Rows sorted by length, cut into batches whose padded size stays within ``batch_tokens``."""
    batches: list[list[Row]] = []
    cur: list[Row] = []
    for row in sorted(rows, key=len):
        if cur and (len(cur) + 1) * len(row) > batch_tokens:
            batches.append(cur)
            cur = []
        cur.append(row)
    if cur:
        batches.append(cur)
    return batches


def collate(rows: list[Row], pad_id: int) -> dict[str, Any]:
    """Rows -> padded tensors, everything aligned per input token (shift happens in the loss)."""
    b, t = len(rows), max(len(r) for r in rows)
    input_ids = torch.full((b, t), pad_id, dtype=torch.long)  # (B, T)
    attention_mask = torch.zeros((b, t), dtype=torch.long)  # (B, T)
    sampled = torch.zeros((b, t), dtype=torch.float32)  # (B, T) 1 = policy token
    logprobs = torch.zeros((b, t), dtype=torch.float32)  # (B, T) rollout log-probs
    has_logprob = torch.zeros((b, t), dtype=torch.bool)  # (B, T)
    temperature = torch.ones((b, t), dtype=torch.float32)  # (B, T) the step's sampling T
    unapplied: dict[str, Any] = {}
    for i, r in enumerate(rows):
        n = len(r)
        input_ids[i, :n] = torch.tensor(r.ids)
        attention_mask[i, :n] = 1
        sampled[i, :n] = torch.tensor(r.sampled, dtype=torch.float32)
        lp = torch.tensor(r.logprobs, dtype=torch.float32)
        ok = ~torch.isnan(lp)
        logprobs[i, :n] = torch.where(ok, lp, 0.0)
        has_logprob[i, :n] = ok & (sampled[i, :n] > 0)
        if r.temperature:
            temperature[i, :n] = torch.tensor(r.temperature, dtype=torch.float32)
        unapplied.update(r.unapplied)
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "sampled": sampled,
        "rollout_logprobs": logprobs,
        "has_logprob": has_logprob,
        "temperature": temperature,
        "advantages": torch.tensor([r.advantage for r in rows], dtype=torch.float32),  # (B,)
        "weight": 1.0,
        "meta": {
            "trajectories": sorted({r.trajectory for r in rows}),
            # By trajectory: one with breaks is several rows, but one reward.
            "rewards": {r.trajectory: r.reward for r in rows if r.reward is not None},
            "tokens": sum(len(r) for r in rows),
            "padded_tokens": b * t,
            "sampled_tokens": int(sum(sum(r.sampled) for r in rows)),
            "rows": b,
            "steps": sum(r.steps for r in rows),
            "policy_versions": sorted({r.policy_version for r in rows} - {None}),
            "unapplied": unapplied,
        },
    }


def dummy_batch(batch: dict[str, Any] | None, pad_id: int) -> dict[str, Any]:
    """A zero-weight micro-batch for a process that ran out, so collective ops stay in step."""
    if batch is None:
        row = Row(
            ids=[pad_id, pad_id], sampled=[0, 0], logprobs=[0.0, 0.0], trajectory="", group=""
        )
        batch = collate([row], pad_id)
    meta = {k: 0 for k in batch["meta"]} | {
        "trajectories": [],
        "rewards": {},
        "policy_versions": [],
        "unapplied": {},
    }
    return {**batch, "weight": 0.0, "meta": meta}


class PoolBatches(IterableDataset):
    """Micro-batches of this process's share of a plan, epoch after epoch, resumable exactly.

    ``state_dict()`` after a batch was taken says where the next one comes from:
    the epoch, how many of this process's trajectories came before the current
    buffer, and how many of that buffer's batches were already handed out.
    """

    def __init__(
        self,
        pool: Pool,
        plan: Plan,
        labels: Labels,
        tokenizer: Any,
        cfg: TrainConfig,
        *,
        stop_ids: frozenset[int],
        rank: int = 0,
        world: int = 1,
        state: dict[str, int] | None = None,
    ) -> None:
        self.pool, self.plan, self.labels, self.tokenizer, self.cfg = (
            pool,
            plan,
            labels,
            tokenizer,
            cfg,
        )
        self.stop_ids, self.rank, self.world = stop_ids, rank, world
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.state = dict(state or {"epoch": 0, "buffer_start": 0, "batches_done": 0})
        self.stats = SequenceStats()

    def state_dict(self) -> dict[str, int]:
        return dict(self.state)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        epoch = self.state["epoch"]
        while self.cfg.epochs is None or epoch < self.cfg.epochs:
            fresh = self.state["buffer_start"] == 0 and self.state["batches_done"] == 0
            produced = False
            for batch in self._epoch(epoch):
                produced = True
                yield batch
            if fresh and not produced:
                return  # nothing for this process at all: stop instead of spinning
            epoch += 1
            self.state = {"epoch": epoch, "buffer_start": 0, "batches_done": 0}

    def _epoch(self, epoch: int) -> Iterator[dict[str, Any]]:
        skip_trajectories = self.state["buffer_start"]
        skip_batches = self.state["batches_done"]
        seen = 0  # this process's trajectories streamed so far in this epoch
        buffer: list[Trajectory] = []
        buffer_start = 0
        for t in iter_trajectories(
            self.pool.layout, self.labels, sources=self.plan.sources, include_open=False
        ):
            if t.id not in self.plan.advantages or rank_of(group_of(t), self.world) != self.rank:
                continue
            seen += 1
            if seen <= skip_trajectories:
                continue  # resuming: consumed before the checkpoint; not even tokenized
            if not buffer:
                buffer_start = seen - 1
            buffer.append(t)
            if len(buffer) == self.cfg.buffer_trajectories:
                yield from self._flush(buffer, epoch, buffer_start, skip_batches)
                buffer, skip_batches = [], 0
        if buffer:
            yield from self._flush(buffer, epoch, buffer_start, skip_batches)

    def rows_of(self, trajectories: list[Trajectory]) -> list[Row]:
        rows: list[Row] = []
        for t in trajectories:
            out, stats = trajectory_rows(
                t.steps,
                self.tokenizer,
                trajectory=t.id,
                group=group_of(t),
                stop_ids=self.stop_ids,
                merge=self.cfg.merge,
                max_seq_len=self.cfg.max_seq_len,
            )
            self.stats.add(stats)
            version = t.summary(texts=False)["policy_max"]
            for r in out:
                r.advantage = self.plan.advantages[t.id]
                r.reward = self.plan.rewards.get(t.id)
                r.policy_version = version
            rows.extend(out)
        return rows

    def _flush(
        self, buffer: list[Trajectory], epoch: int, buffer_start: int, skip_batches: int
    ) -> Iterator[dict[str, Any]]:
        rng = random.Random(f"{self.cfg.seed}:{epoch}:{buffer_start}")
        rows = self.rows_of(buffer)
        rng.shuffle(rows)  # ties in length are broken at random, not by pool order
        batches = pack(rows, self.cfg.batch_tokens)
        rng.shuffle(batches)
        for j, rows_j in enumerate(batches):
            if j < skip_batches:
                continue
            self.state = {"epoch": epoch, "buffer_start": buffer_start, "batches_done": j + 1}
            yield collate(rows_j, self.pad_id)


def sft_reward_note(plan: Plan, cfg: TrainConfig) -> str | None:
    """What SFT is about to imitate, when rewards were recorded and nothing filtered on them.

    SFT makes every selected trajectory more likely, a failed one as much as a solved
    one: a first run on fresh rollouts would imitate them all without a word.
    """
    if cfg.algo != "sft" or cfg.min_reward is not None or cfg.quality:
        return None
    scored = [r for r in plan.rewards.values() if r is not None]
    if not scored:
        return None
    lo, hi = min(scored), max(scored)
    return (
        f"note: SFT imitates every trajectory it selected, whatever its reward: "
        f"{len(scored)} scored, reward {lo:g} to {hi:g} (mean {sum(scored) / len(scored):.3f}); "
        "--set min_reward=1 (or label them and --set quality=good) keeps the good ones"
    )


def wanted(cfg: TrainConfig) -> str:
    """The trajectories a run asks for, in words: "agent math, dataset gsm8k"."""
    named = [f"{k} {v}" for k, v in (("agent", cfg.agent), ("dataset", cfg.dataset)) if v]
    named += [f"split {cfg.split}"] if cfg.split else []
    return ", ".join(named) or "any agent"


def check_plan(
    plan: Plan, cfg: TrainConfig, where: str | Path, *, unread_journals: int = 0
) -> None:
    """Refuse a plan with nothing to train on, saying what was asked and how to get some;
    ``where`` names the pool (its URL for a remote one, not its cache folder).

    When nothing matched it also says what was read (agents and datasets of the ended
    trajectories: a mistyped ``--agent`` shows) and what was not: ``unread_journals``,
    live journals left out (a proxy still running holds its steps there)."""
    if not plan.advantages:
        why = (
            f"{plan.matched} matched, {plan.zero_advantage} with no advantage (every reward "
            f"of their group equal), {plan.no_reward} without reward, "
            f"{plan.infra_failures} infrastructure failures"
        )
        run = f"aw run --agent {cfg.agent or 'AGENT'} --dataset {cfg.dataset or 'DATASET'}"
        if plan.zero_advantage:
            # Rolling out again, as the generic hint says, gives the same flat groups.
            what_to_do = (
                f"{cfg.algo} learns from rewards that differ within a group, and none did: "
                f"roll out more per task (`{run} -n 8`), score with partial credit, or train "
                "with --algo sft (--set min_reward=1 keeps the successes)"
            )
        else:
            what_to_do = f"`{run}` rolls out trajectories to train on"
        message = (
            f"{where}: nothing to train on for {wanted(cfg)}, status "
            f"{', '.join(cfg.status) or 'any'} ({why}); {what_to_do}"
        )
        if not plan.matched:
            message += f"; {_read_in_words(plan)}"
            if unread_journals:
                message += (
                    f"; {plural(unread_journals, 'live journal')} not read (a running "
                    "`aw proxy` writes there): `aw pool seal --proxy URL` seals a running "
                    "proxy's, or --set include_journals=true reads them"
                )
        raise PoolError(message)


def _read_in_words(plan: Plan, most: int = 6) -> str:
    """The ended trajectories read, by agent and dataset: "read 40 of agent math, dataset
    arith; 12 of agent coder, no dataset"."""
    if not plan.read:
        return "the shards read hold no ended trajectory"
    parts = [
        f"{n} of agent {agent or '(none)'}, " + (f"dataset {ds}" if ds else "no dataset")
        for (agent, ds), n in plan.read.most_common(most)
    ]
    more = len(plan.read) - most
    return "read " + "; ".join(parts) + (f"; and {more} more" if more > 0 else "")
