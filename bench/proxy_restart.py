"""How long a proxy takes to restart on a pool another live proxy is writing to.

The pool holds ``--steps`` steps in trajectories of five: half from proxy ``a``
(sealed into shards, as a proxy stopped with SIGTERM leaves them) and half from
proxy ``b``, a live writer process whose journal holds them and which keeps
appending (``--rate`` steps a second) while ``a`` restarts; one trajectory in
ten of each is still open. Each round restarts ``aw proxy --instance a`` on
this checkout and on ``--checkout`` (another build: a ``git archive`` of main,
say), side by side, and times from the process start to a 200 from
``/aw/health``; the same start on an empty pool is the reference (imports and
start-up: what the pool adds is the difference). Before each timed start the
index is brought up to date by the same build, untimed: a restart usually
finds the cache a TUI or the last run left. A start that takes longer than
``--give-up-s`` is stopped and reported as that.

    PYTHONPATH=. python bench/proxy_restart.py [--steps 100000] [--rounds 3] [--checkout PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

STEPS_PER_TRAJECTORY = 5

# The other proxy: appends its half of the pool, says so, then goes on writing.
LIVE_WRITER = """
import sys, time
from agentworld import records
from agentworld.pool import Pool

pool_path, n, rate = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
w = Pool.open(pool_path).writer(name="proxy_b", rotate_bytes=1 << 40)
def step(t, i):
    return records.make_step(
        trajectory=f"tr_b{t:07d}", index=i, agent="coder", protocol="openai.chat",
        status="ok", request={"messages": [{"role": "user", "content": f"task {t} turn {i}"}]},
        response={"message": {"role": "assistant", "content": "ok " * 20}},
        metadata={"proxy": "b"},
    )
for k in range(n):
    w.append(step(k // 5, k % 5))
    if k % 5 == 4 and (k // 5) % 10:
        w.append(records.make_end(trajectory=f"tr_b{k // 5:07d}", agent="coder", status="done", steps=5))
w.flush()
print("ready", flush=True)
t = n // 5
while True:
    for i in range(5):
        w.append(step(t, i))
        time.sleep(1 / rate)
    t += 1
"""


def fill_sealed(pool_path: Path, n: int) -> None:
    """Proxy ``a``'s half: sealed, one trajectory in ten without an end record."""
    from agentworld import records
    from agentworld.pool import Pool

    pool = Pool.create(pool_path)
    with pool.writer(name="proxy_a") as w:
        for k in range(n):
            t, i = divmod(k, STEPS_PER_TRAJECTORY)
            w.append(
                records.make_step(
                    trajectory=f"tr_a{t:07d}",
                    index=i,
                    agent="coder",
                    protocol="openai.chat",
                    status="ok",
                    request={"messages": [{"role": "user", "content": f"task {t} turn {i}"}]},
                    response={"message": {"role": "assistant", "content": "ok " * 20}},
                    metadata={"proxy": "a"},
                )
            )
            if i == STEPS_PER_TRAJECTORY - 1 and t % 10:
                w.append(
                    records.make_end(
                        trajectory=f"tr_a{t:07d}", agent="coder", status="done", steps=5
                    )
                )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(build: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(build)}


def refresh_index(build: Path, pool_path: Path) -> None:
    code = "import sys; from agentworld.pool import Pool; Pool.open(sys.argv[1]).index()"
    subprocess.run(
        [sys.executable, "-c", code, str(pool_path)], cwd=build, env=_env(build), check=True
    )


def restart_s(build: Path, pool_path: Path, give_up_s: float = 600.0) -> tuple[float, int]:
    """Seconds from starting `aw proxy --instance a` of ``build`` to a healthy answer,
    and how many trajectories it reopened (the answer's ``open_trajectories``)."""
    port = free_port()
    cmd = [sys.executable, "-m", "agentworld.proxy", "--pool", str(pool_path), "--port", str(port)]
    cmd += ["--upstream", "http://127.0.0.1:9", "--instance", "a"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=build, env=_env(build), stderr=subprocess.PIPE, text=True)
    try:
        while True:
            if time.perf_counter() - t0 > give_up_s:
                return give_up_s, -1
            if proc.poll() is not None:
                raise SystemExit(f"{build}: the proxy exited: {proc.stderr.read()}")  # type: ignore[union-attr]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/aw/health", timeout=5) as r:
                    if r.status == 200:
                        reopened = json.loads(r.read())["open_trajectories"]
                        break
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.01)
        took = time.perf_counter() - t0
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
    return took, reopened


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--steps", type=int, default=100_000, help="steps in the pool, both halves")
    ap.add_argument("--rate", type=float, default=200.0, help="the live proxy's steps a second")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--checkout", type=Path, help="the build to compare with (a git archive)")
    ap.add_argument("--give-up-s", type=float, default=120.0, help="stop a start this slow")
    a = ap.parse_args()
    builds = {"this": ROOT}
    if a.checkout is not None:
        if not (a.checkout / "agentworld" / "proxy" / "__init__.py").is_file():
            ap.error(f"--checkout: {a.checkout} is not an AgentWorld checkout")
        builds["base"] = a.checkout.resolve()
    with tempfile.TemporaryDirectory(prefix="aw-restart-") as tmp:
        pool_path = Path(tmp) / "pool"
        fill_sealed(pool_path, a.steps // 2)
        live = subprocess.Popen(
            [sys.executable, "-c", LIVE_WRITER, str(pool_path), str(a.steps // 2), str(a.rate)],
            env=_env(ROOT),
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert live.stdout is not None and live.stdout.readline().strip() == "ready"
            print(
                f"# pool: {a.steps:,} steps; proxy b live, writing {a.rate:g} steps/s into a"
                f" journal of {a.steps // 2:,}; {a.steps // 2 // STEPS_PER_TRAJECTORY // 10:,}"
                f" of proxy a's trajectories open"
            )
            took: dict[str, list[float]] = {name: [] for name in builds}
            empty: dict[str, list[float]] = {name: [] for name in builds}
            for r in range(a.rounds):
                for name, build in builds.items():
                    empty[name].append(restart_s(build, Path(tmp) / f"empty-{name}")[0])
                    refresh_index(build, pool_path)
                    s, reopened = restart_s(build, pool_path, a.give_up_s)
                    took[name].append(s)
                    shown = f"{s:6.2f} s" if reopened >= 0 else f">{s:5.0f} s (gave up)"
                    print(
                        f"round {r + 1} {name:>4}: {shown} to healthy, reopened {reopened:,};"
                        f" on an empty pool {empty[name][-1]:.2f} s"
                    )
        finally:
            live.kill()
            live.wait()
    med = {name: statistics.median(v) for name, v in took.items()}
    ref = {name: statistics.median(v) for name, v in empty.items()}
    line = (
        f"-> restart to a healthy /aw/health (medians): this build {med['this']:.2f} s"
        f" ({ref['this']:.2f} s on an empty pool)"
    )
    if "base" in med:
        line += (
            f"; the build before {med['base']:.2f} s ({ref['base']:.2f} s on an empty pool):"
            f" {med['base'] / med['this']:.1f}x"
        )
    print(line)


if __name__ == "__main__":
    main()
