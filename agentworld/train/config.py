"""The trainer's one config: defaults < TOML recipe `[train]` < CLI flags < `--set key=value`."""

from __future__ import annotations

import dataclasses
import math
import tomllib
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentworld.errors import ConfigError, did_you_mean
from agentworld.pool.labels import QUALITIES
from agentworld.pool.selection import TRAJECTORY_STATUSES
from agentworld.server_url import server_base

ALGOS = ("sft", "grpo", "ppo")
NORMALISERS = ("grpo", "dr_grpo", "dapo")
MIXED_PRECISIONS = ("no", "bf16", "fp16")
# Accelerate's trackers (accelerate.utils.LoggerType); "none" logs to metrics.jsonl only.
TRACKERS = (
    "tensorboard", "wandb", "trackio", "mlflow", "comet_ml", "aim", "clearml", "dvclive",
    "swanlab", "all",
)  # fmt: skip


@dataclass(frozen=True)
class TrainConfig:
    """Everything one training run needs, resolved once at the edge."""

    model: str = ""
    algo: str = "sft"
    agent: str | None = None
    dataset: str | None = None
    split: str | None = None
    pool: str = "pool"
    output_dir: str = "runs/train"
    # Which trajectories: status, rewards, curation, policy-version window.
    status: tuple[str, ...] = ("done",)
    min_reward: float | None = None
    max_reward: float | None = None
    quality: tuple[str, ...] = ()
    tag: str | None = None
    min_policy: int | None = None
    max_policy: int | None = None
    max_staleness: int | None = None  # drop trajectories older than current version - this
    include_journals: bool = False  # unsealed data is not reproducible; online mode reads it
    # Sequences and batches.
    merge: bool = True
    max_seq_len: int = 4096
    batch_tokens: int = 16384  # rows x padded length per micro-batch
    buffer_trajectories: int = 256  # trajectories sorted by length together
    # Optimisation.
    lr: float = 1e-5
    weight_decay: float = 0.0
    warmup_steps: int = 0
    max_steps: int = 100  # optimizer updates
    # Passes over an offline plan: one, as TRL/verl do; a replay (epochs > 1) is asked for,
    # and clipped against the rollout policy that sampled it. None: cycle until max_steps.
    epochs: int | None = 1
    grad_accum: int = 1
    max_grad_norm: float = 1.0
    seed: int = 0
    # Autocast compute dtype; weights, optimizer and checkpoints stay fp32. None: what
    # `accelerate launch` / its config / ACCELERATE_MIXED_PRECISION say (default "no").
    mixed_precision: str | None = None
    # Memory: the micro-batch runs forward+backward in parts of at most this many padded
    # tokens (gradients accumulate; the loss is the same), with activation checkpointing.
    forward_tokens: int = 4096
    logits_chunk_tokens: int = 1024  # sampled positions projected to the vocabulary at once
    gradient_checkpointing: bool = True
    # Reinforcement learning.
    normaliser: str = "dapo"  # token-mean, as verl's default and TRL's loss_type "dapo"
    # dr_grpo's constant: a sequence's generation budget in tokens (TRL's max_completion_length,
    # 512), not max_seq_len, the whole context (its updates were ~100x smaller than dapo's).
    max_completion_len: int = 512
    clip_low: float = 0.2
    clip_high: float = 0.2
    ratio_cap: float = 3.0  # dual-clip bound on negative-advantage tokens; 0 disables
    tis_cap: float = 2.0  # truncated importance sampling: weight min(r, tis_cap); 0 disables
    # Trajectories that ended by an infrastructure failure (an upstream error, a cut call,
    # a timeout, a cancelled run, a lost proxy) are no evidence about the model.
    include_infra_failures: bool = False
    kl_coef: float = 0.0
    ref_model: str | None = None
    skip_zero_advantage: bool = True
    # Checks and outputs.
    fidelity_tolerance: float = 1e-2
    save_every: int = 0  # 0: only at the end
    keep_checkpoints: int = 3  # the newest this many (+ the newest with optimizer state); 0: all
    log_every: int = 1
    report_to: tuple[str, ...] = ()  # Accelerate trackers, e.g. "tensorboard"; () or "none": none
    policy_version: int | None = None  # start version; default: the model's meta.json or 0
    resume: str | None = None
    progress: bool = True
    # Online loop.
    online: bool = False
    consumer: str = "train"
    group_size: int = 0
    groups_per_update: int = 1
    reload_every: int = 1
    state_every: int = 10  # online: optimizer state with every Nth checkpoint (weights: every one)
    serve_url: str | None = None
    proxy_url: str | None = None
    poll_interval_s: float = 2.0
    idle_exit_s: float = 0.0  # 0: wait for new groups forever
    # A server or proxy that refuses the reload's connection (restarting) is asked again
    # for this long before the run stops.
    reload_retry_s: float = 60.0

    def __post_init__(self) -> None:
        if self.algo not in ALGOS:
            raise ConfigError(f"train.algo: must be one of {list(ALGOS)}, got {self.algo!r}")
        if self.normaliser not in NORMALISERS:
            raise ConfigError(
                f"train.normaliser: must be one of {list(NORMALISERS)}, got {self.normaliser!r}"
            )
        if self.mixed_precision is not None and self.mixed_precision not in MIXED_PRECISIONS:
            raise ConfigError(
                f"train.mixed_precision: must be one of {list(MIXED_PRECISIONS)}, "
                f"got {self.mixed_precision!r}"
            )
        if self.report_to == ("none",):
            object.__setattr__(self, "report_to", ())
        bad = [t for t in self.report_to if t not in TRACKERS]
        if bad:
            raise ConfigError(
                f"train.report_to: unknown tracker {bad[0]!r}; known: {['none', *TRACKERS]}"
            )
        if self.keep_checkpoints < 0:
            raise ConfigError("train.keep_checkpoints: must be 0 (keep all) or more")
        for key in (
            "max_seq_len", "batch_tokens", "buffer_trajectories", "grad_accum", "state_every",
            "reload_every", "forward_tokens", "logits_chunk_tokens", "log_every", "max_steps",
            "max_completion_len",
        ):  # fmt: skip
            if getattr(self, key) < 1:
                raise ConfigError(f"train.{key}: must be at least 1, got {getattr(self, key)}")
        # A negative warm-up made the learning rate negative (gradient ascent); a zero
        # max_grad_norm clipped every gradient to nothing; a clip range outside [0, 1)
        # clamps every ratio. Each trained without a word.
        for key, low in (
            ("lr", "0 or more"), ("max_grad_norm", "above 0"), ("warmup_steps", "0 or more"),
            ("save_every", "0 (only at the end) or more"), ("weight_decay", "0 or more"),
            ("kl_coef", "0 or more"), ("clip_high", "0 or more"), ("reload_retry_s", "0 or more"),
        ):  # fmt: skip
            value = getattr(self, key)
            if not math.isfinite(value) or (value <= 0 if low == "above 0" else value < 0):
                raise ConfigError(f"train.{key}: must be {low}, got {value:g}")
        if self.algo == "sft" and self.kl_coef > 0:
            # SFT's loss has no KL term: the reference model was loaded and never used.
            raise ConfigError(
                f"train.kl_coef: --algo sft adds no KL term, got {self.kl_coef:g}; "
                "set it to 0, or train with --algo grpo or ppo"
            )
        if not 0 <= self.clip_low < 1:  # the ratio's floor, 1 - clip_low, must stay above 0
            raise ConfigError(f"train.clip_low: must be in [0, 1), got {self.clip_low:g}")
        if not (self.ratio_cap == 0 or self.ratio_cap > 1):  # dual clip: a bound above 1
            raise ConfigError(
                f"train.ratio_cap: must be 0 (off) or above 1, got {self.ratio_cap:g}"
            )
        if self.max_seq_len > self.batch_tokens:
            raise ConfigError("train.batch_tokens: must be at least train.max_seq_len")
        if self.epochs is not None and self.epochs < 1:
            raise ConfigError("train.epochs: must be at least 1 (or empty: until max_steps)")
        if self.tis_cap < 0 or 0 < self.tis_cap < 1:
            # Below 1 it would down-weight tokens the trainer and the rollout agree on.
            raise ConfigError(f"train.tis_cap: must be 0 (off) or at least 1, got {self.tis_cap:g}")
        for key, known in (("status", TRAJECTORY_STATUSES), ("quality", QUALITIES)):
            bad = [v for v in getattr(self, key) if v not in known]
            if bad:
                raise ConfigError(f"train.{key}: unknown {key} {bad[0]!r}; known: {list(known)}")
        if self.online and self.group_size < 1:
            raise ConfigError(
                "train.group_size: --online needs the group size (--set group_size=N)"
            )
        for key, example in (("serve_url", "http://127.0.0.1:8000"), ("proxy_url", None)):
            url = getattr(self, key)
            if (
                url is not None
            ):  # a client's base URL pasted (…/v1): its /aw/ routes are at the root
                base = server_base(url, f"train.{key}", example or "http://127.0.0.1:4000")
                object.__setattr__(self, key, base)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def to_toml(self) -> str:
        """The resolved config as a `[train]` table that `--recipe` reads back: what trains,
        not how this run was started (``resume`` would make every run of the recipe look
        for a checkpoint in its own new folder)."""
        lines = ["[train]"]
        for key, value in self.to_dict().items():
            if value is not None and key != "resume":
                lines.append(f"{key} = {_toml_value(value)}")
        return "\n".join(lines) + "\n"


