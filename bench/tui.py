"""Bench `aw tui` on a generated 1M-step pool: first screen, memory, key latency under a writer.

    PYTHONPATH=. python bench/tui.py [--steps 1000000] [--baseline-steps 10000]

Pools are generated once into $TMPDIR/aw-bench-tui-<steps> and reused (see
bench/tui_pool.py); generation and index-build times are printed. Each figure
is printed next to a baseline from the same run: the same measure on a small
pool (startup) or without the writer (latency).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _child(args: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, str(HERE / "tui.py"), *args],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


async def _wait(pilot, cond, limit_s: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.perf_counter() + limit_s
    while not cond():
        if time.perf_counter() > deadline:
            raise TimeoutError("app never got there")
        await pilot.pause(0.005)


def startup(pool: str) -> dict:
    """Seconds from process start to the list's first page, then to the monitor; peak RSS."""
    t0 = time.perf_counter()
    from agentworld.tui.app import make_app
    from agentworld.tui.data import TuiConfig
    from agentworld.tui.monitor import MonitorScreen
    from agentworld.tui.trajectories import TrajectoriesScreen

    out: dict = {}

    async def run() -> None:
        app = make_app(TuiConfig(pool, "bench"), start="trajectories")
        async with app.run_test(size=(100, 30)) as pilot:
            await _wait(
                pilot, lambda: isinstance(app.screen, TrajectoriesScreen) and app.screen.page
            )
            out["first_screen_s"] = time.perf_counter() - t0
            t1 = time.perf_counter()
            app.switch_mode("monitor")
            await _wait(
                pilot, lambda: isinstance(app.screen, MonitorScreen) and app.screen.snapshot
            )
            out["monitor_first_s"] = time.perf_counter() - t1
            await _wait(pilot, lambda: app.screen.ready)
            out["monitor_full_s"] = time.perf_counter() - t1
            await pilot.pause(2.5)  # a few monitor ticks and refreshes
            out["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    asyncio.run(run())
    return out


async def _key_to_screen(app, table, key: str) -> float:  # type: ignore[no-untyped-def]
    """Seconds from a key event reaching the app to the screen refreshed with its effect.

    (Pilot.press waits for the whole process to go idle, which a busy refresh
    thread never lets happen, so it would measure the wrong thing.)
    """
    from textual import events

    before = table.cursor_row
    t = time.perf_counter()
    event = events.Key(key, None)
    event.set_sender(app)
    app._driver.send_message(event)
    while table.cursor_row == before:
        await asyncio.sleep(0.001)
    drawn = asyncio.Event()
    app.call_after_refresh(drawn.set)
    await drawn.wait()
    return time.perf_counter() - t


def latency(pool: str, writer_rate: float, seconds: float) -> dict:
    """Key-to-screen latency (press processed and screen refreshed) while paging the list."""
    from textual.widgets import DataTable

    from agentworld.tui.app import make_app
    from agentworld.tui.data import TuiConfig
    from agentworld.tui.trajectories import TrajectoriesScreen

    writer = None
    if writer_rate:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        n = int(writer_rate * (seconds + 10))
        writer = subprocess.Popen(
            [sys.executable, str(HERE / "tui_pool.py"), "live", pool, str(n), str(writer_rate)],
            env=env,
        )
    samples: list[float] = []

    async def run() -> None:
        app = make_app(TuiConfig(pool, "bench"), start="trajectories")
        async with app.run_test(size=(100, 30)) as pilot:
            await _wait(
                pilot, lambda: isinstance(app.screen, TrajectoriesScreen) and app.screen.page
            )
            await pilot.pause(1.0)
            table = app.screen.query_one(DataTable)
            end = time.perf_counter() + seconds
            keys = ["down"] * 8 + ["up"] * 8
            i = 0
            while time.perf_counter() < end:
                samples.append(await _key_to_screen(app, table, keys[i % len(keys)]))
                i += 1
                await asyncio.sleep(0.05)

    try:
        asyncio.run(run())
    finally:
        if writer is not None:
            writer.terminate()
            writer.wait()
    worst = sorted(range(len(samples)), key=samples.__getitem__)[-3:]
    samples.sort()
    return {
        "worst": [(i, round(1000 * samples[-1 - k])) for k, i in enumerate(reversed(worst))],
        "p50_ms": 1000 * statistics.median(samples),
        "p95_ms": 1000 * samples[int(0.95 * (len(samples) - 1))],
        "max_ms": 1000 * samples[-1],
        "n": len(samples),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--baseline-steps", type=int, default=10_000)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rate", type=float, default=1000.0)
    a = ap.parse_args()
    sys.path.insert(0, str(HERE))
    from tui_pool import ensure_pool

    from agentworld.pool import Pool

    for n in (a.baseline_steps, a.steps):
        path, gen_s, index_s = ensure_pool(n)
        t0 = time.perf_counter()
        p = Pool.open(path)
        p.index(refresh=True)  # schema upgrades / catch-up, so startup sees an existing index
        p.close()
        print(
            f"pool {n:,} steps at {path}: generated {gen_s:.1f} s, indexed {index_s:.1f} s, "
            f"catch-up {time.perf_counter() - t0:.1f} s"
        )
    big, small = str(ensure_pool(a.steps)[0]), str(ensure_pool(a.baseline_steps)[0])
    imports = _child(["imports"])
    print(f"{'imports_s':>15}: {imports['imports_s']:8.2f} s (Python + Textual + the app, no pool)")
    s_small = _child(["startup", small])
    s_big = _child(["startup", big])
    for key, unit in (
        ("first_screen_s", "s"),
        ("monitor_first_s", "s"),
        ("monitor_full_s", "s"),
        ("rss_mb", "MB"),
    ):
        print(
            f"{key:>15}: {s_big[key]:8.2f} {unit} on {a.steps:,} steps vs {s_small[key]:.2f} on "
            f"{a.baseline_steps:,} (ratio {s_big[key] / s_small[key]:.2f})"
        )
    # The writer appends to a scratch copy so the cached pool stays as generated.
    scratch = Path(big + "-live")
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(big, scratch)
    try:
        quiet = _child(["latency", str(scratch), "0", str(a.seconds)])
        busy = _child(["latency", str(scratch), str(a.rate), str(a.seconds)])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"worst samples (index, ms): busy {busy['worst']} quiet {quiet['worst']}")
    for key in ("p50_ms", "p95_ms", "max_ms"):
        print(
            f"key latency {key:>6}: {busy[key]:7.1f} ms with a {a.rate:.0f} steps/s writer vs "
            f"{quiet[key]:.1f} ms without (ratio {busy[key] / max(quiet[key], 1e-9):.2f}; n={busy['n']})"
        )


if __name__ == "__main__":
    if sys.argv[1:2] == ["imports"]:
        t0 = time.perf_counter()
        import agentworld.tui.app  # noqa: F401

        print(json.dumps({"imports_s": time.perf_counter() - t0}))
    elif sys.argv[1:2] == ["startup"]:
        print(json.dumps(startup(sys.argv[2])))
    elif sys.argv[1:2] == ["latency"]:
        print(json.dumps(latency(sys.argv[2], float(sys.argv[3]), float(sys.argv[4]))))
    else:
        main()
