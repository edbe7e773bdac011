"""Pools on object storage against a local pool, side by side: push, pull, time to a first list.

    python bench/pool_remote.py [--trajectories 1024] [--turns 8] [--shard-mb 2]

Writes one pool of multi-turn records (sealed into shards of about
``--shard-mb``), then, in one run:

* push: ``aw pool push`` to an S3 server (moto's standalone server, started in
  its own process on this machine) and to a ``file://`` store, beside copying
  the pool to another folder (`aw pool merge`: the same hash and record checks);
* pull: ``aw pool pull`` of it back into an empty pool, beside merging the
  first pool into an empty one;
* first list: a fresh reader's first page of 50 trajectories (open, index,
  query), from ``s3://`` with an empty cache against the local pool with no
  index yet.

Ratios are remote / local (throughput: higher is better; time: lower is
better). The S3 server is an emulator written in Python and sharing these
CPUs, so its figures are a floor for a real store, not a forecast.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _moto import start_s3
from _records import interleaved_steps

from agentworld.pool import Pool, Selection
from agentworld.pool.merge import merge_pools
from agentworld.pool.remote_pool import RemotePool
from agentworld.pool.remote_sync import pull, push

T = TypeVar("T")


def start_s3_pool() -> tuple[subprocess.Popen[bytes], str]:
    """moto's S3 server with a bucket for the pool; returns (process, pool URL)."""
    proc, _ = start_s3("bench")
    return proc, "s3://bench/pool"


def timed(fn: Callable[[], T]) -> tuple[float, T]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def first_page(pool: Pool) -> int:
    idx = pool.index()
    return len(idx.trajectories(Selection(), limit=50))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trajectories", type=int, default=1024)
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--shard-mb", type=float, default=2.0)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="aw-bench-remote-"))
    proc, s3 = start_s3_pool()
    try:
        src = Pool.create(tmp / "src")
        with src.writer(rotate_bytes=int(args.shard_mb * 2**20)) as w:
            for rec in interleaved_steps(args.trajectories, args.turns):
                w.append(rec)
        shards = src.layout.shard_paths()
        size = sum(p.stat().st_size for p in shards)
        print(
            f"pool: {args.trajectories} trajectories x {args.turns} turns, "
            f"{len(shards)} shards, {size / 1e6:.1f} MB"
        )
        mb = size / 1e6

        t_local_push, _ = timed(lambda: merge_pools(Pool.create(tmp / "copy").layout, src.root))
        t_s3_push, r = timed(lambda: push(src.layout, s3))
        assert r.shards_copied == len(shards), r
        file_url = f"file://{tmp / 'store'}"
        t_file_push, _ = timed(lambda: push(src.layout, file_url))

        t_local_pull, _ = timed(lambda: merge_pools(Pool.create(tmp / "back").layout, src.root))
        t_s3_pull, r = timed(lambda: pull(Pool.create(tmp / "pulled").layout, s3))
        assert r.shards_copied == len(shards), r
        t_file_pull, _ = timed(lambda: pull(Pool.create(tmp / "pulled-file").layout, file_url))

        local = Pool.open(tmp / "copy")
        t_local_list, n = timed(lambda: first_page(local))
        t_s3_list, n2 = timed(lambda: first_page(RemotePool.open_url(s3, cache_root=tmp / "c1")))
        assert n == n2 == 50
        fetched = list((tmp / "c1").rglob("*.jsonl.zst"))

        def row(what: str, local_s: float, remote_s: float, rate: bool = True) -> None:
            if rate:
                print(
                    f"{what:<34} local {mb / local_s:7.1f} MB/s  remote {mb / remote_s:7.1f} MB/s"
                    f"  ratio {local_s / remote_s:5.2f}"
                )
            else:
                print(
                    f"{what:<34} local {local_s * 1e3:7.0f} ms    remote {remote_s * 1e3:7.0f} ms"
                    f"    ratio {remote_s / local_s:5.2f}"
                )

        row("push to s3:// (moto) vs merge", t_local_push, t_s3_push)
        row("push to file:// vs merge", t_local_push, t_file_push)
        row("pull from s3:// (moto) vs merge", t_local_pull, t_s3_pull)
        row("pull from file:// vs merge", t_local_pull, t_file_pull)
        row("first 50 trajectories listed", t_local_list, t_s3_list, rate=False)
        print(f"  (the s3:// reader fetched {len(fetched)} of {len(shards)} shards to list)")
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
