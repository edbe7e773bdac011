"""A checkpoint is a folder: safetensors weights, tokenizer, meta.json saying what made it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from agentworld.errors import ConfigError

META = "meta.json"
STATE = "train_state"  # Accelerate's save_state: optimizer, scheduler, RNG (for --resume)
LATEST = "latest"


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write JSON so readers see the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def checkpoint_dir(output_dir: Path, step: int) -> Path:
    return output_dir / f"ckpt-{step:06d}"


def save_checkpoint(
    accelerator: Any, model: Any, tokenizer: Any, folder: Path, meta: dict[str, Any]
) -> Path:
    """Weights + tokenizer + training state + meta.json; meta.json last, so its presence
    means the folder is complete. Every process must call this (sharded states gather)."""
    folder.mkdir(parents=True, exist_ok=True)
    accelerator.wait_for_everyone()
    state_dict = accelerator.get_state_dict(model)
    accelerator.unwrap_model(model).save_pretrained(
        str(folder),
        is_main_process=accelerator.is_main_process,
        save_function=accelerator.save,
        state_dict=state_dict,
        safe_serialization=True,
    )
    accelerator.save_state(str(folder / STATE))
    if accelerator.is_main_process:
        tokenizer.save_pretrained(str(folder))
        write_json_atomic(folder / META, meta)
        (folder.parent / LATEST).write_text(folder.name + "\n")
    accelerator.wait_for_everyone()
    return folder


def read_meta(folder: Path) -> dict[str, Any]:
    try:
        return json.loads((folder / META).read_text())
    except FileNotFoundError:
        raise ConfigError(f"{folder}: not a complete checkpoint (no {META})") from None
    except ValueError as exc:
        raise ConfigError(f"{folder / META}: not valid JSON: {exc}") from None


def resolve_resume(resume: str, output_dir: Path) -> Path:
    """`latest` -> the newest checkpoint under output_dir; anything else is a folder path."""
    if resume == LATEST:
        marker = output_dir / LATEST
        if not marker.exists():
            raise ConfigError(f"train.resume: no checkpoint in {output_dir} to resume")
        return output_dir / marker.read_text().strip()
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
