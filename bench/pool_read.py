"""Read speed: streaming the pool against the raw decompress + parse limit, and index queries on many steps.

    python bench/pool_read.py [--trajectories 128] [--turns 16] [--steps 1000000]

Part 1 writes multi-turn records, then times ``pool.iter_records()`` against
decompressing the same shard bytes and ``orjson.loads`` on every line in this
process (goal >= 0.7). Part 2 writes ``--steps`` small steps (32 a trajectory)
with the batched writer, builds the index (timed), and times
``Index.trajectories`` / ``count_trajectories`` (goal: under a second each).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _records import interleaved_steps

from agentworld import records
from agentworld.pool import Pool, Selection
from agentworld.pool.shards import decompressor


def best(fn, repeat: int = 3) -> tuple[float, int]:
    out = (float("inf"), 0)
    for _ in range(repeat):
        t0 = time.perf_counter()
        n = fn()
        out = min(out, (time.perf_counter() - t0, n))
    return out


def streaming(root: Path, args: argparse.Namespace) -> None:
    pool = Pool.create(root)
    with pool.writer() as w:
        for r in interleaved_steps(args.trajectories, args.turns):
            w.append(r)
    shards = [p.read_bytes() for p in pool.layout.shard_paths()]

    def raw() -> int:
        n = 0
        for data in shards:
            # A streaming decompressor: a writer's own shards are streamed frames
            # without a content size, which one-shot decompress() refuses.
            whole = decompressor().decompressobj().decompress(data)
            for line in whole.split(b"\n")[:-1]:
                orjson.loads(line)
                n += 1
        return n

    def via_pool() -> int:
        return sum(1 for _ in pool.iter_records())

    t_raw, n = best(raw)
    t_pool, m = best(via_pool)
    assert n == m, (n, m)
    print(f"streaming {n} records ({len(shards)} shard(s))")
    print(f"{'raw limit (zstd decompress + orjson.loads)':<44} {n / t_raw:>10.0f} rec/s")
    print(f"{'pool.iter_records()':<44} {n / t_pool:>10.0f} rec/s")
    print(f"iter_records / raw limit: {t_raw / t_pool:.2f}  (goal >= 0.70)")


def small_steps(n_steps: int, per_trajectory: int = 32):
    t_end = time.time()
    n_traj = max(1, n_steps // per_trajectory)
    for t in range(n_traj):
        tid = f"tr_{t:08d}"
        base = {
            "kind": "step",
            "schema": 1,
            "trajectory": tid,
            "agent": f"agent{t % 4}",
            "dataset": f"ds{t % 3}",
            "task": f"task-{t // 8}",
            "group": f"g{t // 8}",
            "policy_version": t % 5,
            "protocol": "openai.chat",
            "status": "ok",
            "tokens": {"source": "none"},
        }
        for i in range(per_trajectory):
            yield {
                **base,
                "id": f"st_{t:08d}_{i:03d}",
                "index": i,
                "timings": {"started_at": t_end - n_steps + t * per_trajectory + i},
                "request": {"messages": [{"role": "user", "content": f"q{i}"}]},
                "response": {"message": {"role": "assistant", "content": f"a{i}"}},
            }
        yield records.make_end(
            trajectory=tid,
            agent=f"agent{t % 4}",
            status="done",
            steps=per_trajectory,
            reward=float(t % 7) / 6,
            id=f"en_{t:08d}",
            ended_at=t_end - n_traj + t,
        )


def index_queries(root: Path, n_steps: int) -> None:
    pool = Pool.create(root)
    t0 = time.perf_counter()
    with pool.writer(commit_records=4096, commit_interval_s=1.0) as w:
        for r in small_steps(n_steps):
            w.append(r)
    t_write = time.perf_counter() - t0
    t0 = time.perf_counter()
    idx = pool.index()
    t_index = time.perf_counter() - t0
    steps = idx.stats()["steps"]
    print(f"\n{steps} small steps written in {t_write:.1f}s ({steps / t_write:.0f} rec/s)")
    print(f"index built in {t_index:.1f}s ({steps / t_index:.0f} steps/s)")
    queries = {
        "count_trajectories()": lambda: idx.count_trajectories(),
        "trajectories(limit=100), newest first": lambda: idx.trajectories(limit=100),
        "trajectories(agent, min_reward), by reward": lambda: idx.trajectories(
            Selection(agent="agent1", min_reward=0.5), sort="reward", limit=100
        ),
        "count_trajectories(dataset, status)": lambda: idx.count_trajectories(
            Selection(dataset="ds2", status=("done",))
        ),
        "trajectories(offset=10000)": lambda: idx.trajectories(limit=100, offset=10_000),
        "refresh() with nothing new": lambda: idx.refresh(),
    }
    for name, q in queries.items():
        t, _ = best(lambda q=q: (q(), 0)[1])
        print(f"{name:<44} {t * 1000:>8.1f} ms  {'ok' if t < 1 else 'SLOW'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trajectories", type=int, default=128)
    ap.add_argument("--turns", type=int, default=16)
    ap.add_argument("--steps", type=int, default=1_000_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        streaming(Path(tmp) / "stream", args)
        if args.steps:
            index_queries(Path(tmp) / "index", args.steps)


if __name__ == "__main__":
    main()
