"""The CPU experiment of issue 7: held-out reward before and after SFT and GRPO, per dataset x runtime.

For each dataset x agent runtime (the in-process python agent `baseline`, and the
black-box `cli` command agent that reaches the model only through the recording
proxy) it:

1. evaluates the base model on held-out tasks (test split, fixed seed, temperature 0);
2. collects training rollouts on the train split (n per task, one group per task)
   into a pool of its own;
3. trains SFT (trajectories with reward >= threshold) and GRPO, each from the base
   model, on that pool, for a few steps;
4. hot-reloads each checkpoint into the same embedded server (POST /aw/reload) and
   evaluates it on the same held-out tasks.

It writes raw JSON to experiments/results/ and a markdown table to docs/experiment.md.

    PYTHONPATH=. AW_HOME=/tmp/awhome python experiments/cpu_loop.py          # the full run
    PYTHONPATH=. AW_HOME=/tmp/awhome python experiments/cpu_loop.py --quick  # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

DATASETS_TOML = """\
# Written by experiments/cpu_loop.py: two easy reasoning-gym tasks a 135M model can score on.
[datasets.add-sub]
description = "basic_arithmetic: 2 terms, 1 digit, + and -"
source = {{ type = "reasoning-gym", task = "basic_arithmetic", config = {{ min_terms = 2, max_terms = 2, min_digits = 1, max_digits = 1, operators = ["+", "-"], allow_parentheses = false, allow_negation = false }} }}
splits = {{ train = {{ size = 500, seed = {train_seed} }}, test = {{ size = 200, seed = {test_seed} }} }}
scorer = "verifier"

[datasets.chain-sum]
description = "chain_sum: 3 terms, 1 digit"
source = {{ type = "reasoning-gym", task = "chain_sum", config = {{ min_terms = 3, max_terms = 3, min_digits = 1, max_digits = 1 }} }}
splits = {{ train = {{ size = 500, seed = {train_seed} }}, test = {{ size = 200, seed = {test_seed} }} }}
scorer = "verifier"

[datasets.chain-sum-2]
description = "chain_sum: 2 terms, 1 digit (the 3-term variant scores ~0 for a 135M model)"
source = {{ type = "reasoning-gym", task = "chain_sum", config = {{ min_terms = 2, max_terms = 2, min_digits = 1, max_digits = 1 }} }}
splits = {{ train = {{ size = 500, seed = {train_seed} }}, test = {{ size = 200, seed = {test_seed} }} }}
scorer = "verifier"
"""

AGENTS_TOML = """\
# Written by experiments/cpu_loop.py ({phase}): both runtimes against the embedded server.
[agents.baseline]
kind = "python"
description = "single-turn python agent"
function = "agentworld.run.agents.baseline:solve"
max_turns = 1
concurrency = {concurrency}
episode_timeout_s = 600
upstream = "{upstream}"
model = "default"
engine = "vllm"
params = {{ temperature = {temperature}, max_tokens = {max_tokens} }}

