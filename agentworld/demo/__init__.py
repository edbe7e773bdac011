"""`aw demo`: the whole loop on embedded defaults, offline, and an agent that gets better.

Serve the default model, evaluate a single-turn answer agent on held-out
arithmetic tasks, then run on-policy GRPO for several iterations (roll a group
out per task through the recording proxy with the current policy, one update on
those groups, hot-reload the server, repeat), evaluate again on the same
held-out tasks and print the before/after success with standard errors and the
per-iteration training reward. Task files and results land in the demo folder.
"""

from __future__ import annotations

import json
import resource
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import typer

from agentworld.demo.tasks import DATASET, EVAL_AGENT, TRAIN_AGENT, write_demo_files


def demo(
    folder: Path = typer.Option(Path("aw-demo"), "--dir", help="Folder for the demo's files."),
    model: str | None = typer.Option(
        None, "--model", help="Local HF model folder (default: SmolLM2-135M-Instruct, offline)."
    ),
    eval_tasks: int = typer.Option(
        100, "--eval-tasks", min=1, help="Held-out tasks, evaluated before and after."
    ),
    iterations: int = typer.Option(6, min=0, help="GRPO iterations (0: evaluate only)."),
    tasks: int = typer.Option(4, min=1, help="Tasks (groups) per iteration."),
    n: int = typer.Option(8, "-n", min=2, help="Rollouts per task (one group)."),
    max_tokens: int = typer.Option(24, min=4, help="Tokens per answer at most."),
    temperature: float = typer.Option(1.0, min=0.0, help="Sampling temperature of rollouts."),
    lr: float = typer.Option(3e-5, min=0.0, help="GRPO learning rate."),
    seed: int = typer.Option(
        7, help="Seed of the task split, the rollouts' sampling, the trainer."
    ),
) -> None:
    """Serve a model, evaluate, train it with on-policy GRPO through the proxy, evaluate again."""
    import asyncio

    from rich.console import Console

    from agentworld.model_folder import default_aw_home, resolve_model

    console = Console(stderr=True, highlight=False)
    folder.mkdir(parents=True, exist_ok=True)
    console.rule("[bold]1. model")
    model_dir = resolve_model(model, default_aw_home() / "models")
    console.print(f"serving {model_dir}", markup=False)
    settings = DemoSettings(
        eval_tasks=eval_tasks,
        iterations=iterations,
        tasks=tasks,
        n=n,
        max_tokens=max_tokens,
        temperature=temperature,
        lr=lr,
        seed=seed,
    )
    asyncio.run(_loop(console, folder.resolve(), model_dir, settings))


@dataclass(frozen=True)
class DemoSettings:
    """The demo's sizes (the CLI's flags), in one place for the loop and its results file."""

    eval_tasks: int = 100
    iterations: int = 6
    tasks: int = 4
    n: int = 8
    max_tokens: int = 24
    temperature: float = 1.0
    lr: float = 3e-5
    seed: int = 7

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


