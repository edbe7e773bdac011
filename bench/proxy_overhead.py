"""What `aw proxy` costs: latency it adds and throughput it keeps, against a bare pass-through.

Three servers run in their own processes: a fake vLLM upstream (fixed small
completion, plus a streaming variant), a bare aiohttp pass-through that
forwards bytes without recording, and `aw proxy` recording into a temporary
pool (batched durability), the two hops on the same event loop (uvloop when
installed; asyncio's for both with ``--no-uvloop``). The load generator
(this process) calls the upstream directly, through the bare pass-through
and through the proxy, side by side, at each concurrency level, and prints
ratios. Loopback only. Each figure is the median over ``--rounds`` rounds of
what that round measured side by side (the three paths alternate within a
round). CPU is read from /proc: ``hop CPU`` is the hop's process per call
(for ``direct``, the fake's), and ``upstream CPU`` the fake's for the same
calls, what each path asks of it (the proxy asks for token ids and
log-probs, which the fake then writes). Beside the median throughput ratio
goes a bootstrap 90% interval of that median: a goal is met with a margin
when the interval clears it, not just the median.

    python bench/proxy_overhead.py [--requests 2000] [--levels 1,32,256] [--rounds 5]
                                    [--modes unary,stream] [--turns 0 --turn-chars 2000
                                    --reply-chars 0 --tools 0] [--baseline CHECKOUT]
                                    [--api chat|anthropic|responses]

The default call is tiny (one short message, a 32-character answer): it shows
the fixed cost of a hop. ``--turns N`` sends an agent-shaped conversation
instead (a system prompt and N user/assistant turns of ``--turn-chars``
characters each), and ``--reply-chars R`` makes the fake answer R characters
(one token a character, three tokens an SSE event): the costs that grow with
the size of a call; ``--tools N`` gives the call N function tools of about
1 kB each (a coding agent sends tens; the fake then answers with a tool
call). ``--baseline CHECKOUT`` runs the proxy of another checkout
(``git worktree add /tmp/base HEAD~1``, say) as a fourth path, side by side,
and prints how this checkout's proxy compares with it round by round.
``--floor`` adds a raw byte relay (no HTTP parsing: each agent connection gets
its own upstream connection, bytes copied both ways), the least any proxy
process in Python can add on this machine: what is left of a hop is the HTTP
work.
``--api anthropic`` (or ``responses``) has the agent speak Anthropic Messages
(or OpenAI Responses) to the proxy, which translates to the chat upstream; the
fake speaks chat only, so there is no direct or bare path to compare with:
it takes ``--baseline`` and compares the two proxies.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPLY = "Hello! How can I help you today?"
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16}
# The call each --api makes: its path and its tiny body.
APIS = {
    "chat": ("/v1/chat/completions", BODY),
    "anthropic": ("/v1/messages", BODY),  # the same fields make an Anthropic Messages call
    "responses": ("/v1/responses", {"model": "m", "input": "hi", "max_output_tokens": 16}),
}


# -- servers (each runs in its own process) ---------------------------------------------------


def serve_fake(port: int, reply: str) -> None:
    from aiohttp import web

    from agentworld.proxy.fake_upstream import FakeUpstream, make_fake_app

    web.run_app(
        make_fake_app(FakeUpstream("bench", reply=reply, history=64)),
        host="127.0.0.1",
        port=port,
        access_log=None,
        print=None,
    )


def serve_bare(port: int, upstream: str, want_uvloop: bool = True) -> None:
    """The baseline: forward the body, stream the answer back, record nothing; on the
    proxy's loop (uvloop when installed, unless ``--no-uvloop``), so the two hops differ by
    what the proxy does, not by their event loops."""
    import aiohttp
    from aiohttp import web

    async def ctx(app: web.Application):
        app["s"] = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), auto_decompress=False
        )
        yield
        await app["s"].close()

    async def handle(request: web.Request) -> web.StreamResponse:
        data = await request.read()
        async with request.app["s"].post(
            upstream + request.path, data=data, headers={"Content-Type": "application/json"}
        ) as r:
            out = web.StreamResponse(
                status=r.status, headers={"Content-Type": r.headers["Content-Type"]}
            )
            await out.prepare(request)
            async for chunk in r.content.iter_any():
                await out.write(chunk)
            await out.write_eof()
            return out

    app = web.Application()
    app.cleanup_ctx.append(ctx)
    app.router.add_post("/v1/chat/completions", handle)
    loop = None
    if want_uvloop:
        try:
            import uvloop

            loop = uvloop.new_event_loop()
        except ImportError:
            pass
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None, loop=loop)


def serve_relay(port: int, upstream: str) -> None:
    """The floor: copy bytes between each agent connection and an upstream connection of its own."""
    host, _, up_port = upstream.removeprefix("http://").partition(":")

    class Pipe(asyncio.Protocol):
        """One direction's sink; reading pauses while the peer's buffer is full."""

        def __init__(self) -> None:
            self.transport: asyncio.Transport | None = None
            self.peer: Pipe | None = None
            self.pending: list[bytes] = []

        def connection_made(self, transport) -> None:
            self.transport = transport

        def data_received(self, data: bytes) -> None:
            peer = self.peer
            if peer is None or peer.transport is None:
                self.pending.append(data)  # the upstream connection is not open yet
            else:
                peer.transport.write(data)

        def pause_writing(self) -> None:
            if self.peer is not None and self.peer.transport is not None:
                self.peer.transport.pause_reading()

        def resume_writing(self) -> None:
            if self.peer is not None and self.peer.transport is not None:
                self.peer.transport.resume_reading()

        def connection_lost(self, exc: Exception | None) -> None:
            if self.peer is not None and self.peer.transport is not None:
                self.peer.transport.close()

    class Agent(Pipe):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            asyncio.get_running_loop().create_task(self.open())

        async def open(self) -> None:
            loop = asyncio.get_running_loop()
            try:
                _, up = await loop.create_connection(Pipe, host, int(up_port))
            except OSError:
                assert self.transport is not None
                self.transport.close()
                return
            if self.transport is None or self.transport.is_closing():
                up.transport.close()  # the agent left while the upstream connection opened
                return
            up.peer, self.peer = self, up
            for data in self.pending:
                up.transport.write(data)
            self.pending.clear()

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(Agent, "127.0.0.1", port)
        await server.serve_forever()

    try:
        import uvloop  # the proxy's loop, when installed

        runner: Callable = uvloop.run
    except ImportError:
        runner = asyncio.run
    try:
        runner(main())
    except KeyboardInterrupt:  # how the benchmark stops its servers
        pass


def against_base(rounds_: list[dict[str, dict]], stream: bool, med: Callable) -> str:
    """This checkout's proxy against the baseline checkout's, round by round."""
    faster = sum(g["proxy"]["p50"] < g["base"]["p50"] for g in rounds_)
    d50 = med(lambda g: g["proxy"]["p50"] - g["base"]["p50"]) * 1000
    line = (
        f"-> against base: p50 {d50:+.3f} ms (lower in {faster}/{len(rounds_)} rounds),"
        f" throughput {med(lambda g: g['proxy']['rps'] / g['base']['rps']):.2f}x,"
        f" CPU per request {med(lambda g: g['proxy']['cpu_us'] / g['base']['cpu_us']):.2f}x"
    )
    if stream:
        d1 = med(lambda g: g["proxy"]["ttfc50"] - g["base"]["ttfc50"]) * 1000
        line += f", time to first chunk {d1:+.3f} ms"
    return line


def median_interval(values: list[float], level: float = 0.9) -> tuple[float, float]:
    """A bootstrap interval of the median of ``values`` (seeded: the same rounds, the same
    interval): how far the median itself could move with other rounds of the same run."""
    rng = random.Random(0)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(2000))
    cut = int(len(meds) * (1 - level) / 2)
    return meds[cut], meds[-cut - 1]


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports (all held open while choosing: one at a time can repeat)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used (contention-proof cost, unlike wall time)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start(args: list[str], root: Path = ROOT) -> subprocess.Popen[bytes]:
    """Run a server on the code of checkout ``root`` (its cwd too: ``-m`` puts the cwd
    ahead of PYTHONPATH, so another checkout's cwd would silently win)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.Popen([sys.executable, *args], env=env, cwd=root, stdout=subprocess.DEVNULL)


def start_proxy(root: Path, pool: str, up: str, port: int, args: list[str]):
    cmd = ["-m", "agentworld.proxy", "--pool", pool, "--upstream", up, "--port", str(port)]
    return start([*cmd, *args], root)


# -- load ---------------------------------------------------------------------------------------


def with_tools(request: dict, api: str, n: int) -> dict:
    """The request with ``n`` function tools in its API's shape (about 1 kB each: a
    description and six described string fields, as a coding agent's tools are)."""
    if not n:
        return request
    schema = {
        "type": "object",
        "properties": {
            f"field_{j}": {"type": "string", "description": "w " * 40} for j in range(6)
        },
        "required": ["field_0"],
    }
    tools = []
    for i in range(n):
        name, description = f"tool_{i}", f"Tool {i}: " + "does things " * 25
        if api == "chat":
            fn = {"name": name, "description": description, "parameters": schema}
            tools.append({"type": "function", "function": fn})
        elif api == "anthropic":
            tools.append({"name": name, "description": description, "input_schema": schema})
        else:
            tools.append(
                {"type": "function", "name": name, "description": description, "parameters": schema}
            )
    return {**request, "tools": tools}


def make_body(turns: int, turn_chars: int) -> dict:
    """The request: the tiny default, or an agent-shaped conversation of ``turns`` turns."""
    if not turns:
        return BODY
    words = ("agent", "reads", "a", "file", "runs", "tests", "and", "edits", "code", "again")

    def text(seed: int) -> str:
        out, i = [], seed
        while sum(map(len, out)) + len(out) < turn_chars:
            out.append(words[i % len(words)])
            i = i * 7 + 3
        return " ".join(out)[:turn_chars]

    msgs = [{"role": "system", "content": text(1)}]
    for t in range(turns):
        msgs.append({"role": "user", "content": f"turn {t}: " + text(t + 2)})
        msgs.append({"role": "assistant", "content": text(t + 3)})
    msgs.append({"role": "user", "content": "and now?"})
    return {**BODY, "messages": msgs, "max_tokens": 4096}


async def wait_up(session, url: str) -> None:
    import aiohttp

    for _ in range(400):
        try:
            async with session.post(url + "/v1/chat/completions", json=BODY) as r:
                if r.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.05)
    raise SystemExit(f"{url} did not start")


