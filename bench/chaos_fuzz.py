"""A request fuzzer for `aw proxy`: every route, fed malformed and hostile requests.

It starts its own proxy (batched durability, over a fresh pool) in front of the
fake upstream, and for ``--seconds`` sends requests made from valid bodies of
every route (chat, completions, Anthropic messages and token counts, Responses,
the /aw/ API, pass-through) spoiled one way each: malformed JSON, a field of
the wrong type, huge or deeply nested values, integers outside 64 bits, bodies
that are not UTF-8, a gzip ``Content-Encoding`` on a plain body, bad header
values and path-unsafe names, and raw malformed HTTP over a socket (a bad
request line, headers over 8 kB, a broken chunked body). Seeded: a failure
reproduces with its ``--seed``.

It counts what must never happen:

- ``proxy_5xx``: a 5xx of the proxy's own making (not the upstream's, relayed);
- ``bad_shape``: an error body not in its route's protocol shape (OpenAI's
  ``{"error": {"message", "type"}}``, Anthropic's ``{"type": "error", ...}``);
  raw malformed HTTP must get a 400 (aiohttp answers before any route);
- ``lost_after_200``: a 200 on a recorded route whose step is not in the pool
  once the proxy has stopped (every 200 names its step: X-AW-Trajectory and
  X-AW-Step);
- ``tracebacks``: log records carrying a traceback, or at ERROR;
- ``not_serving``: a valid call failing after the fuzzing.

It then measures how long one large body (``--big-mb``, default 19) stalls
other agents: small calls run back to back while it is in flight, their
worst latency beside their median before it.

    python bench/chaos_fuzz.py [--seconds 30] [--seed 1] [--short] [--json]

``--short`` (CI, and ``bench/chaos.py fuzz``) runs 8 s. The exit status is 1
when any count above is not 0.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import gzip
import json
import logging
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentworld.pool import Pool  # noqa: E402
from agentworld.proxy.config import ProxyConfig, UpstreamConfig  # noqa: E402
from agentworld.proxy.fake_upstream import FakeUpstream, make_fake_app  # noqa: E402
from agentworld.proxy.inprocess import ProxyServer  # noqa: E402

USER = [{"role": "user", "content": "hi"}]
# A valid body per route; {tid} is an open trajectory's id.
BODIES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {
        "model": "m",
        "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        ],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
        "n": 1,
        "max_tokens": 8,
        "metadata": {"run": "1"},
    },
    "/v1/completions": {"model": "m", "prompt": "hello", "max_tokens": 5, "logprobs": 1},
    "/v1/messages": {
        "model": "m",
        "max_tokens": 50,
        "system": [{"type": "text", "text": "sys"}],
        "messages": [{"role": "user", "content": "hi"}],
        "metadata": {"user_id": "u"},
    },
    "/v1/messages/count_tokens": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    "/v1/responses": {
        "model": "m",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
        "instructions": "be brief",
        "metadata": {"k": "v"},
        "max_output_tokens": 20,
    },
    "/aw/trajectories": {"agent": "a1", "group": "g1", "task": "t1", "metadata": {"k": 1}},
    "/aw/steps": {"trajectory": "{tid}", "messages": USER, "completion": "4", "metadata": {}},
    "/aw/trajectories/{tid}/complete": {"reward": 1.0, "status": "ok", "metadata": {"k": 1}},
    "/aw/trajectories/{tid}/reward": {"reward": 0.5},
    "/v1/embeddings": {"model": "m", "input": "hello"},
}
RECORDED = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/responses"})
PREFIXES = ("", "/a/agent-x", "/g/group-y", "/t/{tid}")
WRONG_VALUES: list[Any] = [
    None,
    True,
    -1,
    0,
    1.5e308,
    "",
    "x" * 300,
    [],
    [None],
    {},
    {"a": None},
    [[[]]],
    9223372036854775808,
    18446744073709551615,
    -9223372036854775809,
    "\u202e\u0000\ud7ff",
    "..",
]


def _dumps(body: Any) -> bytes:
    """JSON of ``body``, also where orjson will not write it (an integer beyond 64 bits,
    nesting past 254): the wire takes any of it."""
    try:
        return orjson.dumps(body)
    except TypeError:
        return json.dumps(body).encode()


def _nested(depth: int) -> Any:
    out: Any = 1
    for _ in range(depth):
        out = {"a": out}
    return out


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value within ``obj`` (keys and list indices)."""
    out = []
    items = (
        obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    )
    for k, v in items:
        out.append((*prefix, k))
        out += _paths(v, (*prefix, k))
    return out


