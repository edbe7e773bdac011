"""Running the proxy inside another program (``aw run``, tests): an async context manager on a free port."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from agentworld.proxy.app import ROUTE_PREFIXES, make_app
from agentworld.proxy.config import ProxyConfig
from agentworld.proxy.front.site import FrontSite
from agentworld.proxy.state import STATE, State

if TYPE_CHECKING:
    from agentworld.pool import Pool
    from agentworld.proxy.front.protocol import Front
    from agentworld.proxy.pool_seam import StepWriter


class ProxyServer:
    """``async with ProxyServer(config, pool) as proxy:`` serves on ``proxy.url`` until exit.

    ``pool`` is an open ``Pool`` or a path (created if missing). Port 0 picks a free port.
    """

    def __init__(
        self,
        config: ProxyConfig,
        pool: Pool | str | os.PathLike[str],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        writer: StepWriter | None = None,
    ) -> None:
        if isinstance(pool, str | os.PathLike):
            from agentworld.pool import Pool

            pool = Pool.create(Path(pool))
        self.pool = pool
        self.app = make_app(config, pool, writer=writer)
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None
        self._site: FrontSite | None = None

    @property
    def state(self) -> State:
        return self.app[STATE]

    @property
    def front(self) -> Front | None:
        """The front serving generation calls (``front/``), once started."""
        return self._site.front if self._site is not None else None

    @property
    def url(self) -> str:
        """Root URL, e.g. http://127.0.0.1:41234 (OpenAI base URL: ``url + "/v1"``)."""
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def trajectory_url(self, trajectory: str) -> str:
        """OpenAI base URL that files every call under ``trajectory``."""
        return f"{self.url}/t/{trajectory}/v1"

    async def start(self) -> ProxyServer:
        self._runner = web.AppRunner(
            self.app,
            access_log=None,
            handle_signals=False,
            handler_cancellation=True,
            # A connection without a (complete) request is closed after this long.
            keepalive_timeout=self.state.config.client_timeout_s,
            # The unread rest of a refused body is read and dropped at most this long.
            lingering_time=min(10.0, self.state.config.client_timeout_s),
        )
        await self._runner.setup()
        self._site = FrontSite(self._runner, ROUTE_PREFIXES, host=self.host, port=self.port)
        await self._site.start()
        self.port = self._site.port
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> ProxyServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
