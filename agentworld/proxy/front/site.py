"""Where the front listens: an aiohttp site of its own, and ``aw proxy``'s serving loop.

``FrontSite`` is an ``aiohttp.web.BaseSite``: the app's runner starts and stops
it like a ``TCPSite``, so the app's startup and cleanup (the pool writer's
flush) frame it as before. Stopping it stops listening, then lets the front's
calls in flight end before the runner shuts aiohttp's own connections and
cleans the app up.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Any

from aiohttp import web

from agentworld.proxy.front.protocol import Front


class FrontSite(web.BaseSite):
    """Listen on ``sock`` (or ``host``:``port``) with the front before ``runner``'s app."""

    def __init__(
        self,
        runner: web.AppRunner,
        prefixes: tuple[str, ...],
        *,
        sock: socket.socket | None = None,
        host: str | None = None,
        port: int = 0,
        backlog: int = 128,
    ) -> None:
        super().__init__(runner, backlog=backlog)
        self._sock, self._host, self._port = sock, host, port
        self._prefixes = prefixes
        self.front: Front | None = None

    @property
    def name(self) -> str:
        if self._sock is not None:
            host, port = self._sock.getsockname()[:2]
        else:
            host, port = self._host or "0.0.0.0", self._port
        return f"http://{host}:{port}"

    async def start(self) -> None:
        await super().start()
        runner = self._runner
        assert isinstance(runner, web.AppRunner) and runner.server is not None
        self.front = Front(runner.app, runner.server, self._prefixes)
        loop = asyncio.get_running_loop()
        if self._sock is not None:
            self._server = await loop.create_server(
                self.front.protocol, sock=self._sock, backlog=self._backlog
            )
        else:
            self._server = await loop.create_server(
                self.front.protocol, self._host, self._port, backlog=self._backlog
            )

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        self._runner._check_site(self)
        if self._server is not None:
            self._server.close()  # no new connections
        if self.front is not None:
            await self.front.shutdown(self._runner._shutdown_timeout)
        self._runner._unreg_site(self)


def run(
    app: web.Application,
    socks: list[socket.socket],
    prefixes: tuple[str, ...],
    loop: asyncio.AbstractEventLoop | None,
    **runner_kw: Any,
) -> None:
    """Serve ``app`` on ``socks`` with the front until SIGINT or SIGTERM, then shut down
    gracefully (``aiohttp.web.run_app``'s order: sites, connections, the app's cleanup)."""
    loop = loop or asyncio.new_event_loop()
    asyncio.set_event_loop(loop)

    async def serve() -> None:
        runner = web.AppRunner(app, handle_signals=True, **runner_kw)
        await runner.setup()
        try:
            for sock in socks:
                await FrontSite(runner, prefixes, sock=sock).start()
            while True:
                await asyncio.sleep(3600)
        finally:
            await runner.cleanup()

    main = loop.create_task(serve())
    try:
        loop.run_until_complete(main)
    except (web.GracefulExit, KeyboardInterrupt):
        pass
    finally:
        main.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            loop.run_until_complete(main)
        rest = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for t in rest:
            t.cancel()
        if rest:
            loop.run_until_complete(asyncio.gather(*rest, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