async def load(
    session,
    url: str,
    *,
    concurrency: int,
    requests: int,
    stream: bool,
    max_s: float,
    request: dict,
    path: str = "/v1/chat/completions",
) -> dict:
    """Bounded closed-loop load: latency (or time to first chunk) per request, and requests/s."""
    import orjson

    body = orjson.dumps({**request, "stream": stream})
    headers = {"Content-Type": "application/json"}
    latencies: list[float] = []
    firsts: list[float] = []
    left = requests
    deadline = time.perf_counter() + max_s

    async def worker() -> None:
        nonlocal left
        while left > 0 and time.perf_counter() < deadline:
            left -= 1
            t0 = time.perf_counter()
            async with session.post(url + path, data=body, headers=headers) as r:
                if stream:
                    first = None
                    async for _ in r.content.iter_any():
                        if first is None:
                            first = time.perf_counter() - t0
                    firsts.append(first or 0.0)
                else:
                    await r.read()
                assert r.status == 200, r.status
            latencies.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - t0
    q = statistics.quantiles(latencies, n=100)
    out = {
        "n": len(latencies),
        "rps": len(latencies) / wall,
        "p50": statistics.median(latencies),
        "p99": q[98],
    }
    if firsts:
        out["ttfc50"] = statistics.median(firsts)
    return out


