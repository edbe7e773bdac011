"""Chaos runs against a real `aw proxy` process: SIGKILL under load, and a disk that fills up.

Each run starts `aw proxy` (this checkout) in its own process against the fake
upstream (served from this process), drives it with concurrent agents, half of
their calls streamed, and keeps what the proxy acknowledged: the
(``X-AW-Trajectory``, ``X-AW-Step``) of every 200 whose answer arrived whole.
Then it opens the pool as the next proxy would (recovering dead writers'
journals) and checks every acknowledged step is stored exactly once.

- ``sigkill``: SIGKILL the proxy right after an answer, while other calls are in
  flight, ``--kills`` times, restarting it each time. Strict durability must
  lose nothing; batched durability may lose what was answered within its
  commit window before a kill: the run measures that loss and its time span.
- ``diskfull``: the pool on a 4 MB tmpfs (needs root to mount; skipped with the
  reason otherwise), filled up while agents call, then freed. The properties:
  calls are refused with 503 + Retry-After while it is full, ``/aw/health``
  answers 503 then 200 again without a restart, every acknowledged step is
  stored once, no journal needs cutting, and in batched mode every step lost
  after its answer is counted in ``/aw/stats`` as lost.
- ``fuzz``: runs ``bench/chaos_fuzz.py`` (the request fuzzer) when it exists.
- ``all`` (the default): all of the above; ``--short`` is what CI runs (tests/chaos/).

    PYTHONPATH=. python bench/chaos.py [all [--short]]
    PYTHONPATH=. python bench/chaos.py sigkill --durability batched --kills 20
    PYTHONPATH=. python bench/chaos.py diskfull --durability strict
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentworld.pool import Pool  # noqa: E402
from agentworld.proxy.fake_upstream import FakeUpstream, make_fake_app  # noqa: E402

FUZZER = Path(__file__).with_name("chaos_fuzz.py")


class Skipped(Exception):
    """The run cannot happen here (the reason says why)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.asynccontextmanager
async def fake_upstream() -> AsyncIterator[str]:
    # A killed proxy cuts the streams it was reading: expected here, not worth a traceback.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    runner = web.AppRunner(make_fake_app(FakeUpstream("chaos", history=100)), access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


class Proxy:
    """One `aw proxy` process of this checkout on ``pool``; ``url`` changes with each start."""

    def __init__(self, pool: Path, upstream: str, durability: str) -> None:
        self.pool, self.upstream, self.durability = pool, upstream, durability
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.life = 0  # which start this is (1, 2, ...): what each call is tagged with

    async def start(self, session: aiohttp.ClientSession) -> float:
        """Start it and wait for a healthy answer; the seconds that took."""
        port = free_port()
        cmd = [sys.executable, "-m", "agentworld.proxy", "--pool", str(self.pool)]
        cmd += ["--upstream", self.upstream, "--port", str(port)]
        cmd += ["--durability", self.durability]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        while time.perf_counter() - t0 < 120:
            if self.proc.poll() is not None:
                raise RuntimeError(f"aw proxy exited with {self.proc.returncode}")
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(url + "/aw/health") as r:
                    if r.status == 200:
                        self.url = url
                        self.life += 1
                        return time.perf_counter() - t0
            await asyncio.sleep(0.02)
        raise RuntimeError("aw proxy did not become healthy in 120 s")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.url = ""

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=60)
        self.url = ""
        return rc

    async def get(self, session: aiohttp.ClientSession, path: str) -> tuple[int, Any]:
        async with session.get(self.url + path) as r:
            return r.status, await r.json()


@dataclass
class Load:
    """What the agents saw: acknowledged steps with when, and the refusals."""

    # (trajectory, step, when its answer was read, which start of the proxy answered it)
    acks: list[tuple[str, int, float, int]] = field(default_factory=list)
    refused: int = 0
    refused_with_retry_after: int = 0
    other: collections.Counter[str] = field(default_factory=collections.Counter)
    stop: asyncio.Event = field(default_factory=asyncio.Event)


async def _call(
    session: aiohttp.ClientSession, url: str, life: int, body: dict[str, Any], load: Load
) -> None:
    async with session.post(url + "/v1/chat/completions", json=body) as r:
        data = await r.read()
        if r.status == 503:
            load.refused += 1
            load.refused_with_retry_after += "Retry-After" in r.headers
            return
        if r.status != 200:
            load.other[f"http {r.status}"] += 1
            return
        if body.get("stream") and (b"data: [DONE]" not in data or b'"error"' in data):
            load.other["stream without its end"] += 1
            return
        tid, step = r.headers.get("X-AW-Trajectory"), r.headers.get("X-AW-Step")
        if tid is None or step is None:
            load.other["200 without X-AW-Step"] += 1
            return
        load.acks.append((tid, int(step), time.time(), life))


