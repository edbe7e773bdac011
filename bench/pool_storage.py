"""Bytes on disk per step: the pool's shards against plain zstd of the same records in trajectory order.

    python bench/pool_storage.py [--trajectories 64] [--turns 32] [--concurrent 64]

Trajectories of ``--turns`` turns (each prompt repeats the whole conversation
so far) are written through the pool writer with ``--concurrent`` of them
interleaved, as a busy proxy writes them. The baseline is the most favourable
plain layout: the same canonical JSON lines grouped by trajectory, compressed
by zstd at its default level 3 with default parameters. Goal: pool / baseline <= 1.0.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _records import interleaved_steps

from agentworld import records
from agentworld.pool import Pool


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trajectories", type=int, default=64)
    ap.add_argument("--turns", type=int, default=32)
    ap.add_argument("--concurrent", type=int, default=64)
    args = ap.parse_args()
    recs = list(interleaved_steps(args.trajectories, args.turns, concurrent=args.concurrent))
    steps = sum(1 for r in recs if r["kind"] == "step")
    lines = [records.dumps(r) for r in recs]
    json_bytes = sum(len(x) + 1 for x in lines)

    by_trajectory: dict[str, list[bytes]] = {}
    for r, line in zip(recs, lines, strict=True):
        by_trajectory.setdefault(r["trajectory"], []).append(line)
    ordered = b"".join(x + b"\n" for group in by_trajectory.values() for x in group)
    baseline = len(zstandard.ZstdCompressor().compress(ordered))
    interleaved_plain = len(zstandard.ZstdCompressor().compress(b"".join(x + b"\n" for x in lines)))

    with tempfile.TemporaryDirectory() as tmp:
        pool = Pool.create(Path(tmp) / "pool")
        with pool.writer() as w:
            for r in recs:
                w.append(r)
        shards = pool.layout.shard_paths()
        pool_bytes = sum(p.stat().st_size for p in shards)

    print(
        f"{args.trajectories} trajectories x {args.turns} turns, {args.concurrent} interleaved: "
        f"{steps} steps, {json_bytes / 1e6:.1f} MB of JSON, {len(shards)} shard(s)"
    )
    for name, size in (
        ("canonical JSON, uncompressed", json_bytes),
        ("zstd -3, interleaved order", interleaved_plain),
        ("zstd -3, trajectory order (baseline)", baseline),
        ("pool shards (zstd -1, LDM, window 2^27)", pool_bytes),
    ):
        print(f"{name:<42} {size / steps:>10.0f} B/step")
    print(f"pool / baseline: {pool_bytes / baseline:.3f}  (goal <= 1.0)")


if __name__ == "__main__":
    main()