async def _loop(console: object, folder: Path, model_dir: Path, settings: DemoSettings) -> None:
    import asyncio

    import aiohttp
    from aiohttp import web
    from rich.console import Console

    from agentworld.demo.report import (
        after_table,
        iteration_line,
        iteration_row,
        iterations_table,
        lift_line,
    )
    from agentworld.model_folder import hf_progress_bars
    from agentworld.pool import Pool
    from agentworld.run.evaluate import evaluate, evaluation_of, lift
    from agentworld.run.session import RunOptions, run_session
    from agentworld.seeds import derive
    from agentworld.serve.engine import Engine
    from agentworld.serve.server import make_app

    assert isinstance(console, Console)
    t_wall, cpu0 = time.perf_counter(), _cpu_s()
    # The GPU when there is one (the trainer below runs where Accelerate puts it: the same
    # device). float32 even there, where the engine's default is bf16: the trainer trains
    # fp32, so the served log-probs match its forward pass (fidelity); the demo's default
    # model has 135M parameters, so fp32 costs little.
    with hf_progress_bars(False):  # the line below says it loaded
        engine = Engine(model_dir, device="auto", dtype="float32", max_batch_size=32)
    console.print(f"engine on {engine.device} ({str(engine.dtype).removeprefix('torch.')})")
    runner = web.AppRunner(make_app(engine), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    serve_url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    pool_path = folder / "pool"
    s = settings
    try:
        split = write_demo_files(
            folder,
            upstream=f"{serve_url}/v1",
            eval_tasks=s.eval_tasks,
            iterations=s.iterations,
            tasks_per_iteration=s.tasks,
            max_tokens=s.max_tokens,
            temperature=s.temperature,
            seed=s.seed,
        )
        earlier = keep_earlier_run(folder)
        if earlier is not None:
            console.print(
                f"note: the run before this one (its pool, checkpoints, results) is kept in "
                f"{earlier}; this one starts an empty pool",
                markup=False,
            )
        Pool.create(pool_path).close()
        if split.reused:
            console.print(
                f"note: {s.iterations} x {s.tasks} training tasks exceed the "
                f"{split.train_pool} not held out; later iterations reuse earlier ones"
            )

        def opts(agent: str, split_name: str, n: int = 1, seed: int | None = None) -> RunOptions:
            return RunOptions(
                agent=agent,
                dataset=DATASET,
                agents_path=folder / "agents.toml",
                datasets_path=folder / "datasets.toml",
                split=split_name,
                n=n,
                pool=pool_path,
                seed=seed,
            )

        console.rule("[bold]2. held-out evaluation, before")
        console.print(
            f"{s.eval_tasks} held-out tasks (1-digit + and -, none of them trained on), "
            "greedy, scored 1 for the exact number else 0"
        )
        version = engine.policy_version
        before, _ = await evaluate(opts(EVAL_AGENT, "heldout"), policy_version=version)
        console.print(
            f"before: {before.successes}/{before.n} = {before.rate:.3f} ± {before.stderr:.3f}"
        )

        console.rule(f"[bold]3. on-policy GRPO, {s.iterations} iterations")
        console.print(
            f"each: {s.tasks} new tasks x {s.n} rollouts at temperature {s.temperature} through "
            f"the proxy -> one GRPO update (lr {s.lr:g}) -> POST /aw/reload"
        )
        rows: list[dict[str, object]] = []
        current = model_dir
        async with aiohttp.ClientSession() as http:
            for it in range(1, s.iterations + 1):
                t_it = time.perf_counter()
                # Seeded rollouts: the same --seed, the same run (sampling included).
                rollout_opts = opts(TRAIN_AGENT, f"iter-{it:02d}", s.n, derive(s.seed, it))
                report, _summary = await run_session(rollout_opts)
                rollouts = evaluation_of([r.reward for r in report.results])
                ckpt, train_info = await _train(folder, current, pool_path, it, version, s)
                if ckpt is not None:
                    resp = await http.post(f"{serve_url}/aw/reload", json={"path": str(ckpt)})
                    version = int((await resp.json())["policy_version"])
                    if current != model_dir:
                        # the server and trainer now hold the new one (off the loop: ~1.6 GB)
                        await asyncio.to_thread(_drop_checkpoint, current)
                    current = ckpt
                row = iteration_row(it, report.results, rollouts, train_info, version)
                row["wall_s"] = round(time.perf_counter() - t_it, 1)
                rows.append(row)
                console.print(iteration_line(row, s.iterations), markup=False)

        console.rule("[bold]4. held-out evaluation, after")
        after, _ = await evaluate(opts(EVAL_AGENT, "heldout"), policy_version=version)
        console.print(f"after: {after.successes}/{after.n} = {after.rate:.3f} ± {after.stderr:.3f}")
    finally:
        await runner.cleanup()
        engine.close()

    cpu_s, wall_s = _cpu_s() - cpu0, time.perf_counter() - t_wall
    out = Console()  # results on stdout; progress went to stderr
    out.print(iterations_table(rows, title="GRPO iterations: training reward by policy version"))
    out.print(after_table(before, after))
    out.print(lift_line(lift(before, after)))
    out.print(f"time: {wall_s:.0f} s wall, {cpu_s:.0f} s CPU (user+sys, this process tree)")
    results = {
        "settings": settings.as_dict(),
        "model": str(model_dir),
        "before": {"successes": before.successes, "n": before.n, "policy_version": 0},
        "after": {"successes": after.successes, "n": after.n, "policy_version": version},
        "iterations": rows,
        "wall_s": round(wall_s, 1),
        "cpu_s": round(cpu_s, 1),
    }
    (folder / "results.json").write_text(json.dumps(results, indent=1) + "\n")

    console.rule("[bold]next")
    # Paths print as they are ("[x]" in one is not markup).
    console.print(f"results: {folder / 'results.json'}", markup=False)
    console.print(f"look:    aw tui --pool {pool_path}", markup=False)
    console.print(f"list:    aw pool ls --pool {pool_path}", markup=False)


def _cpu_s() -> float:
    """User + system CPU seconds of this process and its waited-for children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


# What one run leaves in the demo's folder, beside the files every run writes anew.
RUN_OUTPUTS = ("pool", "runs", "results.json")


def keep_earlier_run(folder: Path) -> Path | None:
    """Move what an earlier run left in ``folder`` to ``folder/earlier/<UTC time>``; its path.

    Each iteration trains on its own groups (split ``iter-NN``) in the run's pool: an
    earlier run's groups of the same split, by other policies, would join them (off-policy,
    and twice the rows). Nothing is deleted: the earlier pool opens as it was.
    """
    found = [folder / name for name in RUN_OUTPUTS if (folder / name).exists()]
    if not found:
        return None
    when = max(p.stat().st_mtime for p in found)
    dest = folder / "earlier" / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(when))
    k = 1
    while dest.exists():
        k += 1
        dest = dest.with_name(f"{dest.name.split('-')[0]}-{k}")
    dest.mkdir(parents=True)
    for p in found:
        p.rename(dest / p.name)
    return dest


def _drop_checkpoint(folder: Path) -> None:
    """Delete a superseded iteration's checkpoint (weights + optimizer: ~1.6 GB each)."""
    import shutil

    shutil.rmtree(folder, ignore_errors=True)


