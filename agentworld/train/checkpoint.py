"""A checkpoint is a folder: safetensors weights, tokenizer, meta.json saying what made it.

The weights are stored once, beside the tokenizer (what `aw serve` reloads and
`--resume` loads); ``train_state/`` holds only what resuming needs besides them
(optimizer, scheduler, RNG), and online runs write it every ``state_every``
checkpoints, not every update: for SmolLM2-135M that is 1.08 GB of AdamW
moments against 538 MB of weights. Old checkpoints are pruned to the last
``keep_checkpoints`` (see ``prune_checkpoints``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentworld.errors import ConfigError
from agentworld.pool.layout import fsync_dir, write_atomic

META = "meta.json"
STATE = "train_state"  # Accelerate's save_state: optimizer, scheduler, RNG (for --resume)
LATEST = "latest"


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` so readers see the old file or the new one, never half of one, even
    after a power loss: the data is on disk before the rename, the rename before return."""
    write_atomic(path, text.encode())


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write JSON so readers see the old file or the new one, never half of one."""
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True))


def fsync_tree(folder: Path) -> None:
    """Put every file under ``folder``, and the folders' entries for them, on disk.

    A checkpoint's meta.json says "complete": without this, a power loss after it landed
    could leave it beside weights the page cache never wrote (empty or cut short), which
    ``--resume`` and a reloading engine would load. An fsync of a file already on disk
    costs next to nothing, so a tree fsynced before is cheap to fsync again. Measured on
    ext4 with the 0.6 MB test model: a save takes 12 ms instead of 8.
    """
    for dirpath, _, filenames in os.walk(folder):
        for name in filenames:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(dirpath))


def checkpoint_dir(output_dir: Path, step: int) -> Path:
    return output_dir / f"ckpt-{step:06d}"


_CKPT = re.compile(r"ckpt-(\d{6,})")


def weights_once(accelerator: Any) -> None:
    """Keep Accelerate's ``save_state`` from writing the model's weights a second time.

    ``save_checkpoint`` stores them with the tokenizer already, and the trainer loads
    them from there before ``load_state``; so ``train_state/`` carries the optimizer,
    scheduler and RNG only (one copy of 538 MB less per checkpoint for SmolLM2-135M,
    and none of a frozen reference model). These hooks see the weights of plain and DDP
    runs only: FSDP and DeepSpeed save their sharded model state their own way, which
    resuming them needs.
    """

    def drop_weights(models: list[Any], weights: list[Any], output_dir: str) -> None:
        weights.clear()

    def loaded_already(models: list[Any], input_dir: str) -> None:
        models.clear()

    accelerator.register_save_state_pre_hook(drop_weights)
    accelerator.register_load_state_pre_hook(loaded_already)


def save_checkpoint(
    accelerator: Any,
    model: Any,
    tokenizer: Any,
    folder: Path,
    meta: dict[str, Any],
    *,
    with_state: bool = True,
) -> Path:
    """Weights + tokenizer (+ training state when ``with_state``) + meta.json; meta.json
    last, so its presence means the folder is complete, then ``latest`` names it. Each lands
    only once everything before it is on disk (a power loss leaves the old checkpoint named,
    never a "complete" one with cut weights). Every process must call this (sharded states
    gather)."""
    folder.mkdir(parents=True, exist_ok=True)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        # Rewriting a folder (a replay after a lost cursor commit): incomplete until the
        # new meta.json lands, and no stale optimizer state beside the new weights.
        (folder / META).unlink(missing_ok=True)
        if not with_state:
            shutil.rmtree(folder / STATE, ignore_errors=True)
        fsync_dir(folder)  # the unlink on disk before the weights are rewritten in place
    accelerator.wait_for_everyone()
    from safetensors import SafetensorError

    state_dict = accelerator.get_state_dict(model)
    try:
        accelerator.unwrap_model(model).save_pretrained(
            str(folder),
            is_main_process=accelerator.is_main_process,
            save_function=accelerator.save,
            state_dict=state_dict,
            safe_serialization=True,
        )
    except SafetensorError as exc:  # its own type for the system's refusal (a full disk)
        raise _os_error(exc, folder) from None
    if with_state:
        accelerator.save_state(str(folder / STATE))
        accelerator.wait_for_everyone()  # every rank's RNG file written before the fsync
    if accelerator.is_main_process:
        tokenizer.save_pretrained(str(folder))
        fsync_tree(folder)
        write_json_atomic(folder / META, {**meta, "train_state": with_state})
        write_text_atomic(folder.parent / LATEST, folder.name + "\n")
    accelerator.wait_for_everyone()
    return folder


def add_state(accelerator: Any, folder: Path) -> None:
    """Give a checkpoint saved without ``train_state/`` one (the last of an online run, so a
    restart resumes it exactly). Every process must call this."""
    accelerator.save_state(str(folder / STATE))
    accelerator.wait_for_everyone()  # every rank's RNG file written before the fsync
    if accelerator.is_main_process:
        fsync_tree(folder)
        write_json_atomic(folder / META, {**read_meta(folder), "train_state": True})
    accelerator.wait_for_everyone()


def has_state(folder: Path) -> bool:
    """A complete checkpoint that carries optimizer state (older ones always did)."""
    meta = folder / META
    if not meta.exists() or not (folder / STATE).is_dir():
        return False
    try:
        return bool(json.loads(meta.read_text()).get("train_state", True))
    except ValueError:
        return False


def checkpoints_in(output_dir: Path) -> list[tuple[int, Path]]:
    """The ``ckpt-NNNNNN`` folders of a run, oldest first, complete or not."""
    out = []
    if output_dir.is_dir():
        for p in output_dir.iterdir():
            m = _CKPT.fullmatch(p.name)
            if m and p.is_dir():
                out.append((int(m.group(1)), p))
    return sorted(out)


def refuse_earlier_run(output_dir: Path, metrics_name: str) -> None:
    """A fresh run must not land in a folder holding another run: it cut that run's
    metrics to nothing and mixed its checkpoints with the new ones (``latest`` on the new,
    the old ones left beside them). ``--resume`` continues it; a new ``-o`` starts anew."""
    ckpts = checkpoints_in(output_dir)
    metrics = output_dir / metrics_name
    rows = metrics.is_file() and metrics.stat().st_size > 0
    if not ckpts and not rows:
        return
    held = f"checkpoints up to {ckpts[-1][1].name}" if ckpts else f"a {metrics_name}"
    raise ConfigError(
        f"train.output_dir: {output_dir} holds a run already ({held}); "
        "--resume latest continues it, or give a new -o for a new run"
    )


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint ``latest`` names in a run folder, else its newest complete one; None
    when ``run_dir`` holds no checkpoint (it is no run folder)."""
    marker = run_dir / LATEST
    if marker.is_file():
        # Written atomically now; one an older version tore (a crash mid-write: empty,
        # cut short, zeros or stray bytes) names no checkpoint and is passed over.
        name = marker.read_bytes().decode("ascii", "replace").strip()
        named = run_dir / name
        if _CKPT.fullmatch(name) and (named / META).exists():
            return named
    complete = [p for _, p in checkpoints_in(run_dir) if (p / META).exists()]
    return complete[-1] if complete else None