async def agent(n: int, proxy: Proxy, session: aiohttp.ClientSession, load: Load) -> None:
    """Unary and streamed calls, each a new conversation, until ``load.stop``."""
    i = 0
    while not load.stop.is_set():
        i += 1
        url, life = proxy.url, proxy.life
        if not url:
            await asyncio.sleep(0.02)
            continue
        msgs = [{"role": "user", "content": f"agent {n} call {i} {os.urandom(4).hex()}"}]
        body: dict[str, Any] = {"model": "m", "messages": msgs, "stream": i % 2 == 0}
        try:
            await _call(session, url, life, body, load)
        except (TimeoutError, aiohttp.ClientError):
            await asyncio.sleep(0.02)  # the proxy is down: it comes back


def stored(pool: Path) -> tuple[collections.Counter[tuple[str, int]], list[str]]:
    """(trajectory, index) -> how many steps the pool holds there, after recovery; and the
    problems recovery found (torn tails, checksum mismatches)."""
    p = Pool.open(pool)
    problems = [f"{r.journal}: {r.problem}" for r in p.recovered if r.problem]
    counts: collections.Counter[tuple[str, int]] = collections.Counter(
        (r["trajectory"], r["index"]) for r in p.iter_records() if r["kind"] == "step"
    )
    return counts, problems


def check_acks(load: Load, counts: collections.Counter[tuple[str, int]]) -> dict[str, Any]:
    lost = [(at, life) for t, i, at, life in load.acks if counts[(t, i)] == 0]
    return {
        "acknowledged": len(load.acks),
        "lost": len(lost),
        "duplicated": sum(1 for n in counts.values() if n > 1),
        "_lost": lost,
    }


async def _wait(cond: Any, timeout_s: float, what: str) -> None:
    t0 = time.perf_counter()
    while not await cond():
        if time.perf_counter() - t0 > timeout_s:
            raise RuntimeError(f"timed out after {timeout_s:g} s waiting for {what}")
        await asyncio.sleep(0.02)


async def sigkill(
    durability: str, *, kills: int, agents: int, acks_per_kill: int
) -> dict[str, Any]:
    """SIGKILL the proxy ``kills`` times under load; every acknowledged step checked."""
    with tempfile.TemporaryDirectory(prefix="aw-chaos-") as tmp:
        pool = Path(tmp) / "pool"
        Pool.create(pool)
        load = Load()
        kill_times: list[float] = []
        restart_s: list[float] = []
        async with fake_upstream() as up, aiohttp.ClientSession() as session:
            proxy = Proxy(pool, up, durability)
            tasks = [asyncio.create_task(agent(n, proxy, session, load)) for n in range(agents)]
            try:
                for _ in range(kills):
                    restart_s.append(await proxy.start(session))
                    goal = len(load.acks) + acks_per_kill

                    async def enough(goal: int = goal) -> bool:
                        return len(load.acks) >= goal

                    await _wait(enough, 120, f"{acks_per_kill} answers")
                    await asyncio.sleep(random.uniform(0, 0.02))  # calls in flight
                    proxy.kill()
                    kill_times.append(time.time())  # that of start ``proxy.life``
            finally:
                load.stop.set()
                await asyncio.gather(*tasks)
        counts, problems = stored(pool)
    out = check_acks(load, counts)
    # The loss window: from each lost step's answer to the kill of the proxy that answered
    # it (by the start it was sent to: an answer written just before the kill can reach
    # its agent after the kill is timed, and belongs to that kill, not the next one).
    spans = [max(0.0, kill_times[life - 1] - at) for at, life in out.pop("_lost")]
    out.update(
        scenario=f"sigkill {durability}",
        kills=kills,
        loss_window_ms=round(max(spans) * 1000, 1) if spans else 0.0,
        restart_s_max=round(max(restart_s), 2),
        recovery_problems=problems,  # a SIGKILL may tear a tail: cut, never acknowledged
        other=dict(load.other),
    )
    out["ok"] = out["duplicated"] == 0 and (durability == "batched" or out["lost"] == 0)
    return out


@contextlib.contextmanager
def small_tmpfs(size: str = "4m") -> Any:
    """A fresh tmpfs of ``size`` mounted on a temporary folder (Skipped where not allowed)."""
    where = Path(tempfile.mkdtemp(prefix="aw-chaos-fs-"))
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
            capture_output=True,
            text=True,
        )
        problem = None if done.returncode == 0 else (done.stderr.strip() or "not root")
    except OSError as exc:  # no mount(8) here
        problem = str(exc)
    if problem is not None:
        where.rmdir()
        raise Skipped(f"cannot mount a tmpfs here ({problem})")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
        with contextlib.suppress(OSError):
            where.rmdir()


def fill(path: Path) -> int:
    """Write zeros to ``path`` until the file system is full; the bytes written."""
    n = 0
    with open(path, "wb", buffering=0) as f:
        for size in (64 * 1024, 512):  # big pieces, then the last few blocks
            with contextlib.suppress(OSError):
                while True:
                    n += f.write(bytes(size))
    return n


