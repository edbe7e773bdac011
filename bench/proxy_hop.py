"""The cost of a bare hop: `aw proxy` beside a bare aiohttp pass-through, loaded by wrk.

wrk (a C load generator: /usr/bin/wrk, ``apt-get install wrk``) drives each target in
turn, in rotating rounds (bare, this, baseline; then this, baseline, bare; ...), so a
busy spell of the machine hits all alike. The targets, each in its own process, all in
front of one upstream (``bench/_hop_servers.py``: pre-encoded vLLM-shaped answers from a
raw uvloop protocol, with token ids and log-probs, so it is never the bottleneck):

- ``bare``: an aiohttp pass-through on uvloop that records nothing (the floor of an
  aiohttp hop);
- ``this``: ``aw proxy`` of this checkout, default (batched) durability;
- ``base``: with ``--baseline DIR``, the same command from another build
  (``git archive 6ed6928 | tar -x -C /tmp/base``);
- ``direct``: the upstream itself (latency mode only: what a hop adds is measured from it).

Every request is a new conversation or the next turn of the one before (wrk's Lua script
numbers them), so threading opens new trajectories and the pool and the open-trajectory
registry grow as they do in real use. Per target it reports the CPU the target's process
used per call (utime + stime of all its threads from /proc/PID/stat, over the run, divided
by the calls completed), throughput, p50 and p99, and ratios to the bare hop, each the
median over rounds of what one round measured side by side. Beside the CPU ratio goes a
bootstrap 90% interval of that median (as ``bench/proxy_overhead.py`` gives): a goal is
met with a margin when the interval clears it, not just the median.

Modes (``--modes``, all by default):

- ``unary`` / ``stream``: concurrency 32 (``--connections``), ``--seconds`` a run; the
  stream comes from the upstream in one write (the worst case for a relay: its 14 events
  in one read, each parsed, stripped and re-encoded, while a pass-through copies bytes);
- ``paced``: the same stream one event a write, 2 ms apart, as an engine sends tokens
  (each event its own read and write for every target);
- ``latency``: concurrency 1 for ``--latency-s`` (300) per target, in 20 s slices that
  rotate; added p99 = the target's p99 minus the upstream's own, over the whole run (wrk's
  histograms merged). wrk counts the calls a stall held back (its coordinated-omission
  correction: a 100 ms stall at 0.6 ms a call adds ~170 samples, steps of run time /
  calls apart), so a stall weighs in p99 as it does for agents queued behind it;
- ``bigbody``: a probe at concurrency 1 while another agent sends ``--big-mb`` (20) MB chat
  bodies (a growing conversation, three turns): the worst probe latency is the stall
  one agent's big call puts on the others.

    python bench/proxy_hop.py [--baseline DIR] [--modes unary,stream,paced,latency,bigbody]
                              [--rounds 3] [--seconds 10] [--latency-s 300] [--short] [--pin]

``--short`` is a ~2-minute sanity run (2 rounds of 4 s runs, a 20 s latency mode, a 10 MB
body; ~3 minutes with ``--baseline``).
``--pin`` puts wrk and the upstream on CPU 0 and the targets on CPU 1 (taskset), so the
load generator never takes the hop's core; without it the scheduler places them. The
figures in docs/benchmarks.md say which.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from proxy_overhead import cpu_s, free_ports, median_interval

ROOT = Path(__file__).resolve().parents[1]
SERVERS = Path(__file__).resolve().parent / "_hop_servers.py"
REPLY = "Hello! How can I help you today?"

# One request in two opens a conversation, the next continues it (the upstream's answer,
# then a new user turn): new trajectories, threaded continuations, a growing registry.
LUA = r"""
local stream = %(stream)s
local paced = %(paced)s
local anthropic = %(anthropic)s
local system = "You are a careful agent. " .. string.rep("Read the task, plan, act. ", 12)
local head = {["Content-Type"] = "application/json"}
local threads = {}
local n, tid, nonce = 0, 0, "x"
setup = function(thread)
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end
init = function(args) nonce = args[1] or "x" end
request = function()
  n = n + 1
  local task = nonce .. "-" .. tid .. "-" .. math.floor((n + 1) / 2)
  local msgs = '[{"role":"user","content":"task ' .. task .. ': fix the failing test"}'
  if not anthropic then
    msgs = '[{"role":"system","content":"' .. system .. '"},' .. string.sub(msgs, 2)
  end
  if n %% 2 == 0 then
    msgs = msgs .. ',{"role":"assistant","content":"%(reply)s"},'
      .. '{"role":"user","content":"go on"}'
  end
  local body = '{"model":"m","max_tokens":64,"messages":' .. msgs .. ']'
  if anthropic then body = body .. ',"system":"' .. system .. '"' end
  if stream then body = body .. ',"stream":true' end
  if paced then body = body .. ',"user":"paced"' end
  local path = anthropic and "/v1/messages" or "/v1/chat/completions"
  return wrk.format("POST", path, head, body .. "}")
