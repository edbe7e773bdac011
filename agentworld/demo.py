"""`aw demo`: the whole loop on embedded defaults, offline, in a few minutes.

Serve the default model, record a tool-using math agent through the proxy into
a fresh pool, group its rollouts, train on them with GRPO, hot-reload the new
weights and show that the server now stamps policy version 1.
"""

from __future__ import annotations

from pathlib import Path

import typer

DEMO_AGENTS = """\
# Written by `aw demo`: the math agent, talking to the demo's embedded server.
[agents.math]
kind = "python"
description = "GSM8K-style solver with a calculator tool (OpenAI tool calls)"
function = "agentworld.run.agents.math_agent:solve"
max_turns = {max_turns}
concurrency = 16
episode_timeout_s = 900
upstream = "{upstream}"
model = "default"
engine = "vllm"
params = {{ temperature = 1.0, max_tokens = {max_tokens} }}
"""

DEMO_DATASETS = """\
# Written by `aw demo`: generated arithmetic tasks, scored by reasoning-gym's verifier.
[datasets.arithmetic]
description = "reasoning-gym basic_arithmetic"
source = {{ type = "reasoning-gym", task = "basic_arithmetic", config = {{ min_terms = 2, max_terms = 2, min_digits = 1, max_digits = 1, operators = ["+", "-", "*"], allow_parentheses = false, allow_negation = false }} }}
splits = {{ train = {{ size = 1000, seed = {seed} }} }}
scorer = "verifier"
"""


def demo(
    folder: Path = typer.Option(Path("aw-demo"), "--dir", help="Folder for the demo's files."),
    model: str | None = typer.Option(
        None, "--model", help="Local HF model folder (default: SmolLM2-135M-Instruct, offline)."
    ),
    tasks: int = typer.Option(4, min=1, help="Tasks to roll out."),
    n: int = typer.Option(4, "-n", min=2, help="Rollouts per task (one group)."),
    max_turns: int = typer.Option(3, min=1, help="Model calls per episode at most."),
    max_tokens: int = typer.Option(96, min=8, help="Tokens per model call at most."),
    train_steps: int = typer.Option(2, min=0, help="GRPO updates after collecting (0: none)."),
    seed: int = typer.Option(7, help="Task generator seed."),
) -> None:
    """Serve a model, record an agent's rollouts, train on them, reload: the whole loop."""
    import asyncio

    from rich.console import Console

    from agentworld.model_folder import default_aw_home, resolve_model

    console = Console(stderr=True, highlight=False)
    folder.mkdir(parents=True, exist_ok=True)
    console.rule("[bold]1. model")
    model_dir = resolve_model(model, default_aw_home() / "models")
    console.print(f"serving {model_dir}", markup=False)
    asyncio.run(
        _loop(
            console,
            folder.resolve(),
            model_dir,
            tasks=tasks,
            n=n,
            max_turns=max_turns,
            max_tokens=max_tokens,
            train_steps=train_steps,
            seed=seed,
        )
    )


async def _loop(
    console: object,
    folder: Path,
    model_dir: Path,
    *,
    tasks: int,
    n: int,
    max_turns: int,
    max_tokens: int,
    train_steps: int,
    seed: int,
) -> None:
    import asyncio

    import aiohttp
    from aiohttp import web
    from rich.console import Console

    from agentworld.pool import Pool
    from agentworld.run.session import RunOptions, run_session
    from agentworld.run.summary import render
    from agentworld.serve.engine import Engine
    from agentworld.serve.server import make_app

    assert isinstance(console, Console)
    # The GPU when there is one (the trainer below runs where Accelerate puts it: the same
    # device). float32 even there, where the engine's default is bf16: the trainer trains
    # fp32, so the served log-probs match its forward pass (fidelity); the demo's default
    # model has 135M parameters, so fp32 costs little.
    engine = Engine(model_dir, device="auto", dtype="float32", max_batch_size=16)
    console.print(f"engine on {engine.device} ({str(engine.dtype).removeprefix('torch.')})")
    runner = web.AppRunner(make_app(engine), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    serve_url = f"http://127.0.0.1:{port}"
    try:
        agents_path = folder / "agents.toml"
        datasets_path = folder / "datasets.toml"
        agents_path.write_text(
            DEMO_AGENTS.format(
                upstream=f"{serve_url}/v1", max_turns=max_turns, max_tokens=max_tokens
            )
        )
        datasets_path.write_text(DEMO_DATASETS.format(seed=seed))
        pool_path = folder / "pool"
        Pool.create(pool_path).close()

        console.rule("[bold]2. rollouts through the recording proxy")
        console.print(f"{tasks} tasks x {n} rollouts of the math agent; this takes a few minutes")
        opts = RunOptions(
            agent="math",
            dataset="arithmetic",
            agents_path=agents_path,
            datasets_path=datasets_path,
            limit=tasks,
            n=n,
            pool=pool_path,
        )
        done = [0]

        def on_result(result: object) -> None:
            done[0] += 1
            console.print(f"  rollout {done[0]}/{tasks * n} finished", highlight=False)

        _report, summary = await run_session(opts, on_result=on_result)
        Console().print(render(summary))

        pool = Pool.open(pool_path)
        stats = pool.index().stats()
        pool.close()
        console.print(
            f"pool: {stats['steps']} steps in {stats['trajectories']} trajectories, "
            f"{stats['engine_token_steps']} with engine token ids, "
            f"{stats['completion_tokens']} completion tokens"
        )

        if train_steps:
            console.rule("[bold]3. GRPO on the collected groups")
            ckpt = await asyncio.to_thread(
                _train, console, model_dir, pool_path, folder / "runs" / "grpo", train_steps
            )
            if ckpt is not None:
                console.rule("[bold]4. hot reload")
                async with aiohttp.ClientSession() as http:
                    resp = await http.post(f"{serve_url}/aw/reload", json={"path": str(ckpt)})
                    body = await resp.json()
                console.print(
                    f"server reloaded {ckpt.name}: policy version {body.get('policy_version')}; "
                    "the next rollouts are stamped with it"
                )
    finally:
        await runner.cleanup()
        engine.close()

    console.rule("[bold]next")
    # Paths print as they are ("[x]" in one is not markup).
    console.print(f"look:   aw tui --pool {folder / 'pool'}", markup=False)
    console.print(f"list:   aw pool ls --pool {folder / 'pool'}", markup=False)
    console.print(
        f"train:  aw train --pool {folder / 'pool'} --agent math --dataset arithmetic "
        f"--algo grpo --model {model_dir} -o {folder / 'runs' / 'grpo-more'}",
        markup=False,
    )


def _train(console: object, model_dir: Path, pool: Path, out: Path, steps: int) -> Path | None:
    from agentworld.errors import AgentWorldError
    from agentworld.train.config import TrainConfig
    from agentworld.train.loop import train

    cfg = TrainConfig(
        model=str(model_dir),
        algo="grpo",
        agent="math",
        dataset="arithmetic",
        pool=str(pool),
        output_dir=str(out),
        max_steps=steps,
        lr=1e-6,
        batch_tokens=8192,
        mixed_precision="no",  # fp32 like the demo's engine, whatever the environment says
    )
    try:
        summary = train(cfg, console=console)  # type: ignore[arg-type]
    except AgentWorldError as exc:
        # Honest about the usual cause on a tiny model: every rollout of a task got
        # the same reward, so GRPO has no signal to learn from.
        console.print(f"no training: {exc}", markup=False)  # type: ignore[attr-defined]
        return None
    ckpt = summary.get("checkpoint")
    return Path(ckpt) if ckpt else None