[agents.cli]
kind = "command"
description = "black-box openai-SDK script, through the proxy"
command = ["{{python}}", "-m", "agentworld.run.agents.cli_agent"]
concurrency = {concurrency}
episode_timeout_s = 600
upstream = "{upstream}"
model = "default"
engine = "vllm"
params = {{ temperature = {temperature}, max_tokens = {max_tokens} }}
"""

DATASETS = ("add-sub", "chain-sum-2", "chain-sum")
RUNTIMES = ("baseline", "cli")
ALGOS = ("sft", "grpo")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="HF model folder (default: aw serve's default)")
    p.add_argument("--workdir", type=Path, default=Path("/tmp/aw-cpu-loop"))
    p.add_argument("--results", type=Path, default=ROOT / "experiments" / "results")
    p.add_argument("--doc", type=Path, default=ROOT / "docs" / "experiment.md")
    p.add_argument("--datasets", default=",".join(DATASETS))
    p.add_argument("--runtimes", default=",".join(RUNTIMES))
    p.add_argument("--eval-tasks", type=int, default=12, help="held-out tasks (test split)")
    p.add_argument("--train-tasks", type=int, default=6, help="train tasks (groups)")
    p.add_argument("-n", type=int, default=4, help="rollouts per train task")
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--train-temperature", type=float, default=0.3)
    p.add_argument("--eval-temperature", type=float, default=0.0)
    p.add_argument("--steps", type=int, default=4, help="optimizer updates per training run")
    p.add_argument("--sft-lr", type=float, default=1e-5)
    p.add_argument("--grpo-lr", type=float, default=3e-6)
    p.add_argument("--threshold", type=float, default=1.0, help="SFT keeps reward >= this")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--train-seed", type=int, default=1)
    p.add_argument("--test-seed", type=int, default=2)
    p.add_argument("--tag", default="full", help="names the results file")
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test in minutes")
    p.add_argument(
        "--render",
        nargs="+",
        type=Path,
        metavar="JSON",
        help="run nothing: merge these results files into one table in --doc",
    )
    args = p.parse_args(argv)
    if args.quick:
        args.eval_tasks, args.train_tasks, args.n, args.steps = 6, 3, 4, 2
        args.datasets, args.tag = "add-sub", "quick"
    return args


async def _session(opts: Any) -> list[dict[str, Any]]:
    from agentworld.run.session import run_session

    report, _summary = await run_session(opts)
    return [
        {
            "task": r.task,
            "rollout": r.rollout,
            "status": r.status,
            "reward": r.reward,
            "answer": r.answer,
        }
        for r in report.results
    ]


def _mean(results: list[dict[str, Any]]) -> float:
    # A failed episode scores 0: it is part of what the policy did.
    return statistics.fmean((r["reward"] or 0.0) for r in results) if results else 0.0


def _stderr(results: list[dict[str, Any]]) -> float:
    xs = [(r["reward"] or 0.0) for r in results]
    return statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else 0.0


async def run(args: argparse.Namespace) -> dict[str, Any]:
    import aiohttp
    from aiohttp import web

    from agentworld.errors import AgentWorldError
    from agentworld.model_folder import default_aw_home, resolve_model
    from agentworld.run.session import RunOptions
    from agentworld.serve.engine import Engine
    from agentworld.serve.server import make_app
    from agentworld.train.config import TrainConfig
    from agentworld.train.loop import train

    t0 = time.perf_counter()
    model_dir = resolve_model(args.model, default_aw_home() / "models")
    work: Path = args.workdir
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    engine = Engine(model_dir, device="cpu", max_batch_size=16)
    runner = web.AppRunner(make_app(engine), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    serve_url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    (work / "datasets.toml").write_text(
        DATASETS_TOML.format(train_seed=args.train_seed, test_seed=args.test_seed)
    )
    for phase, temp in (("eval", args.eval_temperature), ("train", args.train_temperature)):
        (work / f"agents-{phase}.toml").write_text(
            AGENTS_TOML.format(
                phase=phase,
                upstream=f"{serve_url}/v1",
                temperature=temp,
                max_tokens=args.max_tokens,
                concurrency=args.concurrency,
            )
        )
    datasets = [d for d in args.datasets.split(",") if d]
    runtimes = [r for r in args.runtimes.split(",") if r]
    cells: dict[str, dict[str, Any]] = {}
    timings: dict[str, float] = {}

    def opts(phase: str, agent: str, dataset: str, split: str, limit: int, n: int, pool: Path):
        return RunOptions(
            agent=agent,
            dataset=dataset,
            agents_path=work / f"agents-{phase}.toml",
            datasets_path=work / "datasets.toml",
            split=split,
            limit=limit,
            n=n,
            pool=pool,
        )

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:7.1f}s] {msg}", file=sys.stderr, flush=True)

    try:
        # 1 + 2: base model held-out eval, then training rollouts, per cell.
        for ds in datasets:
            for rt in runtimes:
                key = f"{ds}/{rt}"
                cell: dict[str, Any] = {"dataset": ds, "runtime": rt, "eval": {}, "train": {}}
                t = time.perf_counter()
                res = await _session(
                    opts("eval", rt, ds, "test", args.eval_tasks, 1, work / f"eval-base-{ds}-{rt}")
                )
                cell["eval"]["base"] = {"mean": _mean(res), "stderr": _stderr(res), "results": res}
                log(f"{key} base held-out reward {_mean(res):.3f} ({len(res)} tasks)")
                pool = work / f"pool-{ds}-{rt}"
                res = await _session(opts("train", rt, ds, "train", args.train_tasks, args.n, pool))
                groups: dict[str, list[float]] = {}
                for r in res:
                    groups.setdefault(r["task"], []).append(r["reward"] or 0.0)
                cell["rollouts"] = {
                    "mean": _mean(res),
                    "n": len(res),
                    "good": sum(1 for r in res if (r["reward"] or 0.0) >= args.threshold),
                    "groups": len(groups),
                    "groups_with_variance": sum(1 for g in groups.values() if max(g) > min(g)),
                    "results": res,
                }
                log(
                    f"{key} train rollouts: mean {_mean(res):.3f}, "
                    f"{cell['rollouts']['good']}/{len(res)} good, "
                    f"{cell['rollouts']['groups_with_variance']}/{len(groups)} groups with variance"
                )
                timings[f"rollouts {key}"] = time.perf_counter() - t
                cells[key] = cell

        # 3: train SFT and GRPO from the base model on each cell's pool.
        for key, cell in cells.items():
            ds, rt = cell["dataset"], cell["runtime"]
            for algo in ALGOS:
                t = time.perf_counter()
                cfg = TrainConfig(
                    model=str(model_dir),
                    algo=algo,
                    agent=rt,
                    dataset=ds,
                    pool=str(work / f"pool-{ds}-{rt}"),
                    output_dir=str(work / "runs" / f"{ds}-{rt}-{algo}"),
                    max_steps=args.steps,
                    lr=args.sft_lr if algo == "sft" else args.grpo_lr,
                    min_reward=args.threshold if algo == "sft" else None,
                    batch_tokens=8192,
                    max_seq_len=1024,
                    progress=False,
                )
                try:
                    summary = await asyncio.to_thread(train, cfg)
                except AgentWorldError as exc:
                    # Usually: no good trajectory (SFT) or every group flat (GRPO).
                    cell["train"][algo] = {"error": str(exc)}
                    log(f"{key} {algo}: no training: {exc}")
                    continue
                cell["train"][algo] = {
                    k: summary.get(k)
                    for k in ("updates", "trajectories", "tokens", "loss_first", "loss_last")
                } | {"checkpoint": summary.get("checkpoint")}
                timings[f"train {key} {algo}"] = time.perf_counter() - t
                log(f"{key} {algo}: {cell['train'][algo]}")

        # 4: reload each checkpoint and evaluate on the same held-out tasks.
        async with aiohttp.ClientSession() as http:
            for key, cell in cells.items():
                ds, rt = cell["dataset"], cell["runtime"]
                for algo in ALGOS:
                    ckpt = cell["train"].get(algo, {}).get("checkpoint")
                    if not ckpt:
                        continue
                    resp = await http.post(f"{serve_url}/aw/reload", json={"path": ckpt})
                    resp.raise_for_status()
                    res = await _session(
                        opts(
                            "eval",
                            rt,
                            ds,
                            "test",
                            args.eval_tasks,
                            1,
                            work / f"eval-{algo}-{ds}-{rt}",
                        )
                    )
                    cell["eval"][algo] = {
                        "mean": _mean(res),
                        "stderr": _stderr(res),
                        "results": res,
                    }
                    log(f"{key} {algo} held-out reward {_mean(res):.3f}")
    finally:
        await runner.cleanup()
        engine.close()
    wall_s = time.perf_counter() - t0
    return {
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "model": str(model_dir),
        "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}, python {platform.python_version()}",
        "wall_s": wall_s,
        "timings_s": timings,
        "cells": cells,
    }


def table(data: dict[str, Any]) -> str:
    """The markdown results table: one row per dataset x runtime."""
    lines = [
        "| dataset | runtime | base | SFT | GRPO | train rollouts: mean, good/n, groups with variance | SFT / GRPO trained on |",
        "|---|---|---|---|---|---|---|",
    ]

    def fmt(cell: dict[str, Any], which: str) -> str:
        ev = cell["eval"].get(which)
        if ev is None:
            err = cell["train"].get(which, {}).get("error")
            if err and "nothing to train on" in err:
                return "not trained: no rollout reached the threshold"
            return f"not trained ({err})" if err else "—"
        n = len(ev["results"])
        hits = sum(1 for r in ev["results"] if (r["reward"] or 0.0) >= 1.0)
        return f"{ev['mean']:.3f} ± {ev['stderr']:.3f} ({hits}/{n})"

    for cell in data["cells"].values():
        ro = cell["rollouts"]
        trained = " / ".join(
            str(cell["train"].get(a, {}).get("trajectories", "—")) + " traj" for a in ALGOS
        )
        lines.append(
            f"| {cell['dataset']} | {cell['runtime']} | {fmt(cell, 'base')} | {fmt(cell, 'sft')} "
            f"| {fmt(cell, 'grpo')} | {ro['mean']:.3f}, {ro['good']}/{ro['n']}, "
            f"{ro['groups_with_variance']}/{ro['groups']} | {trained} |"
        )
    return "\n".join(lines)


START, END = "<!-- results:start -->", "<!-- results:end -->"


def write_doc(doc: Path, md: str, data: dict[str, Any], tag: str) -> None:
    """Put the table between the markers of docs/experiment.md (the prose around it is kept)."""
    block = f"{START}\n{md}\n\nWall time: {data['wall_s'] / 60:.1f} min (run `{tag}`).\n{END}"
    text = doc.read_text() if doc.exists() else f"# CPU experiment\n\n{START}\n{END}\n"
    if START not in text or END not in text:
        text += f"\n{START}\n{END}\n"
    head, rest = text.split(START, 1)
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(head + block + rest.split(END, 1)[1])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render:
        parts = [json.loads(p.read_text()) for p in args.render]
        merged = {
            "wall_s": sum(d["wall_s"] for d in parts),
            "cells": {k: c for d in parts for k, c in d["cells"].items()},
        }
        md = table(merged)
        write_doc(args.doc, md, merged, "+".join(p.stem for p in args.render))
        print(md)
        return 0
    data = asyncio.run(run(args))
    args.results.mkdir(parents=True, exist_ok=True)
    out = args.results / f"cpu_loop-{args.tag}.json"
    out.write_text(json.dumps(data, indent=1))
    md = table(data)
    (args.results / f"cpu_loop-{args.tag}.md").write_text(md + "\n")
    write_doc(args.doc, md, data, args.tag)
    print(md)
    print(f"\nwall time {data['wall_s'] / 60:.1f} min; raw results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
