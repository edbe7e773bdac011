"""`aw train`: resolve the config at the edge, then hand it to the one training function."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from agentworld.cli_options import AGENT_FILTER, DATASET_FILTER, POOL_OPTION, SPLIT_FILTER

if TYPE_CHECKING:
    from agentworld.train.config import TrainConfig

_DEFAULT_POOL = Path("pool")


def train(
    model: str = typer.Option(
        None,
        "--model",
        "-m",
        help="Model folder (HF format) to train. Default: SmolLM2-135M-Instruct, as `aw serve`.",
    ),
    agent: str = AGENT_FILTER,
    dataset: str = DATASET_FILTER,
    split: str = SPLIT_FILTER,
    algo: str = typer.Option(None, "--algo", help="sft, grpo or ppo."),
    recipe: Path = typer.Option(None, "--recipe", "-r", help="TOML file with a \\[train] table."),
    sets: list[str] = typer.Option(
        [], "--set", help="Override one config key: --set lr=1e-6 (repeatable)."
    ),
    output_dir: str = typer.Option(None, "--output", "-o", help="Checkpoints and metrics go here."),
    max_steps: int = typer.Option(None, "--max-steps", help="Optimizer updates to run."),
    resume: str = typer.Option(None, "--resume", help="Checkpoint folder, or 'latest'."),
    online: bool = typer.Option(
        None, "--online/--offline", help="Train on groups as they land; reload the server."
    ),
    serve_url: str = typer.Option(None, "--serve-url", help="`aw serve`/vLLM to reload (online)."),
    proxy_url: str = typer.Option(None, "--proxy-url", help="Proxy to tell the policy version."),
    pool: Path = POOL_OPTION,
) -> None:
    """Train a policy from the pool (SFT, GRPO, PPO) with Accelerate; CPU or `accelerate launch`."""
    from agentworld.model_folder import default_aw_home, resolve_model
    from agentworld.train.config import load_config

    flags = {
        "model": model,
        "agent": agent,
        "dataset": dataset,
        "split": split,
        "algo": algo,
        "output_dir": output_dir,
        "max_steps": max_steps,
        "resume": resume,
        "online": online,
        "serve_url": serve_url,
        "proxy_url": proxy_url,
        # The option always has a value; a recipe's `pool` wins over the bare default.
        "pool": None if pool == _DEFAULT_POOL else str(pool),
    }
    cfg = load_config(
        recipe,
        flags,
        sets,
        default_model=lambda cfg: (
            resumed_base_model(cfg)
            # The embedded model `aw serve` and `aw demo` use: a first run needs no --model.
            or str(resolve_model(None, default_aw_home() / "models"))
        ),
    )
    try:
        import accelerate  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        from agentworld.errors import MissingExtraError

        raise MissingExtraError(exc.name or "torch", "train") from None
    from agentworld.train.loop import train as run_training

    summary = run_training(cfg)
    fid = summary.get("fidelity")
    if fid is not None and not fid.ok:
        typer.echo(f"aw train: warning: {fid.line()}", err=True)
    if summary.get("interrupted"):
        saved = summary.get("checkpoint")
        where = f"saved {saved}; --resume latest continues it" if saved else "nothing to save"
        typer.echo(f"aw train: interrupted after update {summary['step']}: {where}", err=True)
        raise typer.Exit(130)


def resumed_base_model(cfg: TrainConfig) -> str | None:
    """The model a resumed run started from (its checkpoint's ``base_model``): a resume
    without --model continues that run, not one from the embedded default (whose other
    vocabulary then served as the KL reference, and was recorded as the base)."""
    if not cfg.resume:
        return None
    from agentworld.train.checkpoint import read_meta, resolve_resume

    base = read_meta(resolve_resume(cfg.resume, Path(cfg.output_dir))).get("base_model")
    return base if isinstance(base, str) and base else None