def _set(obj: Any, path: tuple[Any, ...], value: Any) -> None:
    for k in path[:-1]:
        obj = obj[k]
    obj[path[-1]] = value


PLAIN_ANSWER = {
    "id": "chatcmpl-plain",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}
    ],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}


def serve(kind: str, port: int) -> None:
    """An upstream in its own process: ``fake`` (the test suite's fake vLLM, taking bodies
    as large as the proxy does), or ``plain`` (a fixed answer, no work per byte: what the
    stall measurement needs, so only the proxy's own cost shows)."""
    from aiohttp import web

    if kind == "fake":
        app = make_fake_app(FakeUpstream("fuzz", history=16))
        app._client_max_size = 64 * 2**20  # the fake's default is aiohttp's 1 MB
    else:

        async def chat(request: web.Request) -> web.Response:
            await request.read()
            return web.json_response(PLAIN_ANSWER)

        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_post("/v1/chat/completions", chat)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


def _start_upstream(kind: str) -> tuple[subprocess.Popen[bytes], str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", kind, "--port", str(port)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,  # the fake's own tracebacks on odd bodies are not ours
    )
    return proc, f"http://127.0.0.1:{port}"


async def _wait_up(url: str, proc: subprocess.Popen[bytes]) -> None:
    async with aiohttp.ClientSession() as s:
        for _ in range(600):
            if proc.poll() is not None:
                raise SystemExit(f"the upstream at {url} exited ({proc.returncode})")
            try:
                async with s.post(url + "/v1/chat/completions", json={"messages": USER}) as r:
                    if r.status < 500:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise SystemExit(f"the upstream at {url} did not start")


class Case:
    """One request to send: method, path, raw body, headers (or a raw byte string)."""

    def __init__(
        self,
        route: str,
        path: str,
        body: bytes | None,
        headers: dict[str, str] | None = None,
        raw: bytes | None = None,
        what: str = "",
    ) -> None:
        self.route, self.path, self.body, self.headers = route, path, body, headers or {}
        self.raw, self.what = raw, what


def make_case(rng: random.Random, tid: str) -> Case:
    """A spoiled request for a random route."""
    route = rng.choice(list(BODIES))
    body = copy.deepcopy(BODIES[route])
    if route.startswith("/aw/"):
        path = route.replace("{tid}", tid)
        if "trajectory" in body:
            body["trajectory"] = tid
    else:
        path = rng.choice(PREFIXES).replace("{tid}", tid) + route
    headers = {"Content-Type": "application/json"}
    kind = rng.choice(
        ["type", "type", "type", "json", "huge", "deep", "bigint", "header", "name", "gzip", "raw"]
    )
    data: bytes | None = None
    what = kind
    if kind == "type":
        paths = _paths(body)
        if paths:
            where = rng.choice(paths)
            _set(body, where, copy.deepcopy(rng.choice(WRONG_VALUES)))
            what = f"type {'.'.join(map(str, where))}"
    elif kind == "json":
        good = _dumps(body)
        data = rng.choice(
            [
                good[: rng.randrange(len(good))],
                b"{not json",
                b"",
                b"[1, 2]",
                b'"a string"',
                good.replace(b"hi", b"h\xff\xfei"),  # not UTF-8
                b"\xef\xbb\xbf" + good,  # a BOM
                b"{" * 5000,
            ]
        )
    elif kind == "huge":
        key = rng.choice(list(body)) if body else "x"
        body[key] = rng.choice(
            ["y" * (2 * 1024 * 1024), list(range(200_000)), {"k": "z" * 100_000}]
        )
    elif kind == "deep":
        body[rng.choice(["metadata", "extra", "tools"])] = _nested(rng.choice([63, 64, 70, 300]))
    elif kind == "bigint":
        body[rng.choice(["seed", "max_tokens", "n", "temperature", "x"])] = rng.choice(
            [2**63, 2**64 - 1, -(2**63) - 1]
        )
    elif kind == "header":
        name = rng.choice(["X-AW-Task", "X-AW-Dataset", "X-AW-Agent", "User-Agent", "X-Other"])
        value = rng.choice([b"caf\xe9", b"\xff\xfe", b"a\x7fb", b"ok"])
        good = _dumps(body)
        raw = (
            f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n".encode()
            + name.encode()
            + b": "
            + value
            + b"\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(good)
            + good
        )
        return Case(route, path, None, raw=raw, what=f"header {name}")
    elif kind == "name":
        bad = rng.choice(["..", ".", "a/b", "a?b", "a#b", "%2e%2e", "a b", "\u202e"])
        field = rng.choice(["X-AW-Trajectory", "X-AW-Group", "X-AW-Agent"])
        headers[field] = bad.encode("utf-8").decode("latin-1")
        if route == "/aw/trajectories":
            body[rng.choice(["trajectory", "group", "agent"])] = bad
    elif kind == "gzip":
        data = _dumps(body)
        headers["Content-Encoding"] = "gzip"
        if rng.random() < 0.5:
            data = gzip.compress(data)[: rng.randrange(1, 40)]
    elif kind == "raw":
        raw = rng.choice(
            [
                b"GARBAGE LINE\r\n\r\n",
                b"POST "
                + path.encode()
                + b" HTTP/1.1\r\nHost: x\r\nX-Big: "
                + b"a" * 9000
                + b"\r\n\r\n",
                b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
                b"POST "
                + path.encode()
                + b" HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\n",
                b"POST /v1/%2e%2e/tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
                b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(32),  # TLS to plain HTTP
            ]
        )
        return Case(route, path, None, raw=raw, what="raw")
    if data is None:
        data = _dumps(body)
    return Case(route, path, data, headers, what=what)


