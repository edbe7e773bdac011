"""Training throughput on 8-turn trajectories: merged sequences vs one row per step, and
`aw train`'s loop vs a plain torch loop on the same batches. Ratios measured in one run.

    python bench/train.py [--trajectories 24] [--turns 8] [--hidden 256] [--layers 4]

Not a test: it prints numbers. Goals: merged processes >= 2x fewer tokens than one row per
step with a matching speed-up; the trainer reaches >= 0.9 of the plain loop's tokens/s.

Memory: peak RSS of `aw train` at default settings on a real model, this build beside
another (say the last release, unpacked with `git archive main | tar -x -C /tmp/old`),
each run in a memory cgroup so a blow-up ends there:

    python bench/train.py --memory --model ~/.cache/agentworld/models/smollm2-135m-instruct \
        --baseline /tmp/old [--cap-gb 8]

Goal: <= 4 GB on a demo-sized pool (16 trajectories) and on 1,000 trajectories.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentworld import records
from agentworld.pool import Pool
from agentworld.serve.tiny import make_tiny_model
from agentworld.train.config import TrainConfig
from agentworld.train.data import PoolBatches, make_plan, selection_for
from agentworld.train.loop import train
from agentworld.train.losses import sft_loss, token_logprobs
from agentworld.train.sequences import stop_ids_of


def write_pool(root: Path, vocab: int, eos: int, n: int, turns: int, seed: int = 0) -> Pool:
    """Engine-token trajectories: a 128-token system prompt, 48-token replies, 32-token tool results."""
    rng = random.Random(seed)
    words = lambda k: [rng.randrange(10, vocab) for _ in range(k)]  # noqa: E731
    pool = Pool.create(root)
    w = pool.writer()
    for _ in range(n):
        tid = records.new_id("tr")
        prompt = words(128)
        for i in range(turns):
            completion = [*words(47), eos]
            tokens = {"source": "engine", "prompt_ids": prompt, "completion_ids": completion}
            w.append(
                records.make_step(
                    trajectory=tid, index=i, agent="bench", dataset="d",
                    request={"messages": [{"role": "user", "content": "."}]},
                    response={"message": {"role": "assistant", "content": "."}},
                    tokens=tokens,
                )
            )  # fmt: skip
            prompt = prompt + completion + words(32)
        w.append(
            records.make_end(trajectory=tid, agent="bench", status="done", steps=turns, reward=1.0)
        )
    w.close()
    return pool


def trainer_run(cfg: TrainConfig) -> dict[str, float]:
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    summary = train(cfg, console=_quiet())
    rows = [
        json.loads(x) for x in (Path(cfg.output_dir) / "metrics.jsonl").read_text().splitlines()
    ]
    rows = rows[1:]  # the first update warms up (allocator, kernels), as in the plain loop
    tokens = sum(r["tokens"] for r in rows)
    padded = sum(r["padded_tokens"] for r in rows)
    seconds = sum(r["tokens"] / r["tokens_per_s"] for r in rows)
    return {"tokens": tokens, "padded": padded, "seconds": seconds, "updates": summary["updates"]}


def _quiet():
    from rich.console import Console

    return Console(file=open("/dev/null", "w"))


def train_device() -> torch.device:
    """Where `aw train` runs here (Accelerate's pick: CUDA when there is one); the plain
    loop runs there too, so the ratio compares loops, not devices."""
    from accelerate import PartialState

    return PartialState().device


def plain_loop(cfg: TrainConfig, pool: Pool) -> dict[str, float]:
    """The same batches through a hand-written transformers/torch loop (no Accelerate)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = train_device()
    tok = AutoTokenizer.from_pretrained(cfg.model)
    model = AutoModelForCausalLM.from_pretrained(cfg.model, dtype=torch.float32).to(device)
    labels = pool.labels.effective()
    plan = make_plan(pool.layout, labels, cfg, selection_for(cfg, 0))
    batches = list(PoolBatches(pool, plan, labels, tok, cfg, stop_ids=stop_ids_of(tok)))
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    model.train()
    tokens, seconds = 0, 0.0
    for i, b in enumerate(batches[: cfg.max_steps]):
        t0 = time.perf_counter()
        ids, mask, sampled = (b[k].to(device) for k in ("input_ids", "attention_mask", "sampled"))
        logits = model(input_ids=ids, attention_mask=mask).logits
        loss = sft_loss(token_logprobs(logits[:, :-1], ids[:, 1:]), sampled[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        opt.step()
        opt.zero_grad()
        float(loss.detach())  # wait for the device, as the trainer does when it logs the loss
        if i > 0:  # the first update warms up, as in trainer_run
            seconds += time.perf_counter() - t0
            tokens += b["meta"]["tokens"]
    return {"tokens": tokens, "seconds": seconds}


def write_demo_pool(root: Path, vocab: int, eos: int, n: int, seed: int = 0) -> Pool:
    """Trajectories shaped like `aw demo`'s math agent: groups of 4, 3 calls each (a 350-token
    system prompt with tools, 40-90-token replies, 20-token tool results), engine tokens
    with rollout log-probs, rewards 1/0 within each group."""
    rng = random.Random(seed)
    words = lambda k: [rng.randrange(10, vocab) for _ in range(k)]  # noqa: E731
    pool = Pool.create(root)
    w = pool.writer()
    for g in range(0, n, 4):
        group = records.new_id("gr")
        for k in range(min(4, n - g)):
            tid = records.new_id("tr")
            prompt = words(350)
            common = {"trajectory": tid, "agent": "bench", "dataset": "d", "group": group}
            for i in range(3):
                completion = [*words(rng.randrange(40, 90)), eos]
                tokens = {
                    "source": "engine",
                    "prompt_ids": prompt,
                    "completion_ids": completion,
                    "completion_logprobs": [-1.0] * len(completion),
                }
                w.append(
                    records.make_step(
                        index=i,
                        request={"messages": [{"role": "user", "content": "."}]},
                        response={"message": {"role": "assistant", "content": "."}},
                        tokens=tokens,
                        **common,
                    )
                )
                prompt = prompt + completion + words(20)
            reward = float(k % 2)
            w.append(records.make_end(status="done", steps=3, reward=reward, **common))
    w.close()
    return pool


def find_memcap() -> str | None:
    """memcap (a memory-cgroup wrapper: ``memcap GB CMD...``) where the host has one; else
    None, and runs go uncapped (a blow-up past the machine's memory takes it down)."""
    fallback = Path("/work/bin/memcap")
    return shutil.which("memcap") or (str(fallback) if fallback.exists() else None)


def peak_rss(tree: Path, args: list[str], cap_gb: float, threads: int) -> tuple[float | None, str]:
    """Peak RSS in GB of `aw train ARGS` run from source ``tree`` in a memory cgroup of
    ``cap_gb``; None when the cap killed it. GNU time reads the child's own maxrss (the
    cgroup's figure would count the page cache of the model file too)."""
    import os
    import subprocess

    code = "import sys; from agentworld.cli import main; sys.argv[0] = 'aw'; main()"
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": str(threads)}
    memcap = find_memcap()
    cap = [memcap, f"{cap_gb:g}"] if memcap else []
    cmd = [*cap, "/usr/bin/time", "-f", "maxrss_kb=%M"]
    cmd += [sys.executable, "-c", code, "train", *args]
    # cwd=tree: `python -c` puts the working folder ahead of PYTHONPATH on sys.path.
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tree)
    kb = [line for line in p.stderr.splitlines() if line.startswith("maxrss_kb=")]
    if p.returncode != 0 or not kb:
        tail = p.stderr.strip().splitlines()[-1:] or ["?"]
        return None, f"exit {p.returncode}: {tail[0][:160]}"
    return int(kb[-1].split("=")[1]) / 1024**2, "ok"


def memory_main(args: argparse.Namespace) -> None:
    from transformers import AutoTokenizer

    here = Path(__file__).resolve().parents[1]
    builds = [("this build", here)] + ([("baseline", Path(args.baseline))] if args.baseline else [])
    tok = AutoTokenizer.from_pretrained(args.model)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        sizes = (
            {16, args.big}
            if not args.runs
            else {int(r.split(":")[1]) for r in args.runs.split(",")}
        )
        pools = {
            n: write_demo_pool(root / f"pool{n}", len(tok), tok.eos_token_id, n).root for n in sizes
        }
        print(f"model {args.model}, defaults except --max-steps {args.steps}; "
              + (f"cap {args.cap_gb:g} GB" if find_memcap() else "no cap (no memcap here)")
              + f"; torch threads {args.threads}")  # fmt: skip
        # The peak comes in the first update (activations, then AdamW's state at its step).
        runs = [("sft", 16), ("grpo", args.big), ("sft", args.big), ("grpo", 16)]
        if args.runs:  # e.g. sft:16,grpo:1000
            runs = [(a, int(n)) for a, n in (r.split(":") for r in args.runs.split(","))]
        for algo, n in runs:
            cells = []
            for name, tree in builds:
                if name == "baseline" and algo != "sft":
                    continue  # the figure is SFT's; one blow-up is enough to show
                out = root / f"run-{name.split()[0]}-{algo}-{n}"
                run_args = ["--model", args.model, "--pool", str(pools[n]), "--algo", algo]
                run_args += ["--max-steps", str(args.steps), "--output", str(out)]
                run_args += ["--set", "progress=false"]
                gb, why = peak_rss(tree, run_args, args.cap_gb, args.threads)
                cells.append(f"{name} " + (f"{gb:.2f} GB" if gb else f"killed/failed ({why})"))
            print(f"{algo:4} {n:>5} trajectories: " + "; ".join(cells), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--memory", action="store_true", help="peak RSS of aw train (see above)")
    ap.add_argument("--model", help="--memory: a model folder (default: SmolLM2-135M)")
    ap.add_argument("--baseline", help="--memory: a source tree of the build to compare with")
    ap.add_argument("--cap-gb", type=float, default=8.0)
    ap.add_argument("--big", type=int, default=1000, help="--memory: trajectories, big pool")
    ap.add_argument("--steps", type=int, default=1, help="--memory: updates per run")
    ap.add_argument("--runs", help="--memory: algo:trajectories,... (default: all four)")
    ap.add_argument("--trajectories", type=int, default=24)
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch-tokens", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (shared machines: 1)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved repeats; best one counts")
    args = ap.parse_args()
    if args.memory:
        if not args.model:
            ap.error("--memory needs --model PATH")
        return memory_main(args)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = make_tiny_model(root / "model", hidden_size=args.hidden, num_layers=args.layers)
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(model))
        pool = write_pool(root / "pool", len(tok), tok.eos_token_id, args.trajectories, args.turns)
        base = dict(
            model=str(model), pool=str(pool.root), algo="sft", epochs=1, max_steps=10_000,
            batch_tokens=args.batch_tokens, max_seq_len=args.batch_tokens, progress=False,
            lr=1e-4, forward_tokens=args.batch_tokens,
            # The plain loop keeps its activations too: this compares loops, not memory modes.
            gradient_checkpointing=False,
        )  # fmt: skip
        # Best of N interleaved rounds: other jobs on a shared machine slow single runs down.
        merged_runs, plain_runs = [], []
        for i in range(args.rounds):
            cfg = TrainConfig(output_dir=str(root / f"merged{i}"), merge=True, **base)
            merged_runs.append(trainer_run(cfg))
            cfg = TrainConfig(
                output_dir=str(root / "p"),
                merge=True,
                **{**base, "max_steps": merged_runs[0]["updates"]},
            )
            plain_runs.append(plain_loop(cfg, pool))
        rows = trainer_run(TrainConfig(output_dir=str(root / "rows"), merge=False, **base))
    merged = min(merged_runs, key=lambda r: r["seconds"])
    plain = min(plain_runs, key=lambda r: r["seconds"])
    tps = lambda r: r["tokens"] / r["seconds"]  # noqa: E731
    print(f"data: {args.trajectories} trajectories x {args.turns} turns, "
          f"model hidden {args.hidden} x {args.layers} layers, torch threads {args.threads}, "
          f"device {train_device()}")  # fmt: skip
    print(
        f"merged        : {merged['tokens']:>9,} tokens  {merged['seconds']:7.2f} s  {tps(merged):9,.0f} tok/s"
    )
    print(
        f"row per step  : {rows['tokens']:>9,} tokens  {rows['seconds']:7.2f} s  {tps(rows):9,.0f} tok/s"
    )
    print(
        f"plain loop    : {plain['tokens']:>9,} tokens  {plain['seconds']:7.2f} s  {tps(plain):9,.0f} tok/s"
    )
    print(
        f"tokens processed, rows / merged : {rows['tokens'] / merged['tokens']:.2f}x  (goal >= 2)"
    )
    print(f"epoch time, rows / merged       : {rows['seconds'] / merged['seconds']:.2f}x")
    print(f"tokens/s, aw train / plain loop : {tps(merged) / tps(plain):.2f}  (goal >= 0.9)")


if __name__ == "__main__":
    main()