def refuse_run_folder(value: str, key: str) -> None:
    """A training run's folder (or its ``latest`` marker) given where a model folder goes:
    say so and name the checkpoint to pass, not only "not a local model folder"."""
    path = Path(value).expanduser()
    run_dir = path.parent if path.name == LATEST and path.is_file() else path
    ckpt = latest_checkpoint(run_dir) if run_dir.is_dir() else None
    if ckpt is None or (path / "config.json").exists():
        return
    what = "the latest marker of a training run" if run_dir != path else "a training run's folder"
    raise ConfigError(
        f"{key}: {value!r} is {what}, not a model folder; its latest checkpoint is {ckpt} "
        f"(pass that), or --resume latest -o {run_dir} continues the run"
    )


def state_source(folder: Path) -> Path | None:
    """Where resuming from ``folder`` takes its optimizer state: the folder itself, else the
    newest checkpoint before it (same run folder) that has some; None when none has."""
    if has_state(folder):
        return folder
    m = _CKPT.fullmatch(folder.name)
    if m is None:
        return None
    step = int(m.group(1))
    older = [p for s, p in checkpoints_in(folder.parent) if s < step and has_state(p)]
    return older[-1] if older else None


def advance_schedule(scheduler: Any, optimizer: Any, steps: int) -> None:
    """Move a LambdaLR ``steps`` updates on without stepping it (resuming on older optimizer
    state: the learning rate is the one of the update the weights are at)."""
    scheduler.last_epoch += steps
    lrs = [
        base * fn(scheduler.last_epoch)
        for base, fn in zip(scheduler.base_lrs, scheduler.lr_lambdas, strict=True)
    ]
    for group, lr in zip(optimizer.param_groups, lrs, strict=True):
        group["lr"] = lr
    scheduler._last_lr = lrs


