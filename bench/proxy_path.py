"""The path of one recorded call through the proxy: how many stops, in how many modules.

A newcomer follows a call from its handler to the pool by reading the functions it
passes through. This traces one call of each kind (a chat completion unary and
streamed, an Anthropic Messages call unary and streamed, all translated to the same
in-process fake vLLM upstream) with ``sys.setprofile`` and ``threading.setprofile``,
and counts, for the functions of ``agentworld`` the call runs (the fake upstream and
comprehensions left out):

- ``stops``: function calls, in the order they ran (a coroutine or generator counts
  once, not again at each resumption after an ``await`` or ``yield``);
- ``modules``: the distinct modules those are in;
- ``re-entries``: how often the path comes back into a module it had left (a reader
  going back to a file already read).

With ``--baseline DIR`` (a checkout of another build, e.g. ``git archive 6ed6928 | tar
-x -C /tmp/base``) the same calls are traced in that build, in a subprocess each, and
printed side by side. Counts depend on the code only, not on the machine.

    python bench/proxy_path.py [--baseline DIR] [--show chat]
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("chat", "chat-stream", "messages", "messages-stream")
SKIP_NAMES = ("<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>", "<lambda>")
RESUMABLE = (
    inspect.CO_COROUTINE
    | inspect.CO_GENERATOR
    | inspect.CO_ASYNC_GENERATOR
    | inspect.CO_ITERABLE_COROUTINE
)


def _request(kind: str) -> tuple[str, dict[str, Any], dict[str, str]]:
    stream = kind.endswith("-stream")
    if kind.startswith("chat"):
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
        return "/v1/chat/completions", body, {}
    body = {
        "model": "m",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "hi"}],
        "stream": stream,
    }
    return "/v1/messages", body, {"anthropic-version": "2023-06-01"}


async def _trace(kind: str, package: Path) -> list[str]:
    import aiohttp
    from aiohttp.test_utils import TestServer

    from agentworld.pool import Pool
    from agentworld.proxy import ProxyServer
    from agentworld.proxy.config import ProxyConfig, UpstreamConfig
    from agentworld.proxy.fake_upstream import FakeUpstream, make_fake_app

    upstream = TestServer(make_fake_app(FakeUpstream("a")), host="127.0.0.1")
    await upstream.start_server()
    tmp = tempfile.mkdtemp(prefix="aw-path-")
    pool = Pool.create(Path(tmp) / "pool")
    config = ProxyConfig(
        default_upstream=UpstreamConfig.single(str(upstream.make_url("")).rstrip("/"))
    )
    proxy = ProxyServer(config, pool)
    await proxy.start()
    path, body, headers = _request(kind)
    prefix = str(package) + os.sep
    skip = str(package / "proxy" / "fake_upstream.py")
    stops: list[str] = []
    started: dict[int, Any] = {}  # coroutine frames seen (kept alive: their ids stay theirs)

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        name = code.co_filename
        if not name.startswith(prefix) or name == skip or code.co_name in SKIP_NAMES:
            return
        if code.co_flags & RESUMABLE:
            if id(frame) in started:
                return  # resumed after an await, not a new stop
            started[id(frame)] = frame
        module = name[len(prefix) :].removesuffix(".py").replace(os.sep, ".")
        stops.append(f"{module}:{code.co_name}")

    async with aiohttp.ClientSession() as session:
        # One call first: connections, lazy imports and caches warm, as in steady use.
        async with session.post(proxy.url + path, json=body, headers=headers) as r:
            await r.read()
        await asyncio.sleep(0.3)
        body["messages"] = [{"role": "user", "content": "hello again"}]
        threading.setprofile(profile)
        sys.setprofile(profile)
        try:
            async with session.post(proxy.url + path, json=body, headers=headers) as r:
                await r.read()
                assert r.status == 200, await r.text()
            await asyncio.sleep(0.3)  # batched durability: the step is written after
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]
    await proxy.stop()
    await upstream.close()
    return stops


def measure(stops: list[str]) -> dict[str, int]:
    """stops, modules and re-entries of one traced path."""
    modules = [s.split(":", 1)[0] for s in stops]
    seen: set[str] = set()
    reentries = 0
    previous = None
    for m in modules:
        if m != previous and m in seen:
            reentries += 1
        seen.add(m)
        previous = m
    return {"stops": len(stops), "modules": len(seen), "reentries": reentries}


def _child(package: Path) -> None:
    out = {}
    for kind in KINDS:
        stops = asyncio.run(_trace(kind, package))
        out[kind] = {**measure(stops), "path": stops}
    print(json.dumps(out))


def _run(checkout: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    got = subprocess.run(
        [sys.executable, __file__, "--child", str(checkout / "agentworld")],
        env=env,
        capture_output=True,
        text=True,
        cwd=checkout,
        check=False,
    )
    if got.returncode != 0:
        sys.exit(f"tracing {checkout} failed:\n{got.stderr[-3000:]}")
    return json.loads(got.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--baseline", type=Path, help="another build's checkout, side by side")
    p.add_argument("--show", choices=KINDS, help="also print this kind's path, stop by stop")
    p.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        _child(args.child)
        return
    from rich.console import Console
    from rich.table import Table

    print("$ python bench/proxy_path.py " + " ".join(sys.argv[1:]))
    builds = {"this": _run(ROOT)}
    if args.baseline:
        builds["base"] = _run(args.baseline.resolve())
    table = Table(title="one recorded call, handler to pool: stops / modules / re-entries")
    table.add_column("call")
    for name in builds:
        table.add_column(name, justify="right")
    for kind in KINDS:
        cells = []
        for got in builds.values():
            m = got[kind]
            cells.append(f"{m['stops']} / {m['modules']} / {m['reentries']}")
        table.add_row(kind, *cells)
    Console().print(table)
    if args.show:
        for name, got in builds.items():
            print(f"\n{name}, {args.show}:")
            for stop in got[args.show]["path"]:
                print("  " + stop)


if __name__ == "__main__":
    main()
