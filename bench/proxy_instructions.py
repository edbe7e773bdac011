"""The cost of a hop in instructions: `aw proxy` beside a bare aiohttp pass-through, under callgrind.

`bench/proxy_hop.py` reads CPU time, which on a shared 2-core virtual machine
moves by tens of percent between runs: the bare hop's own CPU per call has
ranged over 0.21-0.33 ms in one day, more than the difference a change to the
proxy makes. This counts what the process executes instead (valgrind's
callgrind, user-space instructions of all its threads), whatever else the
machine does: two runs of the same build agree within ~1.5% (the proxy's work
a call moves a little with the call rate: its writer commits every 50 ms), so
it tells a change of a few percent, side by side with the build before.

Each target runs alone under ``valgrind --tool=callgrind --instr-atstart=no``
in front of the same upstream (``bench/_hop_servers.py``, not under valgrind),
is warmed up by wrk, then counted over ``--seconds`` of wrk's load (concurrency
``--connections``, the calls of ``bench/proxy_hop.py``: new conversations and
their next turns). Instructions per call = the instructions counted / the calls
wrk completed. Modes: ``unary`` and ``stream`` (chat, the stream in one upstream
write), ``messages`` (the same stream asked for as Anthropic Messages, which the
proxy translates; the bare hop serves chat only and sits this one out: read it
beside ``--baseline``).

- ``bare``: the aiohttp pass-through on uvloop that records nothing;
- ``this``: ``aw proxy`` of this checkout (batched durability);
- ``base``: with ``--baseline DIR``, the same command from another build;
- ``this-X``: with ``--ablate X,...``, this checkout with part X switched off
  (monkeypatched at start-up), to tell what that part costs a call:
  ``novalidate`` (record validation), ``norecord`` (the pool writer's whole work:
  encoding, journal, compression), ``nocompress`` (compression only),
  ``noredact`` (redaction), ``nostats`` (counters), ``noparse`` (a chat stream's
  events relayed unread, the answer recorded the first stream's: the floor of any
  relay that reads them, compiled or not).

What it leaves out: system calls and the kernel's network work (the same count
for both hops, the proxy's per call no higher: ``strace -c`` shows it), and how
long an instruction takes (cache misses, the GIL's handovers between threads).
So the ratio is higher than `proxy_hop.py`'s CPU-time ratio, and it is not the
issue's goal figure: it is the steady measure of a change.

    python bench/proxy_instructions.py [--baseline DIR] [--modes unary,stream,messages]
                                       [--seconds 15] [--ablate novalidate,norecord]

Needs valgrind and wrk (``apt-get install valgrind wrk``); says so and skips without
them. ~1 minute a target and mode.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from proxy_hop import ROOT, SERVERS, lua_script, table, wait_up, wrk
from proxy_overhead import free_ports

# Parts of a recorded call that ``--ablate`` can switch off, each a few lines run at
# interpreter start (a ``sitecustomize`` on the target's path) before the proxy starts.
ABLATIONS = {
    "novalidate": "from agentworld import records\nrecords.validate = lambda record: record\n",
    "norecord": (
        "from agentworld.pool import writer\n"
        "async def _append_async(self, record):\n    return None\n"
        "writer.PoolWriter.append_async = _append_async\n"
    ),
    "nocompress": (
        "from agentworld.pool import writer\n"
        "writer._Compressor.submit = lambda self, journal, batch: None\n"
    ),
    "noredact": (
        "from agentworld.proxy import recorder\n"
        "recorder.redact_record = lambda record, keys: None\n"
    ),
    # The floor of a relay that reads its events (what a compiled one would approach): the
    # events go as they came, and the answer recorded is the first stream's, parsed once.
    "noparse": (
        "from agentworld.proxy.adapters import openai_stream as s\n"
        "_feed, _partial, _seen = s.OpenAIRelay.feed, s.OpenAIRelay.partial, {}\n"
        "def feed(self, events, parts):\n"
        "    if 'answer' not in _seen:\n"
        "        return _feed(self, events, parts)\n"
        "    for ev in events:\n"
        "        if ev == b'data: [DONE]':\n"
        "            self.done = True\n"
        "        else:\n"
        "            parts.append(ev + b'\\n\\n')\n"
        "        self.asm.chunks += 1\n"
        "def partial(self):\n"
        "    if 'answer' not in _seen:\n"
        "        _seen['answer'] = _partial(self)\n"
        "    a = _seen['answer']\n"
        "    return {**a, 'choices': [{**c, 'message': dict(c['message'])} for c in a['choices']]}\n"
        "s.OpenAIRelay.feed, s.OpenAIRelay.partial = feed, partial\n"
    ),
    "nostats": (
        "from agentworld.proxy import stats\n"
        "stats.ProxyStats.step = lambda self, *a, **k: None\n"
        "stats.ProxyStats.request = lambda self, *a, **k: None\n"
    ),
}


def ablation_path(folder: Path, name: str) -> Path:
    """A folder whose ``sitecustomize.py`` switches off ``name``."""
    where = folder / f"ablate-{name}"
    where.mkdir()
    (where / "sitecustomize.py").write_text(ABLATIONS[name])
    return where


# unary and stream: chat calls; messages: streamed Anthropic Messages calls, translated for
# the chat upstream (the bare hop serves chat only: compare with the baseline).
MODES = ("unary", "stream", "messages")


def counted(out_prefix: Path) -> int:
    """Instructions in callgrind's dumps (the totals of each part it wrote)."""
    total = 0
    for f in out_prefix.parent.glob(out_prefix.name + "*"):
        m = re.search(r"^totals: (\d+)", f.read_text(errors="replace"), re.MULTILINE)
        if m:
            total += int(m.group(1))
    return total