def shape_ok(route: str, status: int, body: bytes, ctype: str) -> bool:
    """Whether an error answer is in its route's protocol shape."""
    if route == "/v1/embeddings" and status < 500:
        return True  # the upstream's own answer, passed through
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    if not isinstance(obj, dict):
        return False
    err = obj.get("error")
    if route.startswith("/v1/messages"):
        return obj.get("type") == "error" and isinstance(err, dict) and "message" in err
    return isinstance(err, dict) and isinstance(err.get("message"), str) and "type" in err


class Tally:
    """What the fuzzer counts."""

    def __init__(self) -> None:
        self.sent = 0
        self.statuses: Counter[int] = Counter()
        self.proxy_5xx: list[str] = []
        self.bad_shape: list[str] = []
        self.ok_steps: list[tuple[str, int, str]] = []  # (trajectory, index, what) of each 200
        self.ok_ids: list[str] = []  # white-box step ids answered 200
        self.no_answer = 0  # raw cases the proxy closed without a status line
        self.upstream_5xx = 0  # the upstream's own 5xx, relayed (the fake chokes on some)


class _Traces(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.loud: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or record.levelno >= logging.ERROR:
            self.loud.append(f"{record.name}: {record.getMessage()[:200]}")


async def _send(s: aiohttp.ClientSession, url: str, case: Case, t: Tally) -> None:
    host, port = url.split("//")[1].rsplit(":", 1)
    t.sent += 1
    if case.raw is not None:
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            writer.write(case.raw)
            await writer.drain()
            got = await asyncio.wait_for(reader.read(65536), 10)
        except (ConnectionError, TimeoutError):
            got = b""
        finally:
            writer.close()
        if not got.startswith(b"HTTP/1."):
            t.no_answer += 1
            return
        head, _, body = got.partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        t.statuses[status] += 1
        if status >= 500:
            if _own(body):
                t.proxy_5xx.append(f"{status} {case.what} {case.path}")
            else:
                t.upstream_5xx += 1
        elif case.what == "raw" or (status == 400 and head.startswith(b"HTTP/1.0")):
            # aiohttp refused the bytes before any route (its plain-text 400, HTTP/1.0):
            # a 400 is the right answer; no route, so no protocol shape to keep
            if status != 400:
                t.bad_shape.append(f"{status} raw {case.raw[:40]!r}")
        elif status != 200 and not shape_ok(case.route, status, body, ""):
            t.bad_shape.append(f"{status} {case.what} {case.path}: {body[:120]!r}")
        elif status == 200 and case.route in RECORDED:
            _note_step(t, head, case)
        return
    async with s.post(url + case.path, data=case.body, headers=case.headers) as r:
        body = await r.read()
        t.statuses[r.status] += 1
        if r.status >= 500:
            if _own(body):
                t.proxy_5xx.append(f"{r.status} {case.what} {case.path}: {body[:160]!r}")
            else:
                t.upstream_5xx += 1
        elif r.status >= 400 and not shape_ok(case.route, r.status, body, r.content_type):
            t.bad_shape.append(f"{r.status} {case.what} {case.path}: {body[:160]!r}")
        elif r.status == 200 and case.route in RECORDED:
            trajectory, index = r.headers.get("X-AW-Trajectory"), r.headers.get("X-AW-Step")
            if trajectory and index and index.isdigit():
                t.ok_steps.append((trajectory, int(index), f"{case.what} {case.path}"))
            else:
                t.ok_steps.append(("?", -1, f"{case.what} {case.path} (no step named)"))
        elif r.status == 200 and case.route == "/aw/steps":
            t.ok_ids.append(orjson.loads(body)["id"])


def _own(body: bytes) -> bool:
    """Whether a 5xx body is the proxy's own failure (not an upstream's, relayed, nor the
    proxy's 502/504 for an upstream that failed)."""
    return b"internal proxy error" in body


def _note_step(t: Tally, head: bytes, case: Case) -> None:
    headers = dict(line.split(b": ", 1) for line in head.split(b"\r\n")[1:] if b": " in line)
    trajectory, index = headers.get(b"X-AW-Trajectory"), headers.get(b"X-AW-Step")
    if trajectory and index and index.isdigit():
        t.ok_steps.append((trajectory.decode(), int(index), f"{case.what} {case.path}"))


async def _trajectory(s: aiohttp.ClientSession, url: str) -> str:
    async with s.post(url + "/aw/trajectories", json={"agent": "fuzz"}) as r:
        return (await r.json())["trajectory"]


async def _stall(s: aiohttp.ClientSession, url: str, big_mb: float) -> dict[str, float]:
    """Latency of small calls, back to back, before and while a ``big_mb`` body is served."""
    small = orjson.dumps({"model": "m", "messages": USER, "max_tokens": 1})
    n_msgs = max(1, int(big_mb * 1024 * 1024 / 20_000))
    big = orjson.dumps(
        {
            "model": "m",
            "max_tokens": 1,
            "messages": [
                {"role": "user" if i % 2 == 0 else "assistant", "content": "word " * 4000}
                for i in range(n_msgs)
            ],
        }
    )
    headers = {"Content-Type": "application/json"}

    async def one() -> float:
        t0 = time.perf_counter()
        async with s.post(url + "/v1/chat/completions", data=small, headers=headers) as r:
            await r.read()
        return time.perf_counter() - t0

    before = [await one() for _ in range(30)]
    during: list[float] = []
    done = asyncio.Event()

    async def smalls() -> None:
        while not done.is_set():
            during.append(await one())

    task = asyncio.create_task(smalls())
    t0 = time.perf_counter()
    async with s.post(url + "/v1/chat/completions", data=big, headers=headers) as r:
        await r.read()
        big_status = r.status
    big_s = time.perf_counter() - t0
    await asyncio.sleep(0.2)
    done.set()
    await task
    return {
        "big_mb": round(len(big) / 2**20, 1),
        "big_status": big_status,
        "big_s": round(big_s, 2),
        "small_p50_ms": round(statistics.median(before) * 1000, 1),
        "small_max_during_ms": round(max(during) * 1000, 1),
    }


async def run(seconds: float = 30.0, seed: int = 1, big_mb: float = 19.0) -> dict[str, Any]:
    """Fuzz a fresh proxy for ``seconds``; the counts (see the module's docstring)."""
    rng = random.Random(seed)
    traces = _Traces()
    watched = [logging.getLogger(n) for n in ("agentworld", "aiohttp")]
    levels = [lg.level for lg in watched]
    for lg in watched:
        lg.addHandler(traces)
        lg.setLevel(logging.WARNING)
    fake_proc, fake_url = _start_upstream("fake")
    plain_proc, plain_url = _start_upstream("plain")
    tmp = tempfile.TemporaryDirectory(prefix="aw-fuzz-")
    pool = Pool.create(Path(tmp.name) / "pool")
    cfg = ProxyConfig(
        default_upstream=UpstreamConfig.single(fake_url),
        agents={"plain": UpstreamConfig.single(plain_url)},
    )
    proxy = ProxyServer(cfg, pool)
    t = Tally()
    stall: dict[str, float] = {}
    not_serving = 0
    try:
        await _wait_up(fake_url, fake_proc)
        await _wait_up(plain_url, plain_proc)
        await proxy.start()
        connector = aiohttp.TCPConnector(force_close=True)
        async with aiohttp.ClientSession(connector=connector) as s:
            tid = await _trajectory(s, proxy.url)
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                case = make_case(rng, tid)
                await _send(s, proxy.url, case, t)
                if case.route.startswith("/aw/trajectories/") and rng.random() < 0.3:
                    tid = await _trajectory(s, proxy.url)  # it may have been completed
            async with s.post(
                proxy.url + "/v1/chat/completions", json={"model": "m", "messages": USER}
            ) as r:
                not_serving = int(r.status != 200)
                if r.status == 200:
                    t.ok_steps.append(
                        (r.headers["X-AW-Trajectory"], int(r.headers["X-AW-Step"]), "final")
                    )
            if big_mb > 0:
                stall = await _stall(s, proxy.url + "/a/plain", big_mb)
        internal = proxy.state.stats.errors.get("internal", 0)
    finally:
        await proxy.stop()
        fake_proc.terminate()
        plain_proc.terminate()
        fake_proc.wait()
        plain_proc.wait()
        for lg, level in zip(watched, levels, strict=True):
            lg.removeHandler(traces)
            lg.setLevel(level)
    steps = {(r["trajectory"], r["index"]) for r in pool.iter_records() if r["kind"] == "step"}
    ids = {r["id"] for r in pool.iter_records() if r["kind"] == "step"}
    tmp.cleanup()
    lost = [f"{tr} #{i}: {what}" for tr, i, what in t.ok_steps if (tr, i) not in steps]
    lost += [f"white-box {i}" for i in t.ok_ids if i not in ids]
    return {
        "seconds": seconds,
        "seed": seed,
        "requests": t.sent,
        "statuses": dict(sorted(t.statuses.items())),
        "answered_200_recorded": len(t.ok_steps) + len(t.ok_ids),
        "proxy_5xx": max(len(t.proxy_5xx), internal),
        "upstream_5xx": t.upstream_5xx,
        "bad_shape": len(t.bad_shape),
        "lost_after_200": len(lost),
        "tracebacks": len(traces.loud),
        "not_serving": not_serving,
        "no_answer_raw": t.no_answer,
        "examples": (t.proxy_5xx + t.bad_shape + lost + traces.loud)[:10],
        "stall": stall,
    }


FAILURES = ("proxy_5xx", "bad_shape", "lost_after_200", "tracebacks", "not_serving")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seconds", type=float, default=30.0, help="how long to fuzz")
    ap.add_argument("--short", action="store_true", help="8 s (CI, bench/chaos.py fuzz)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--big-mb", type=float, default=19.0, help="0: no stall measurement")
    ap.add_argument("--json", action="store_true", help="the figures as one JSON object")
    ap.add_argument("--serve", choices=["fake", "plain"], help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve, args.port)
        return
    seconds = 8.0 if args.short else args.seconds
    logging.getLogger().addHandler(logging.NullHandler())  # counted (``tracebacks``), not printed
    out = asyncio.run(run(seconds, args.seed, args.big_mb))
    if args.json:
        print(orjson.dumps(out).decode())
    else:
        print(
            f"fuzzed {out['requests']} requests in {out['seconds']:.0f} s (seed {out['seed']}): "
            f"statuses {out['statuses']}"
        )
        print(
            f"proxy 5xx {out['proxy_5xx']}, bad error shapes {out['bad_shape']}, steps lost "
            f"after a 200 {out['lost_after_200']} (of {out['answered_200_recorded']}), "
            f"tracebacks {out['tracebacks']}, still serving {'no' if out['not_serving'] else 'yes'}"
        )
        st = out["stall"]
        if st:
            print(
                f"a {st['big_mb']} MB body (answered {st['big_status']} in {st['big_s']} s) "
                f"stalls other calls: worst {st['small_max_during_ms']} ms "
                f"(median {st['small_p50_ms']} ms before it)"
            )
        for line in out["examples"]:
            print("  " + line)
    sys.exit(1 if any(out[k] for k in FAILURES) else 0)


if __name__ == "__main__":
    main()
