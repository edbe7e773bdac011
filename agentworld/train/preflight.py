"""What `aw train` settles before its first update, and before it writes anything: the
models on disk, Accelerate's handle, where the run starts, and (offline) the plan.

A run that cannot start (no model folder, nothing to train on, a resume that does not
fit) stops here with an error naming the setting, and leaves no run folder behind.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentworld.errors import ConfigError, PoolError
from agentworld.model_folder import require_model_folder
from agentworld.pool.reader import source_paths
from agentworld.train.checkpoint import (
    model_policy_version,
    read_meta,
    refuse_run_folder,
    resolve_resume,
)
from agentworld.train.config import TrainConfig
from agentworld.train.data import Labels, Plan, check_plan, make_plan, selection_for
from agentworld.train.online import Cursor, CursorState
from agentworld.train.tracking import check_trackers


def require_models(cfg: TrainConfig) -> None:
    """Refuse a model path that is not a local model folder, before anything is written.

    transformers would take it for a Hub repo id: a download, or a traceback from deep inside.
    """
    for key, value in (("train.model", cfg.model), ("train.ref_model", cfg.ref_model)):
        if value is not None:
            refuse_run_folder(value, key)
            require_model_folder(value, key)


def make_accelerator(cfg: TrainConfig) -> Any:
    """Accelerate's handle for this run; a mixed precision the machine lacks is a ConfigError."""
    from accelerate import Accelerator

    mp = cfg.mixed_precision
    check_trackers(cfg.report_to)
    try:
        # None leaves the choice to `accelerate launch`, its config file or the environment.
        acc = Accelerator(
            gradient_accumulation_steps=cfg.grad_accum,
            mixed_precision=mp,
            log_with=list(cfg.report_to) or None,
            project_dir=cfg.output_dir,
        )
    except ValueError as exc:
        if mp is None or "precision" not in str(exc):
            raise
        raise ConfigError(f"train.mixed_precision: {mp!r} is not available here: {exc}") from None
    if mp == "fp16" and acc.device.type == "cpu":
        # Accelerate would silently run fp32 (it has no fp16 autocast on CPU).
        raise ConfigError("train.mixed_precision: 'fp16' needs a GPU; on CPU use 'bf16' or 'no'")
    return acc


@dataclass
class Start:
    """Where a run starts: fresh, from ``--resume``, or (online) from the checkpoint its
    consumer cursor names; with the policy versions it starts at."""

    resume_dir: Path | None
    meta: dict[str, Any]  # the resumed checkpoint's meta.json ({} when fresh)
    step: int  # updates already made
    base_version: int  # the policy version of the weights the run began from
    version: int  # the policy version of the weights it starts with
    cursor: Cursor | None
    cursor_state: CursorState
    # Online: the cursor on disk does not name the resumed checkpoint and its groups (a
    # `--resume` of one saved before a kill cut its cursor commit): the run commits it first.
    recommit: bool = False


def find_start(cfg: TrainConfig, pool: Any, out_dir: Path) -> Start:
    """Where the run starts; a ``max_steps`` the resumed run already reached is refused (it
    ran no update and said nothing)."""
    cursor = Cursor(pool.root, cfg.consumer) if cfg.online else None
    cursor_state = cursor.load() if cursor else CursorState()
    resume_dir = None
    if cfg.resume:
        resume_dir = resolve_resume(cfg.resume, out_dir)
    elif cursor_state.checkpoint:
        resume_dir = Path(cursor_state.checkpoint)
    meta = read_meta(resume_dir) if resume_dir else {}
    step = int(meta.get("counts", {}).get("updates", 0))
    if resume_dir and not cfg.online and step >= cfg.max_steps:
        raise ConfigError(
            f"train.max_steps: {cfg.max_steps}, but {resume_dir.name} is at update "
            f"{step} (max_steps counts the run's updates, not this session's)"
        )
    if resume_dir:
        base_version = int(meta.get("base_policy_version", 0))
        version = int(meta.get("policy_version", base_version))
    else:
        base_version = (
            cfg.policy_version
            if cfg.policy_version is not None
            else model_policy_version(cfg.model)
        )
        version = base_version
    recommit = False
    if cfg.online and resume_dir and isinstance(meta.get("groups"), list):
        # The groups consumed are the ones the resumed weights hold, which its meta.json
        # names: the cursor's would train again those of a checkpoint it had not committed.
        held = CursorState(set(meta["groups"]), str(resume_dir.resolve()), version, step)
        recommit, cursor_state = held != cursor_state, held
    return Start(resume_dir, meta, step, base_version, version, cursor, cursor_state, recommit)


@dataclass
class Offline:
    """An offline run's fixed inputs: the pinned sources and label files, and the plan."""

    sources: list[tuple[str, Path]]
    label_sizes: dict[str, int]
    labels: Labels
    plan: Plan
    states: list[Any] | None = field(default=None)  # each process's data position (resume)


def plan_offline(cfg: TrainConfig, pool: Any, start: Start, processes: int) -> Offline:
    """The shards and labels a run reads (those its checkpoint pinned, when resuming), and
    its plan, checked: nothing to train on, a pinned shard gone or another process count
    than the run that is resumed is refused here."""
    meta = start.meta
    if meta.get("sources"):
        sources = [(kind, pool.root / rel) for kind, rel in meta["sources"]]
        missing = [str(p) for _, p in sources if not p.exists()]
        if missing:
            raise PoolError(f"cannot resume: {missing[0]} (used by {start.resume_dir}) is gone")
    else:
        sources = source_paths(pool.layout, journals=cfg.include_journals)
    label_sizes = meta.get("label_files") or pool.labels.snapshot()
    labels = pool.labels.effective(upto=label_sizes)
    plan = make_plan(pool.layout, labels, cfg, selection_for(cfg, start.base_version), sources)
    unread = 0 if cfg.include_journals else len(pool.layout.journal_paths())
    check_plan(plan, cfg, getattr(pool, "url", None) or pool.root, unread_journals=unread)
    states = meta.get("data_state")
    if states is not None and len(states) != processes:
        raise ConfigError(
            f"train.resume: {start.resume_dir} was written by {len(states)} processes, "
            f"this run has {processes}; resume with the same number"
        )
    return Offline(sources, label_sizes, labels, plan, states)
