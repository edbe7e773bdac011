"""How long the proxy's sweep holds the event loop: trajectories closed between two yields.

Once the open-trajectory cap is reached under load (100,000 by default; about two
minutes of `bench/proxy_hop.py`'s latency load), each sweep closes the oldest
trajectories, ``lifespan.SWEEP_BATCH`` of them between two chances for calls to
run. This times closing one batch (each closure builds and queues the trajectory's
end record) for today's batch beside the build before's 256, in one process, over
``--rounds`` batches each: the figure is the longest a call can wait behind the
sweep.

    python bench/proxy_sweep.py [--rounds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from agentworld.pool import Pool
from agentworld.proxy import lifespan
from agentworld.proxy.aw_api import end_trajectory
from agentworld.proxy.config import ProxyConfig, UpstreamConfig
from agentworld.proxy.inprocess import ProxyServer

BEFORE = 256  # the batch of the build before (6ed6928)


async def _hold_ms(batch: int, rounds: int) -> list[float]:
    pool = Pool.create(Path(tempfile.mkdtemp(prefix="aw-sweep-")) / "pool")
    server = ProxyServer(
        ProxyConfig(default_upstream=UpstreamConfig.single("http://127.0.0.1:9")), pool
    )
    await server.start()
    st = server.state
    held = []
    try:
        for _ in range(rounds):
            ts = [st.registry.create("default") for _ in range(batch)]
            t0 = time.perf_counter()
            for t in ts:  # what one batch of the sweep runs without yielding
                await end_trajectory(
                    st, t, "timeout", error={"type": "idle_timeout", "message": "no call for 900 s"}
                )
            held.append((time.perf_counter() - t0) * 1000)
    finally:
        await server.stop()
    return held


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rounds", type=int, default=20)
    args = p.parse_args()
    print(f"$ python bench/proxy_sweep.py --rounds {args.rounds}")
    for name, batch in (("this", lifespan.SWEEP_BATCH), ("before", BEFORE)):
        held = asyncio.run(_hold_ms(batch, args.rounds))
        print(
            f"{name:>6}: {batch} closures a batch, the loop held {statistics.median(held):.2f} ms"
            f" (median of {args.rounds}, max {max(held):.2f})"
        )


if __name__ == "__main__":
    main()
