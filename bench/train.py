"""Training throughput on 8-turn trajectories: merged sequences vs one row per step, and
`aw train`'s loop vs a plain torch loop on the same batches. Ratios measured in one run.

    python bench/train.py [--trajectories 24] [--turns 8] [--hidden 256] [--layers 4]

Not a test: it prints numbers. Goals: merged processes >= 2x fewer tokens than one row per
step with a matching speed-up; the trainer reaches >= 0.9 of the plain loop's tokens/s.
"""

from __future__ import annotations

import argparse
import json
import random
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trajectories", type=int, default=24)
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch-tokens", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (shared machines: 1)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved repeats; best one counts")
    args = ap.parse_args()
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
            lr=1e-4,
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