def run_target(
    name: str,
    cmd: list[str],
    root: Path,
    extra_path: Path | None,
    folder: Path,
    port: int,
    script: Path,
    args: argparse.Namespace,
) -> dict:
    """Start ``cmd`` under callgrind, load it, count; its instructions per call."""
    out = folder / f"cg-{name}-{script.stem}.out"
    path = [str(root)] + ([str(extra_path)] if extra_path is not None else [])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    env["PYTHONMALLOC"] = "malloc"  # valgrind sees each allocation (as it does C's)
    vg = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]
    proc = subprocess.Popen(
        [*vg, sys.executable, *cmd],
        env=env,
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_up(url, seconds=180)
        wrk(url, script, connections=args.connections, seconds=5, cpu=None)  # warm up
        control = ["callgrind_control"]
        subprocess.run([*control, "-i", "on", str(proc.pid)], check=True, capture_output=True)
        got = wrk(url, script, connections=args.connections, seconds=args.seconds, cpu=None)
        subprocess.run([*control, "-i", "off", str(proc.pid)], check=True, capture_output=True)
        subprocess.run([*control, "-d", str(proc.pid)], check=True, capture_output=True)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    calls = got["requests"] - got["errors"]
    return {"calls": calls, "errors": got["errors"], "per_call": counted(out) / max(calls, 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--baseline", type=Path, help="another build's checkout, counted beside")
    p.add_argument("--modes", default="unary,stream")
    p.add_argument("--seconds", type=float, default=15.0, help="the counted load, per target")
    p.add_argument("--connections", type=int, default=8)
    p.add_argument("--ablate", default="", help=f"comma-separated: {', '.join(ABLATIONS)}")
    args = p.parse_args()
    missing = [t for t in ("valgrind", "callgrind_control", "wrk") if shutil.which(t) is None]
    if missing:
        print(f"proxy_instructions: skipped, not installed: {', '.join(missing)}")
        return
    ablate = [a for a in args.ablate.split(",") if a]
    unknown = [a for a in ablate if a not in ABLATIONS]
    if unknown:
        p.error(f"--ablate: unknown {', '.join(unknown)} (known: {', '.join(ABLATIONS)})")
    modes = args.modes.split(",")
    if any(m not in MODES for m in modes):
        p.error(f"--modes: some of {', '.join(MODES)}, got {args.modes!r}")
    print("$ " + " ".join(["python", *sys.argv]), flush=True)

    folder = Path(tempfile.mkdtemp(prefix="aw-instr-"))
    up_port, port = free_ports(2)
    up = f"http://127.0.0.1:{up_port}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    upstream = subprocess.Popen(
        [sys.executable, str(SERVERS), "upstream", str(up_port)], env=env, stdout=subprocess.DEVNULL
    )
    try:
        wait_up(up)
        # (name, command, checkout, extra path)
        targets: list[tuple[str, list[str], Path, Path | None]] = [
            ("bare", [str(SERVERS), "bare", str(port), up], ROOT, None)
        ]
        builds = [("this", ROOT, None)]
        if args.baseline:
            builds.append(("base", args.baseline.resolve(), None))
        builds += [(f"this-{a}", ROOT, ablation_path(folder, a)) for a in ablate]
        for name, root, extra in builds:
            pool = folder / f"pool-{name}"
            cmd = ["-m", "agentworld.proxy", "--pool", str(pool), "--upstream", up]
            targets.append((name, [*cmd, "--port", str(port)], root, extra))
        for mode in modes:
            script = lua_script(mode != "unary", folder, anthropic=mode == "messages")
            results: dict[str, dict] = {}
            for name, cmd, root, extra in targets:
                if mode == "messages" and name == "bare":
                    continue  # it serves chat only: nothing it could do with a Messages call
                t0 = time.monotonic()
                results[name] = got = run_target(name, cmd, root, extra, folder, port, script, args)
                print(
                    f"  {mode} {name}: {got['per_call']:,.0f} instructions a call over"
                    f" {got['calls']:,} calls ({time.monotonic() - t0:.0f} s)",
                    file=sys.stderr,
                    flush=True,
                )
            bare = results["bare"]["per_call"] if "bare" in results else None
            this = results["this"]["per_call"]
            rows = []
            for name, got in results.items():
                rows.append(
                    [
                        name,
                        f"{got['per_call']:,.0f}",
                        f"{got['per_call'] / bare:.2f}x" if bare else "—",
                        "" if name == "this" else f"{got['per_call'] - this:+,.0f}",
                        f"{got['calls']:,}",
                        str(got["errors"]),
                    ]
                )
            columns = ["target", "instructions/call", "vs bare", "vs this", "calls", "errors"]
            table(f"{mode}, concurrency {args.connections}, under callgrind", columns, rows)
    finally:
        upstream.terminate()
        upstream.wait()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