end
done = function(summary, latency, requests)
  local e = summary.errors
  local hist = {}
  for i = 1, #latency do
    local v, c = latency(i)
    table.insert(hist, string.format("[%%d,%%d]", v, c))
  end
  io.write(string.format(
    'HOPJSON {"requests":%%d,"duration_us":%%d,"errors":%%d,"hist":[%%s]}\n',
    summary.requests, summary.duration,
    e.connect + e.read + e.write + e.status + e.timeout, table.concat(hist, ",")))
end
"""


def lua_script(stream: bool, folder: Path, *, paced: bool = False, anthropic: bool = False) -> Path:
    """wrk's script: chat calls, or (``anthropic``) Anthropic Messages calls, which the
    proxy translates for the chat upstream."""
    name = "paced" if paced else "stream" if stream else "unary"
    path = folder / f"{name}{'-messages' if anthropic else ''}.lua"
    flags = {
        "stream": "true" if stream or paced else "false",
        "paced": str(paced).lower(),
        "anthropic": str(anthropic).lower(),
    }
    path.write_text(LUA % {**flags, "reply": REPLY})
    return path


def quantile(hist: list[tuple[int, int]], q: float) -> float:
    """The ``q`` quantile (seconds) of a histogram of (microseconds, count)."""
    total = sum(c for _, c in hist)
    seen, goal = 0, q * total
    for value, count in sorted(hist):
        seen += count
        if seen >= goal:
            return value / 1e6
    return 0.0


class Target:
    """One server under test: its process, its URL, the CPU it has used."""

    def __init__(self, name: str, proc: subprocess.Popen[bytes], port: int) -> None:
        self.name, self.proc, self.port = name, proc, port
        self.url = f"http://127.0.0.1:{port}"
        self.rounds: dict[str, list[dict]] = {}

    def cpu(self) -> float:
        return cpu_s(self.proc.pid)


def launch(cmd: list[str], root: Path, cpu: int | None) -> subprocess.Popen[bytes]:
    """Start ``cmd`` on the code of checkout ``root`` (its cwd too: ``-m`` puts the cwd
    ahead of PYTHONPATH), pinned to ``cpu`` when given."""
    pin = ["taskset", "-c", str(cpu)] if cpu is not None else []
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.Popen(
        [*pin, sys.executable, *cmd], env=env, cwd=root, stdout=subprocess.DEVNULL
    )


def wait_up(url: str, seconds: float = 30.0) -> None:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "up?"}]}).encode()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            req = urllib.request.Request(
                url + "/v1/chat/completions", body, {"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(req, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{url} did not start in {seconds:.0f} s")


def wrk(url: str, script: Path, *, connections: int, seconds: float, cpu: int | None) -> dict:
    """One wrk run; its summary and latency histogram."""
    threads = min(connections, 2)
    pin = ["taskset", "-c", str(cpu)] if cpu is not None else []
    cmd = [*pin, "wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds:g}s", "--timeout", "30s"]
    cmd += ["-s", str(script), url, "--", uuid.uuid4().hex[:8]]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    line = next(x for x in out.splitlines() if x.startswith("HOPJSON "))
    data = json.loads(line.removeprefix("HOPJSON "))
    data["hist"] = [tuple(x) for x in data["hist"]]
    return data


def measure(target: Target, script: Path, connections: int, seconds: float, cpu) -> dict:
    """A wrk run against ``target`` with the CPU its process used meanwhile."""
    cpu0 = target.cpu()
    got = wrk(target.url, script, connections=connections, seconds=seconds, cpu=cpu)
    used = target.cpu() - cpu0
    calls = got["requests"] - got["errors"]
    return {
        "calls": calls,
        "errors": got["errors"],
        "rps": calls / (got["duration_us"] / 1e6),
        "cpu_ms": used / max(calls, 1) * 1000,
        "p50": quantile(got["hist"], 0.5),
        "p99": quantile(got["hist"], 0.99),
        "max": max((v for v, _ in got["hist"]), default=0) / 1e6,
        "hist": got["hist"],
    }


def rotated(items: list, k: int) -> list:
    k %= len(items)
    return items[k:] + items[:k]


def big_sender(url: str, mb: int, turns: int, stop: threading.Event, log: list) -> None:
    """One agent sending a ``mb`` MB conversation, then its next turns (each adds a turn)."""
    time.sleep(1.0)  # the probe's latency before the big body is the reference
    chunk = "tool output line " * 600  # ~10 kB a message
    msgs = [{"role": "system", "content": "You are a coding agent."}]
    while sum(len(m["content"]) for m in msgs) < mb * 1_000_000:
        msgs.append({"role": "user", "content": chunk})
        msgs.append({"role": "assistant", "content": "ok"})
    for turn in range(turns):
        if stop.is_set():
            return
        msgs.append({"role": "user", "content": f"turn {turn}: go on"})
        body = json.dumps({"model": "m", "max_tokens": 16, "messages": msgs}).encode()
        req = urllib.request.Request(
            url + "/v1/chat/completions", body, {"Content-Type": "application/json"}
        )
        t0 = time.perf_counter()
        with urllib.request.urlopen(req, timeout=120) as r:
            r.read()
        log.append(time.perf_counter() - t0)
        msgs.append({"role": "assistant", "content": REPLY})
        time.sleep(1.0)


def bigbody(target: Target, script: Path, args, cpu) -> dict:
    """The probe's latency while one agent sends big bodies to the same target."""
    stop, log = threading.Event(), []
    sender = threading.Thread(
        target=big_sender, args=(target.url, args.big_mb, 3, stop, log), daemon=True
    )
    sender.start()
    got = measure(target, script, 1, args.big_s, cpu)
    stop.set()
    sender.join(timeout=300)
    got["big_s"] = max(log, default=float("nan"))
    return got