def _plain(v: Any) -> Any:
    return list(v) if isinstance(v, tuple) else v


def _toml_value(v: Any) -> str:
    import json

    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, str):
        return json.dumps(v)
    return repr(v)


_HINTS = typing.get_type_hints(TrainConfig)


def _coerce(key: str, value: Any, where: str) -> Any:
    """Check one value against the field's type; strings from --set are parsed leniently."""
    hint = _HINTS[key]
    args = typing.get_args(hint)
    optional = isinstance(hint, types.UnionType) and type(None) in args
    base = next((a for a in args if a is not type(None)), hint) if optional else hint
    if value is None or (optional and value == ""):
        if optional:
            return None
        raise ConfigError(f"{where}: {key} cannot be empty")
    origin = typing.get_origin(base)
    try:
        if origin is tuple:
            if isinstance(value, str):
                value = [x.strip() for x in value.split(",") if x.strip()]
            if not isinstance(value, list | tuple) or not all(isinstance(x, str) for x in value):
                raise TypeError
            return tuple(value)
        if base is bool:
            if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
                return value.lower() in ("true", "1")
            if not isinstance(value, bool):
                raise TypeError
            return value
        if base is int:
            if isinstance(value, bool):
                raise TypeError
            if isinstance(value, float) and not value.is_integer():
                raise TypeError
            return int(value)
        if base is float:
            if isinstance(value, bool):
                raise TypeError
            return float(value)
        if base is str:
            if not isinstance(value, str):
                raise TypeError
            return value
    except (TypeError, ValueError):
        pass
    else:
        return value
    name = getattr(base, "__name__", str(base))
    raise ConfigError(f"{where}: {key} expects {name}, got {value!r}")