async def _train(
    folder: Path, model: Path, pool: Path, it: int, version: int, s: DemoSettings
) -> tuple[Path | None, dict[str, object]]:
    """One GRPO update on this iteration's groups, from the current policy; its checkpoint.

    In a fresh process each time: the trainer's model, optimizer state and logits
    (~4 GB for SmolLM2-135M) are then handed back to the OS after every update. Run
    in this process, the second update took the demo past a 6 GB memory cap.
    """
    import asyncio

    # From a thread: the executor's start and its shutdown (joining the process while it
    # hands its memory back, ~0.7 s) would otherwise hold up the event loop, the server's.
    return await asyncio.to_thread(_train_in_fresh_process, folder, model, pool, it, version, s)


def _train_in_fresh_process(
    folder: Path, model: Path, pool: Path, it: int, version: int, s: DemoSettings
) -> tuple[Path | None, dict[str, object]]:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("spawn")  # no copy of the server's torch state
    with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool_exec:
        return pool_exec.submit(_train_sync, folder, model, pool, it, version, s).result()


def _train_sync(
    folder: Path, model: Path, pool: Path, it: int, version: int, s: DemoSettings
) -> tuple[Path | None, dict[str, object]]:
    from rich.console import Console

    from agentworld.errors import AgentWorldError
    from agentworld.train.config import TrainConfig
    from agentworld.train.loop import train

    out = folder / "runs" / "grpo" / f"iter-{it:02d}"
    out.mkdir(parents=True, exist_ok=True)
    cfg = TrainConfig(
        model=str(model),
        algo="grpo",
        agent=TRAIN_AGENT,
        dataset=DATASET,
        split=f"iter-{it:02d}",  # this iteration's groups only: on-policy
        pool=str(pool),
        output_dir=str(out),
        policy_version=version,
        max_steps=1,
        epochs=1,
        # One micro-batch holds the whole iteration (tasks x n short rows), so the
        # iteration is exactly one update on-policy.
        batch_tokens=max(4096, s.tasks * s.n * 160),
        max_seq_len=512,
        lr=s.lr,
        seed=s.seed + it,
        progress=False,
        mixed_precision="no",  # fp32 like the demo's engine, whatever the environment says
    )
    with open(out / "train.log", "w") as log:
        try:
            summary = train(cfg, console=Console(file=log, width=120))
        except AgentWorldError as exc:
            # The usual cause: every rollout of every group got the same reward, so
            # GRPO has no signal; the policy stays as it is for the next iteration.
            return None, {"skipped": str(exc)}
    ckpt = summary.get("checkpoint")
    info = {k: summary.get(k) for k in ("updates", "trajectories", "loss_last")}
    return (Path(ckpt) if ckpt else None), info