def table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # plain text where rich is missing
        print(title)
        for row in [columns, *rows]:
            print("  ".join(f"{c:>14}" for c in row))
        return
    t = Table(title=title)
    for c in columns:
        t.add_column(c, justify="right" if c != "target" else "left")
    for row in rows:
        t.add_row(*row)
    Console(width=None if sys.stdout.isatty() else 120).print(t)  # whole in a log


def med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report_load(mode: str, targets: list[Target]) -> None:
    bare = targets[0].rounds[mode]
    rows = []
    for t in targets:
        got = t.rounds[mode]
        ratio_cpu = [g["cpu_ms"] / b["cpu_ms"] for g, b in zip(got, bare, strict=True)]
        ratio_rps = [g["rps"] / b["rps"] for g, b in zip(got, bare, strict=True)]
        low, high = median_interval(ratio_cpu)
        rows.append(
            [
                t.name,
                f"{med([g['cpu_ms'] for g in got]):.3f}",
                f"{med(ratio_cpu):.2f}x",
                f"{low:.2f}-{high:.2f}",
                f"{med([g['rps'] for g in got]):,.0f}",
                f"{med(ratio_rps):.2f}",
                f"{med([g['p50'] for g in got]) * 1000:.2f}",
                f"{med([g['p99'] for g in got]) * 1000:.2f}",
                str(sum(g["errors"] for g in got)),
            ]
        )
    columns = ["target", "CPU ms/call", "CPU vs bare", "90% interval", "calls/s", "rps vs bare"]
    columns.append("p50 ms")
    table(f"{mode}, medians of {len(bare)} rounds", [*columns, "p99 ms", "errors"], rows)


def report_latency(targets: list[Target]) -> None:
    merged = {t.name: [h for g in t.rounds["latency"] for h in g["hist"]] for t in targets}
    own = {name: (quantile(h, 0.5), quantile(h, 0.99)) for name, h in merged.items()}
    d50, d99 = own["direct"]
    rows = []
    for t in targets:
        p50, p99 = own[t.name]
        worst = max(g["max"] for g in t.rounds["latency"])
        calls = sum(g["calls"] for g in t.rounds["latency"])
        round_p99 = [g["p99"] * 1000 for g in t.rounds["latency"]]
        rows.append(
            [
                t.name,
                f"{calls:,}",
                f"{p50 * 1000:.2f}",
                f"{p99 * 1000:.2f}",
                f"{(p50 - d50) * 1000:+.2f}",
                f"{(p99 - d99) * 1000:+.2f}",
                f"{max(round_p99):.2f}",
                f"{worst * 1000:.1f}",
            ]
        )
    columns = ["target", "calls", "p50 ms", "p99 ms", "added p50", "added p99"]
    table("latency at concurrency 1, whole run", [*columns, "worst slice p99", "max ms"], rows)


