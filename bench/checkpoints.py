"""Disk an online `aw train` run writes and keeps: today's checkpoints beside the old layout.

    python bench/checkpoints.py [--updates 6] [--model PATH | --smollm2] [--hidden 256]

Both runs are the same online GRPO run (one group per update, a reload per update) in
one process. The baseline reproduces the layout before this change: Accelerate's
``save_state`` writing the weights again under ``train_state/``, optimizer state with
every checkpoint, nothing deleted. It prints bytes written per update, bytes left on
disk after the run, and the ratios. Not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console

from agentworld import records
from agentworld.pool import Pool
from agentworld.train import loop
from agentworld.train.config import TrainConfig


def write_groups(root: Path, vocab: int, eos: int, groups: int, seed: int = 0) -> None:
    """``groups`` groups of two one-step trajectories (rewards 1 and 0), engine tokens."""
    rng = random.Random(seed)
    words = lambda k: [rng.randrange(10, vocab) for _ in range(k)]  # noqa: E731
    pool = Pool.create(root)
    w = pool.writer()
    for _ in range(groups):
        group = records.new_id("gr")
        for reward in (1.0, 0.0):
            tid = records.new_id("tr")
            tokens = {
                "source": "engine",
                "prompt_ids": words(48),
                "completion_ids": [*words(31), eos],
            }
            common = {"agent": "bench", "dataset": "d", "group": group, "task": group}
            w.append(
                records.make_step(
                    trajectory=tid, index=0, tokens=tokens,
                    request={"messages": [{"role": "user", "content": "."}]},
                    response={"message": {"role": "assistant", "content": "."}}, **common,
                )
            )  # fmt: skip
            w.append(
                records.make_end(trajectory=tid, status="done", steps=1, reward=reward, **common)
            )
    w.close()
    pool.close()


@contextlib.contextmanager
def stand_in_server():
    """Answers /aw/reload and /aw/policy as `aw serve` and the proxy would (no model)."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


class Written:
    """Bytes each checkpoint held when it was saved (counted before any pruning)."""

    def __init__(self) -> None:
        self.per_update: list[int] = []

    def wrap(self, save: Any) -> Any:
        def counted(*args: Any, **kw: Any) -> Path:
            folder = save(*args, **kw)
            self.per_update.append(folder_bytes(folder))
            return folder

        return counted

    def wrap_state(self, add: Any) -> Any:
        def counted(acc: Any, folder: Path) -> None:
            add(acc, folder)
            self.per_update.append(folder_bytes(folder / "train_state"))

        return counted


def run(model: str, pool_src: Path, out: Path, url: str, updates: int, *, old: bool) -> dict:
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    pool = out.parent / f"{out.name}-pool"
    import shutil

    shutil.copytree(pool_src, pool)
    written = Written()
    saved_save, saved_once, saved_add = loop.save_checkpoint, loop.weights_once, loop.add_state
    loop.save_checkpoint = written.wrap(saved_save)
    loop.add_state = written.wrap_state(saved_add)
    if old:
        loop.weights_once = lambda acc: None  # save_state writes the weights again
    extra = {"keep_checkpoints": 0, "state_every": 1} if old else {}
    cfg = TrainConfig(
        model=model, pool=str(pool), output_dir=str(out), progress=False, online=True,
        algo="grpo", group_size=2, max_steps=updates, poll_interval_s=0.05, idle_exit_s=1.0,
        serve_url=url, proxy_url=url, lr=1e-5, batch_tokens=512, max_seq_len=256, **extra,
    )  # fmt: skip
    t0 = time.perf_counter()
    try:
        summary = loop.train(cfg, console=Console(file=open("/dev/null", "w")))  # noqa: SIM115
    finally:
        loop.save_checkpoint, loop.weights_once = saved_save, saved_once
        loop.add_state = saved_add
    return {
        "updates": summary["updates"],
        "written": sum(written.per_update),
        "kept": folder_bytes(out),
        "seconds": time.perf_counter() - t0,
        "checkpoints": summary.get("checkpoints"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--updates", type=int, default=6)
    ap.add_argument("--model", help="a local HF model folder (default: a random tiny Llama)")
    ap.add_argument("--smollm2", action="store_true", help="the embedded SmolLM2-135M-Instruct")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    args = ap.parse_args()
    import torch
    from transformers import AutoTokenizer

    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp_s, stand_in_server() as url:
        tmp = Path(tmp_s)
        if args.smollm2:
            from agentworld.model_folder import default_aw_home, ensure_default_model

            model = str(ensure_default_model(default_aw_home() / "models"))
        elif args.model:
            model = args.model
        else:
            from agentworld.serve.tiny import make_tiny_model

            model = str(
                make_tiny_model(tmp / "model", hidden_size=args.hidden, num_layers=args.layers)
            )
        tok = AutoTokenizer.from_pretrained(model)
        write_groups(tmp / "pool", len(tok), tok.eos_token_id, args.updates)
        res = {}
        for name, old in (("old layout", True), ("now", False)):
            res[name] = run(
                model, tmp / "pool", tmp / name.replace(" ", "-"), url, args.updates, old=old
            )
            r = res[name]
            print(
                f"{name:>10}: {r['updates']} updates, written {r['written'] / 1e6:,.1f} MB "
                f"({r['written'] / max(r['updates'], 1) / 1e6:,.1f} MB/update), "
                f"kept {r['kept'] / 1e6:,.1f} MB, {r['seconds']:.1f} s"
            )
            if r["checkpoints"]:
                print(f"{'':>12}{r['checkpoints']}")
        a, b = res["old layout"], res["now"]
        print(
            json.dumps(
                {
                    "model": Path(model).name,
                    "updates": args.updates,
                    "written_ratio": round(b["written"] / a["written"], 3),
                    "kept_ratio": round(b["kept"] / a["kept"], 3),
                    "mb_per_update_old": round(a["written"] / a["updates"] / 1e6, 1),
                    "mb_per_update_now": round(b["written"] / b["updates"] / 1e6, 1),
                }
            )
        )


if __name__ == "__main__":
    main()