async def diskfull(durability: str, *, agents: int, acks: int) -> dict[str, Any]:
    """Fill the pool's file system under load, then free it; the properties of issue 26."""
    with small_tmpfs() as fs:
        pool = fs / "pool"
        Pool.create(pool)
        load = Load()
        health_seen: set[int] = set()
        async with fake_upstream() as up, aiohttp.ClientSession() as session:
            proxy = Proxy(pool, up, durability)
            await proxy.start(session)
            tasks = [asyncio.create_task(agent(n, proxy, session, load)) for n in range(agents)]
            try:

                async def answered(goal: int) -> bool:
                    return len(load.acks) >= goal

                await _wait(lambda: answered(acks), 60, "answers before the disk fills")
                fill(fs / "filler")
                t_full = time.perf_counter()

                async def refusing() -> bool:
                    status, _ = await proxy.get(session, "/aw/health")
                    health_seen.add(status)
                    return status == 503 and load.refused_with_retry_after >= agents

                await _wait(refusing, 60, "refusals while the disk is full")
                full_for_s = time.perf_counter() - t_full
                answered_while_full = len(load.acks)
                await asyncio.sleep(0.5)  # a while full: nothing may be answered unstored
                (fs / "filler").unlink()
                t_freed = time.perf_counter()

                async def healthy() -> bool:
                    status, _ = await proxy.get(session, "/aw/health")
                    health_seen.add(status)
                    return status == 200

                await _wait(healthy, 60, "/aw/health to recover")
                recovered_s = time.perf_counter() - t_freed
                goal = len(load.acks) + acks
                await _wait(lambda: answered(goal), 60, "answers after space was freed")
                _, stats = await proxy.get(session, "/aw/stats")
            finally:
                load.stop.set()
                await asyncio.gather(*tasks)
                rc = proxy.stop()
        counts, problems = stored(pool)
    out = check_acks(load, counts)
    out.pop("_lost")
    counted_lost = stats["steps"].get("lost", 0)
    out.update(
        scenario=f"diskfull {durability}",
        refused=load.refused,
        refused_with_retry_after=load.refused_with_retry_after,
        answered_while_filling=answered_while_full - acks,
        seconds_to_refuse=round(full_for_s, 2),
        seconds_to_recover=round(recovered_s, 2),
        health_statuses=sorted(health_seen),
        counted_lost=counted_lost,
        proxy_exit=rc,
        recovery_problems=problems,
        other=dict(load.other),
    )
    out["ok"] = (
        out["duplicated"] == 0
        and not problems
        and 503 in health_seen
        and (out["lost"] == 0 if durability == "strict" else out["lost"] == counted_lost)
        and rc == 0
    )
    return out


def fuzz(args: list[str]) -> dict[str, Any]:
    """The request fuzzer (bench/chaos_fuzz.py, written with the hostile-input work)."""
    if not FUZZER.is_file():
        raise Skipped(f"{FUZZER.name} is not in this checkout")
    rc = subprocess.run([sys.executable, str(FUZZER), *args], cwd=ROOT).returncode
    return {"scenario": "fuzz", "exit": rc, "ok": rc == 0}


async def run_all(short: bool) -> list[dict[str, Any]]:
    kills, per_kill = (3, 60) if short else (20, 300)
    out = []
    for durability in ("strict", "batched"):
        out.append(await sigkill(durability, kills=kills, agents=8, acks_per_kill=per_kill))
    for durability in ("strict", "batched"):
        try:
            out.append(await diskfull(durability, agents=8, acks=40 if short else 400))
        except Skipped as exc:
            out.append({"scenario": f"diskfull {durability}", "skipped": str(exc), "ok": True})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="command")  # none: all (as `make bench` runs it)
    k = sub.add_parser("sigkill", help="SIGKILL the proxy under load")
    k.add_argument("--durability", choices=("strict", "batched"), default="strict")
    k.add_argument("--kills", type=int, default=20)
    k.add_argument("--agents", type=int, default=8)
    k.add_argument("--acks-per-kill", type=int, default=300)
    d = sub.add_parser("diskfull", help="fill the pool's tmpfs under load, then free it")
    d.add_argument("--durability", choices=("strict", "batched"), default="strict")
    d.add_argument("--agents", type=int, default=8)
    d.add_argument("--acks", type=int, default=400)
    f = sub.add_parser("fuzz", help="run bench/chaos_fuzz.py")
    f.add_argument("args", nargs=argparse.REMAINDER)
    a_ = sub.add_parser("all", help="every run")
    a_.add_argument("--short", action="store_true", help="fewer kills and calls (CI)")
    a = ap.parse_args()
    if a.command is None:
        a.command, a.short = "all", False
    try:
        if a.command == "sigkill":
            results = [
                asyncio.run(
                    sigkill(
                        a.durability, kills=a.kills, agents=a.agents, acks_per_kill=a.acks_per_kill
                    )
                )
            ]
        elif a.command == "diskfull":
            results = [asyncio.run(diskfull(a.durability, agents=a.agents, acks=a.acks))]
        elif a.command == "fuzz":
            results = [fuzz(a.args)]
        else:
            results = asyncio.run(run_all(a.short))
            with contextlib.suppress(Skipped):
                results.append(fuzz(["--short"] if a.short else []))
    except Skipped as exc:
        print(f"skipped: {exc}")
        return
    for r in results:
        print(json.dumps(r))
    if not all(r["ok"] for r in results):
        sys.exit(1)


if __name__ == "__main__":
    main()