def report_bigbody(targets: list[Target]) -> None:
    rows = []
    for t in targets:
        got = t.rounds["bigbody"]
        rows.append(
            [
                t.name,
                f"{med([g['p50'] for g in got]) * 1000:.2f}",
                f"{med([g['max'] for g in got]) * 1000:.0f}",
                f"{max(g['max'] for g in got) * 1000:.0f}",
                f"{med([g['big_s'] for g in got]):.2f}",
            ]
        )
    columns = ["target", "probe p50 ms", "probe max ms (median)", "worst ms", "big call s"]
    table("a big body beside a probe at concurrency 1", columns, rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--baseline", type=Path, help="another build's checkout, run side by side")
    p.add_argument("--modes", default="unary,stream,paced,latency,bigbody")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=10.0, help="one unary/stream run")
    p.add_argument("--connections", type=int, default=32)
    p.add_argument("--latency-s", type=float, default=300.0, help="latency mode, per target")
    p.add_argument("--big-mb", type=int, default=20)
    p.add_argument("--big-s", type=float, default=0.0, help="bigbody probe run (0: sized to MB)")
    p.add_argument("--short", action="store_true", help="a ~2-minute sanity run")
    p.add_argument("--pin", action="store_true", help="wrk + upstream on CPU 0, targets on 1")
    args = p.parse_args()
    if args.short:
        args.rounds, args.seconds, args.latency_s, args.big_mb = 2, 4.0, 20.0, 10
    args.big_s = args.big_s or max(10.0, args.big_mb * 0.8)
    if shutil.which("wrk") is None:
        print("proxy_hop: skipped, wrk is not installed (apt-get install wrk)")
        return
    print("$ " + " ".join(["python", *sys.argv]), flush=True)
    modes = args.modes.split(",")
    load_cpu, hop_cpu = (0, 1) if args.pin else (None, None)

    folder = Path(tempfile.mkdtemp(prefix="aw-hop-"))
    names = ["upstream", "bare", "this", "base"]
    ports = dict(zip(names, free_ports(len(names)), strict=True))
    up = f"http://127.0.0.1:{ports['upstream']}"
    upstream = launch([str(SERVERS), "upstream", str(ports["upstream"])], ROOT, load_cpu)
    procs = [upstream]
    try:
        bare = launch([str(SERVERS), "bare", str(ports["bare"]), up], ROOT, hop_cpu)
        procs.append(bare)
        targets = [Target("bare", bare, ports["bare"])]
        builds = [("this", ROOT)] + ([("base", args.baseline.resolve())] if args.baseline else [])
        for name, root in builds:
            cmd = ["-m", "agentworld.proxy", "--pool", str(folder / f"pool-{name}")]
            cmd += ["--upstream", up, "--port", str(ports[name])]
            procs.append(launch(cmd, root, hop_cpu))
            targets.append(Target(name, procs[-1], ports[name]))
        wait_up(up)
        for t in targets:
            wait_up(t.url)
        direct = Target("direct", upstream, ports["upstream"])
        scripts = {
            "unary": lua_script(False, folder),
            "stream": lua_script(True, folder),
            "paced": lua_script(True, folder, paced=True),
        }
        for t in targets:  # warm up: imports, connections, the first shard
            wrk(t.url, scripts["unary"], connections=args.connections, seconds=1, cpu=load_cpu)

        for mode in modes:
            if mode in ("unary", "stream", "paced"):
                script = scripts[mode]
                for r in range(args.rounds):
                    for t in rotated(targets, r):
                        got = measure(t, script, args.connections, args.seconds, load_cpu)
                        t.rounds.setdefault(mode, []).append(got)
                        print(
                            f"  {mode} round {r + 1} {t.name}: {got['cpu_ms']:.3f} ms CPU/call,"
                            f" {got['rps']:,.0f}/s",
                            file=sys.stderr,
                            flush=True,
                        )
                report_load(mode, targets)
            elif mode == "latency":
                every = [direct, *targets]
                slices = max(args.rounds, round(args.latency_s / 20))
                for r in range(slices):
                    for t in rotated(every, r):
                        got = measure(t, scripts["unary"], 1, args.latency_s / slices, load_cpu)
                        t.rounds.setdefault("latency", []).append(got)
                    print(f"  latency slice {r + 1}/{slices}", file=sys.stderr, flush=True)
                report_latency(every)
            elif mode == "bigbody":
                for r in range(args.rounds):
                    for t in rotated(targets, r):
                        got = bigbody(t, scripts["unary"], args, load_cpu)
                        t.rounds.setdefault("bigbody", []).append(got)
                        print(
                            f"  bigbody round {r + 1} {t.name}: probe max"
                            f" {got['max'] * 1000:.0f} ms",
                            file=sys.stderr,
                            flush=True,
                        )
                report_bigbody(targets)
            else:
                raise SystemExit(f"unknown mode {mode!r}: unary, stream, paced, latency or bigbody")
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
