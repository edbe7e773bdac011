"""Does `aw proxy` hold its memory over a long run? Resident memory against calls served.

A collection run sends the proxy millions of calls; its memory must level off
once the open trajectories reach their cap, not grow with every call. This
drives the proxy and, side by side, a bare aiohttp pass-through (no recording)
with the same closed-loop load of agent-like calls: each of ``--concurrency``
workers holds a conversation of up to ``--turns`` turns (every call continues
it, so automatic threading keeps joining trajectories), then starts a new one;
half the workers stream. The proxy runs with a small ``--max-open`` cap, so
the sweep has to close the oldest conversations all along, as it would after
hours of a real run.

Resident memory (VmRSS) of each process is sampled every ``--every`` calls.
The table shows it; the last line gives each process's growth over the second
half of the run in bytes per call (after the warm-up and once the cap is
reached), and the proxy's against the bare hop's. A leak shows as a growth
that stays well above the bare hop's, however long the run.

    python bench/proxy_soak.py [--calls 60000] [--every 10000] [--max-open 2000]
                                [--concurrency 32] [--turns 8]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from proxy_overhead import (
    BODY,
    REPLY,
    ROOT,
    free_ports,
    start,
    start_proxy,
    wait_up,
)

HERE = str(Path(__file__).resolve().parent / "proxy_overhead.py")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def drive(session, url: str, calls: int, concurrency: int, turns: int, sample) -> float:
    """``calls`` calls in conversations of up to ``turns`` turns; returns calls per second."""
    import orjson

    served = 0
    next_sample = 0
    headers = {"Content-Type": "application/json"}

    async def worker(w: int) -> None:
        nonlocal served, next_sample
        conv = 0
        while served < calls:
            conv += 1
            messages = [{"role": "user", "content": f"worker {w} conversation {conv}: begin"}]
            for turn in range(turns):
                if served >= calls:
                    return
                served += 1
                body = orjson.dumps(
                    {**BODY, "messages": messages, "stream": w % 2 == 0, "max_tokens": 16}
                )
                async with session.post(
                    url + "/v1/chat/completions", data=body, headers=headers
                ) as r:
                    raw = await r.read()
                    assert r.status == 200, (r.status, raw[:200])
                # The reply the fake gives is fixed: the next turn continues it, as an agent would.
                messages = [
                    *messages,
                    {"role": "assistant", "content": REPLY},
                    {"role": "user", "content": f"turn {turn + 1}"},
                ]
                if served >= next_sample:
                    next_sample += sample.every
                    sample(served)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    return calls / (time.perf_counter() - t0)


class Sampler:
    def __init__(self, pid: int, every: int) -> None:
        self.pid = pid
        self.every = every
        self.points: list[tuple[int, float]] = []

    def __call__(self, served: int) -> None:
        self.points.append((served, rss_mb(self.pid)))


def growth_per_call(points: list[tuple[int, float]]) -> float:
    """Bytes per call over the second half of the samples (least squares)."""
    half = points[len(points) // 2 :]
    if len(half) < 2:
        return float("nan")
    n = len(half)
    mx = sum(x for x, _ in half) / n
    my = sum(y for _, y in half) / n
    var = sum((x - mx) ** 2 for x, _ in half)
    cov = sum((x - mx) * (y - my) for x, y in half)
    return cov / var * 1024 * 1024 if var else float("nan")


async def run(args: argparse.Namespace) -> None:
    import aiohttp
    from rich.console import Console
    from rich.table import Table

    ports = dict(zip(("fake", "bare", "proxy"), free_ports(3), strict=True))
    up = f"http://127.0.0.1:{ports['fake']}"
    pool = tempfile.mkdtemp(prefix="aw-soak-pool-")
    procs = [
        start([HERE, "--serve", "fake", "--port", str(ports["fake"]), "--reply", REPLY]),
        start([HERE, "--serve", "bare", "--port", str(ports["bare"]), "--upstream", up]),
    ]
    proxy_args = ["--max-open-trajectories", str(args.max_open)]
    procs.append(start_proxy(ROOT, pool, up, ports["proxy"], proxy_args))
    pids = {"bare": procs[1].pid, "proxy": procs[2].pid}
    console = Console()
    try:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            for name in ("fake", "bare", "proxy"):
                await wait_up(session, f"http://127.0.0.1:{ports[name]}")
            console.print(
                f"# aw proxy soak: {args.calls:,} calls a path, concurrency {args.concurrency},"
                f" conversations of {args.turns} turns, proxy cap {args.max_open:,} open"
                f" trajectories, pool {pool}"
            )
            samplers = {name: Sampler(pid, args.every) for name, pid in pids.items()}
            rates = {}
            for name in ("bare", "proxy"):
                url = f"http://127.0.0.1:{ports[name]}"
                rates[name] = await drive(
                    session, url, args.calls, args.concurrency, args.turns, samplers[name]
                )
                samplers[name](args.calls)
            async with session.get(f"http://127.0.0.1:{ports['proxy']}/aw/stats") as r:
                stats = await r.json()
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()

    table = Table(title="resident memory (MB) by calls served")
    table.add_column("calls", justify="right")
    table.add_column("bare hop", justify="right")
    table.add_column("aw proxy", justify="right")
    for (n, bare), (_, proxy) in zip(
        samplers["bare"].points, samplers["proxy"].points, strict=False
    ):
        table.add_row(f"{n:,}", f"{bare:.1f}", f"{proxy:.1f}")
    console.print(table)
    g_bare = growth_per_call(samplers["bare"].points)
    g_proxy = growth_per_call(samplers["proxy"].points)
    opened = stats["trajectories"]
    console.print(
        f"  -> growth over the second half: proxy {g_proxy:+.0f} B/call, bare hop"
        f" {g_bare:+.0f} B/call (proxy - bare = {g_proxy - g_bare:+.0f} B/call);"
        f" trajectories open {opened['open']:,}, done {opened['done']:,};"
        f" calls/s proxy {rates['proxy']:.0f}, bare {rates['bare']:.0f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=60_000, help="calls per path")
    ap.add_argument("--every", type=int, default=10_000, help="sample memory every N calls")
    ap.add_argument("--max-open", type=int, default=2_000, help="the proxy's open trajectory cap")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--turns", type=int, default=8, help="turns per conversation")
    args = ap.parse_args()
    if args.calls < 1 or args.every < 1 or args.max_open < 1 or args.turns < 1:
        ap.error("--calls, --every, --max-open and --turns take positive numbers")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
