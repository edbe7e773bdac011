"""`aw serve`'s serving loop: Ctrl-C (or SIGTERM) stops it gracefully, a second one now.

The first signal stops listening and lets the requests in flight finish, saying how
many; the next one aborts them (each answer ends with an error naming the shutdown).
aiohttp's ``run_app`` waited for them without a word, and met a second Ctrl-C with a
traceback per open request and exit status 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import sys
from typing import TextIO

from aiohttp import web

from agentworld.serve.engine import Engine

SHUTDOWN_REASON = "aw serve is shutting down: the request was aborted"
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _Stopper:
    """The signal handler: the first signal starts a graceful stop, later ones abort."""

    def __init__(self, engine: Engine, out: TextIO) -> None:
        self.engine, self.out = engine, out
        self.stopping = asyncio.Event()

    def __call__(self) -> None:
        if not self.stopping.is_set():
            n = self.engine.in_flight
            tail = (
                f": {_requests(n)} in flight finish first (Ctrl-C again aborts them)" if n else ""
            )
            self._say(f"stopping{tail}")
            self.stopping.set()
            return
        n = self.engine.abort_all(SHUTDOWN_REASON)
        self._say(f"aborting {_requests(n)} in flight" if n else "stopping")

    def _say(self, text: str) -> None:
        print(f"aw serve: {text}", file=self.out, flush=True)


def _requests(n: int) -> str:
    return f"{n} request" + ("" if n == 1 else "s")


async def serve(
    app: web.Application,
    socks: list[socket.socket],
    engine: Engine,
    announce: str,
    out: TextIO = sys.stderr,
) -> None:
    """Serve ``app`` on ``socks`` until SIGINT or SIGTERM, then stop as the module says."""
    loop = asyncio.get_running_loop()
    stopper = _Stopper(engine, out)
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    try:
        for sig in _SIGNALS:
            with contextlib.suppress(NotImplementedError):  # Windows: Ctrl-C interrupts
                loop.add_signal_handler(sig, stopper)
        for sock in socks:
            await web.SockSite(runner, sock).start()
        print(announce, file=out, flush=True)
        await stopper.stopping.wait()
    finally:
        # Sites first (no new connections), then the handlers in flight are awaited
        # (aiohttp's shutdown timeout, 60 s), then the app's cleanup.
        await runner.cleanup()
        for sig in _SIGNALS:
            with contextlib.suppress(NotImplementedError):
                loop.remove_signal_handler(sig)
    print("aw serve: stopped", file=out, flush=True)


def run(app: web.Application, socks: list[socket.socket], engine: Engine, announce: str) -> None:
    """``serve`` on a loop of its own, for the CLI."""
    asyncio.run(serve(app, socks, engine, announce))