async def run(
    levels: list[int],
    requests: int,
    max_s: float,
    rounds: int,
    proxy_args: list[str],
    modes: list[bool],
    request: dict,
    reply: str,
    baseline: Path | None = None,
    floor: bool = False,
    api: str = "chat",
) -> None:
    import aiohttp
    import orjson

    names = ("fake", "bare", "proxy", "base", "relay")
    ports = dict(zip(names, free_ports(len(names)), strict=True))
    up = f"http://127.0.0.1:{ports['fake']}"
    pool = tempfile.mkdtemp(prefix="aw-bench-pool-")
    here = str(Path(__file__).resolve())
    procs = [
        start([here, "--serve", "fake", "--port", str(ports["fake"]), "--reply", reply]),
        start(  # on the proxy's loop
            [here, "--serve", "bare", "--port", str(ports["bare"]), "--upstream", up]
            + [a for a in proxy_args if a == "--no-uvloop"]
        ),
        start_proxy(ROOT, pool, up, ports["proxy"], proxy_args),
    ]
    pids = {
        "fake": procs[0].pid,
        "direct": procs[0].pid,
        "bare": procs[1].pid,
        "proxy": procs[2].pid,
    }
    urls = {
        "direct": up,
        "bare": f"http://127.0.0.1:{ports['bare']}",
        "proxy": f"http://127.0.0.1:{ports['proxy']}",
    }
    if baseline is not None:  # the same proxy command from another checkout, side by side
        procs.append(start_proxy(baseline, pool + "-base", up, ports["base"], proxy_args))
        pids["base"] = procs[-1].pid
        urls["base"] = f"http://127.0.0.1:{ports['base']}"
    if floor:
        procs.append(
            start([here, "--serve", "relay", "--port", str(ports["relay"]), "--upstream", up])
        )
        pids["relay"] = procs[-1].pid
        urls["relay"] = f"http://127.0.0.1:{ports['relay']}"
    path = APIS[api][0]
    if api != "chat":  # the fake and the bare hop speak chat only: proxy against base
        del urls["direct"], urls["bare"]
    try:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            for u in urls.values():
                await wait_up(session, u)
            print(
                f"# aw proxy overhead: {os.cpu_count()} CPUs, medians of {rounds} rounds, pool {pool},"
                f" proxy args {proxy_args or 'none'}"
            )
            if baseline is not None:
                print(f"# base: the proxy of checkout {baseline}")
            size = len(orjson.dumps(request))
            count = len(request["messages"]) if "messages" in request else 1
            print(
                f"# call: {api} {path}, {count} messages ({size:,} bytes), answer"
                f" {len(reply)} characters"
            )
            print(
                f"{'mode':7} {'conc':>5} {'path':7} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'ttfc ms':>8}"
                f" {'hop CPU us/req':>15} {'upstream CPU':>12}"
            )
            for stream in modes:
                for c in levels:
                    rounds_: list[dict[str, dict]] = []
                    for _ in range(rounds):
                        got: dict[str, dict] = {}
                        for name, u in urls.items():  # interleaved, so drift hits them all
                            n = requests if c > 1 else max(200, requests // 5)
                            cpu0 = cpu_s(pids[name])
                            up0 = cpu_s(pids["fake"])
                            r = await load(
                                session,
                                u,
                                concurrency=c,
                                requests=n,
                                stream=stream,
                                max_s=max_s,
                                request=request,
                                path=path,
                            )
                            # The hop's own CPU per request (upstream excluded for bare/proxy).
                            r["cpu_us"] = (cpu_s(pids[name]) - cpu0) / r["n"] * 1e6
                            # The fake's, for the same calls: what the hop asked of it.
                            r["up_us"] = (cpu_s(pids["fake"]) - up0) / r["n"] * 1e6
                            got[name] = r
                        rounds_.append(got)
                    mode = "stream" if stream else "unary"
                    for name in urls:
                        # The median round of each path, for the table.
                        r = sorted((g[name] for g in rounds_), key=lambda x: x["rps"])[
                            len(rounds_) // 2
                        ]
                        ttfc = f"{r['ttfc50'] * 1000:8.3f}" if "ttfc50" in r else f"{'':8}"
                        print(
                            f"{mode:7} {c:5d} {name:7} {r['rps']:9.0f} {r['p50'] * 1000:8.3f}"
                            f" {r['p99'] * 1000:8.3f} {ttfc} {r['cpu_us']:15.0f}"
                            f" {r['up_us']:12.0f}"
                        )

                    # Each figure is the median over rounds of what that round measured side
                    # by side: this machine's speed drifts between rounds.
                    def med(f: Callable[[dict[str, dict]], float], rs: list = rounds_) -> float:
                        return statistics.median(f(g) for g in rs)

                    if "bare" not in urls:
                        print("  " + against_base(rounds_, stream, med), flush=True)
                        continue
                    added = med(lambda g: g["proxy"]["p50"] - g["direct"]["p50"]) * 1000
                    added99 = med(lambda g: g["proxy"]["p99"] - g["direct"]["p99"]) * 1000
                    ratios = sorted(g["proxy"]["rps"] / g["bare"]["rps"] for g in rounds_)
                    ratio = statistics.median(ratios)
                    low, high = median_interval(ratios)
                    cpu = med(lambda g: g["bare"]["cpu_us"] / g["proxy"]["cpu_us"])
                    hop = med(lambda g: g["bare"]["p50"] - g["direct"]["p50"]) * 1000
                    line = (
                        f"  -> proxy adds p50 {added:+.3f} ms (a bare hop adds {hop:+.3f}),"
                        f" p99 {added99:+.3f} ms; throughput proxy/bare = {ratio:.2f}"
                        f" (90% interval of the median {low:.2f}-{high:.2f}, rounds"
                        f" {ratios[0]:.2f}-{ratios[-1]:.2f}; by CPU per request: {cpu:.2f})"
                    )
                    if stream:
                        ttfc = med(lambda g: g["proxy"]["ttfc50"] - g["direct"]["ttfc50"]) * 1000
                        hop1 = med(lambda g: g["bare"]["ttfc50"] - g["direct"]["ttfc50"]) * 1000
                        line += f"; added time to first chunk {ttfc:+.3f} ms (bare hop {hop1:+.3f})"
                    print(line, flush=True)
                    if floor:
                        relay = med(lambda g: g["relay"]["p50"] - g["direct"]["p50"]) * 1000
                        line = f"  -> a raw byte relay (the floor) adds p50 {relay:+.3f} ms"
                        if stream:
                            first = med(lambda g: g["relay"]["ttfc50"] - g["direct"]["ttfc50"])
                            line += f", time to first chunk {first * 1000:+.3f} ms"
                        print(line, flush=True)
                    if baseline is not None:
                        print("  " + against_base(rounds_, stream, med), flush=True)
    finally:
        for p in procs:
            p.send_signal(signal.SIGINT)
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
    sys.path.insert(0, str(ROOT))
    from agentworld.pool import Pool

    steps = sum(1 for r in Pool.open(pool).iter_records() if r["kind"] == "step")
    print(f"# recorded {steps} steps in {pool}")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--serve", choices=["fake", "bare", "relay"])
    ap.add_argument("--port", type=int)
    ap.add_argument("--upstream")
    ap.add_argument("--requests", type=int, default=2000, help="requests per measurement (bounded)")
    ap.add_argument("--levels", default="1,32,256")
    ap.add_argument("--max-s", type=float, default=8.0, help="time bound per measurement")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--modes", default="unary,stream", help="which calls to measure")
    ap.add_argument("--turns", type=int, default=0, help="agent-shaped conversation of N turns")
    ap.add_argument("--turn-chars", type=int, default=2000, help="characters per message")
    ap.add_argument("--reply-chars", type=int, default=0, help="answer length (0: a short one)")
    ap.add_argument("--tools", type=int, default=0, help="function tools in the call (~1 kB each)")
    ap.add_argument("--reply", help=argparse.SUPPRESS)
    ap.add_argument(
        "--api",
        choices=sorted(APIS),
        default="chat",
        help="the protocol the agent speaks to the proxy (not chat: needs --baseline)",
    )
    ap.add_argument(
        "--baseline",
        type=Path,
        help="another checkout (a git worktree of the base commit, say) whose proxy runs"
        " side by side as 'base'",
    )
    ap.add_argument(
        "--floor",
        action="store_true",
        help="also measure a raw byte relay (no HTTP): the least any proxy process can add",
    )
    ap.add_argument(
        "--no-uvloop",
        action="store_true",
        help="run the proxy and the bare pass-through on asyncio's loop (default: uvloop"
        " if installed)",
    )
    a = ap.parse_args()
    if a.serve == "fake":
        serve_fake(a.port, a.reply or REPLY)
    elif a.serve == "bare":
        serve_bare(a.port, a.upstream, not a.no_uvloop)
    elif a.serve == "relay":
        serve_relay(a.port, a.upstream)
    else:
        levels = [int(x) for x in a.levels.split(",")]
        proxy_args = ["--no-uvloop"] if a.no_uvloop else []
        modes = [m.strip() == "stream" for m in a.modes.split(",")]
        if any(m.strip() not in ("unary", "stream") for m in a.modes.split(",")):
            ap.error(f"--modes: expected unary and/or stream, got {a.modes!r}")
        if a.turns < 0 or a.turn_chars < 1 or a.reply_chars < 0 or a.tools < 0:
            ap.error("--turns, --reply-chars and --tools must be >= 0, --turn-chars >= 1")
        reply = REPLY
        if a.reply_chars:
            reply = (REPLY + " ") * (a.reply_chars // (len(REPLY) + 1) + 1)
            reply = reply[: a.reply_chars]
        request = make_body(a.turns, a.turn_chars) if a.api == "chat" else APIS[a.api][1]
        request = with_tools(request, a.api, a.tools)
        base = a.baseline.resolve() if a.baseline else None
        if base is not None and not (base / "agentworld" / "proxy").is_dir():
            ap.error(f"--baseline: {base} is not an AgentWorld checkout")
        if a.api != "chat" and (base is None or a.turns or a.floor):
            ap.error(f"--api {a.api}: needs --baseline, and takes neither --turns nor --floor")
        asyncio.run(
            run(
                levels,
                a.requests,
                a.max_s,
                a.rounds,
                proxy_args,
                modes,
                request,
                reply,
                base,
                a.floor,
                a.api,
            )
        )


if __name__ == "__main__":
    main()