def load_training_state(
    accelerator: Any, folder: Path, scheduler: Any, optimizer: Any, step: int
) -> str | None:
    """Resume the optimizer, scheduler and RNG for weights loaded from ``folder`` (at update
    ``step``): from its own ``train_state/``, else the newest older one, the schedule moved
    on to ``step``; else none (fresh moments). Returns a line to show when not its own."""
    source = state_source(folder)
    if source == folder:
        accelerator.load_state(str(folder / STATE))
        return None
    if source is None:
        return f"resume: weights of {folder.name}, no optimizer state before it (fresh)"
    accelerator.load_state(str(source / STATE))
    lag = step - int(read_meta(source).get("counts", {}).get("updates", 0))
    if lag > 0:
        advance_schedule(scheduler, optimizer, lag)
    return (
        f"resume: weights of {folder.name}, optimizer state of {source.name} ({lag} updates older)"
    )


@dataclass
class Retention:
    """What ``prune_checkpoints`` kept and deleted, for the run's summary."""

    kept: list[str] = field(default_factory=list)
    state: str | None = None  # the kept checkpoint a restart takes optimizer state from
    deleted: int = 0
    freed_bytes: int = 0

    def add(self, other: Retention) -> None:
        self.kept, self.state = other.kept, other.state
        self.deleted += other.deleted
        self.freed_bytes += other.freed_bytes

    def line(self) -> str:
        kept = ", ".join(self.kept) or "-"
        out = f"kept {kept}; optimizer state in {self.state or '-'}"
        if self.deleted:
            out += f"; deleted {self.deleted} older ({self.freed_bytes / 1e9:.2f} GB freed)"
        return out


def _size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def prune_checkpoints(output_dir: Path, keep: int, upto: int) -> Retention:
    """Delete the run's checkpoints up to step ``upto`` but the newest ``keep`` (0: keep
    all) and the newest one with optimizer state (the one a restart resumes from).

    Incomplete folders (a crash mid-save) older than a complete one go too. Folders past
    ``upto`` are left alone: a replay after a lost cursor commit rewrites them.
    """
    ckpts = [(s, p) for s, p in checkpoints_in(output_dir) if s <= upto]
    complete = [p for _, p in ckpts if (p / META).exists()]
    newest = max((s for s, p in ckpts if (p / META).exists()), default=None)
    with_state = [p for p in complete if has_state(p)]
    keep_set = set(complete[-keep:] if keep else complete)
    state = with_state[-1] if with_state else None
    if state is not None:
        keep_set.add(state)
    out = Retention(state=state.name if state else None)
    for s, p in ckpts:
        if p in keep_set or newest is None or s >= newest:
            continue
        size = _size(p)
        shutil.rmtree(p, ignore_errors=True)
        out.deleted += 1
        out.freed_bytes += size
    out.kept = [p.name for p in complete if p in keep_set]
    return out


def read_meta(folder: Path) -> dict[str, Any]:
    try:
        return json.loads((folder / META).read_text())
    except FileNotFoundError:
        raise ConfigError(f"{folder}: not a complete checkpoint (no {META})") from None
    except ValueError as exc:
        raise ConfigError(f"{folder / META}: not valid JSON: {exc}") from None


def _os_error(exc: Exception, folder: Path) -> OSError:
    """safetensors' error for a failed write as the OSError it wraps ("I/O error: No space
    left on device (os error 28)"), so `aw` says that of the folder, not a traceback."""
    m = re.search(r"\(os error (\d+)\)|code: (\d+)", str(exc))
    if m is None:
        return OSError(f"writing the weights failed: {exc}: {folder}")
    code = int(m.group(1) or m.group(2))
    return OSError(code, os.strerror(code), str(folder))


def resolve_resume(resume: str, output_dir: Path) -> Path:
    """`latest` -> the newest complete checkpoint under output_dir; anything else is a folder
    path. The one ``latest`` names can lack its meta.json: a rewrite of it (a replay after a
    lost cursor commit) that a full disk or a kill cut short."""
    if resume == LATEST:
        found = latest_checkpoint(output_dir)
        if found is None:
            raise ConfigError(f"train.resume: no checkpoint in {output_dir} to resume")
        return found
    folder = Path(resume)
    if not (folder / META).exists():
        raise ConfigError(f"train.resume: {folder} is not a checkpoint folder (no {META})")
    return folder


def model_policy_version(model_path: str) -> int:
    """The policy version a model folder carries (a trainer checkpoint's meta.json), else 0."""
    meta = Path(model_path) / META
    if meta.exists():
        try:
            return int(json.loads(meta.read_text()).get("policy_version", 0))
        except (ValueError, TypeError):
            return 0
    return 0