def parse_set(items: Sequence[str]) -> dict[str, Any]:
    """`key=value` strings; values read as TOML when they parse, else as plain strings."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip().removeprefix("train.")
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected key=value")
        try:
            out[key] = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            out[key] = raw
    return out


def read_recipe(path: Path) -> dict[str, Any]:
    """The `[train]` table of a TOML recipe, the one table a recipe holds."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"--recipe {path}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"--recipe {path}: is a folder, not a TOML file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    _check_top_level(path, data)
    table = data.get("train", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [train] must be a table")
    return table


def _check_top_level(path: Path, data: Mapping[str, Any]) -> None:
    """Refuse keys outside `[train]`, which nothing reads.

    A recipe missing its `[train]` line would otherwise train on the defaults without a word.
    """
    extra = sorted(set(data) - {"train"})
    if not extra:
        return
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    misplaced = [key for key in extra if key in fields]
    if misplaced:
        keys, belong = ("key", "belongs") if len(misplaced) == 1 else ("keys", "belong")
        raise ConfigError(
            f"{path}: top-level {keys} {', '.join(map(repr, misplaced))} {belong} in [train]"
            " (a recipe's keys go below a [train] line)"
        )
    raise ConfigError(
        f"{path}: unknown top-level key {extra[0]!r} (a recipe holds one [train] table)"
    )


def load_config(
    recipe: Path | None = None,
    flags: Mapping[str, Any] | None = None,
    sets: Sequence[str] = (),
    default_model: Callable[[TrainConfig], str] | None = None,
) -> TrainConfig:
    """Resolve defaults, then the recipe, then CLI flags (None = not given), then --set;
    ``default_model`` names the model when none of them does, from the config resolved so
    far (called only then: it may convert the embedded model on first use)."""
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    values: dict[str, Any] = {}
    layers: list[tuple[str, Mapping[str, Any]]] = []
    if recipe is not None:
        layers.append((f"{recipe} [train]", read_recipe(recipe)))
    layers.append(("command line", {k: v for k, v in (flags or {}).items() if v is not None}))
    layers.append(("--set", parse_set(sets)))
    for where, layer in layers:
        for key, value in layer.items():
            if key not in known:
                raise ConfigError(f"{where}: unknown key {key!r}{did_you_mean(key, known)}")
            values[key] = _coerce(key, value, where)
    cfg = TrainConfig(**values)
    if not cfg.model and default_model is not None:
        cfg = dataclasses.replace(cfg, model=default_model(cfg))
    if not cfg.model:
        raise ConfigError("train.model: required (--model PATH or model = ... in the recipe)")
    return cfg
