"""The app's life (its cleanup_ctx): upstream session, pool writer, restored trajectories, idle sweeper."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

from aiohttp import web

from agentworld.errors import AgentWorldError
from agentworld.proxy.app import STATE, State
from agentworld.proxy.lifecycle import end_trajectory
from agentworld.proxy.recorder import Recorder, RecordFailed
from agentworld.proxy.trajectories import restore
from agentworld.proxy.upstream import make_session
from agentworld.proxy.upstream_http import UpstreamClient

log = logging.getLogger("agentworld.proxy")


async def _sweep(st: State) -> None:
    """Close trajectories idle past the timeout (and the oldest beyond the open cap)."""
    timeout_s = st.config.idle_timeout_s
    interval_s = st.config.sweep_interval_s or min(max(timeout_s / 4, 0.02), 5.0)
    while True:
        await asyncio.sleep(interval_s)
        now = time.monotonic()
        expired = st.registry.idle(now, timeout_s) + st.registry.over_capacity()
        for t in expired:
            if t.id not in st.registry.open:
                continue
            try:
                await end_trajectory(
                    st,
                    t,
                    "timeout",
                    error={"type": "idle_timeout", "message": f"no call for {timeout_s:g} s"},
                )
            except (RecordFailed, AgentWorldError) as exc:
                log.error("closing idle trajectory %s failed: %s", t.id, exc)


async def running(app: web.Application) -> AsyncIterator[None]:
    """cleanup_ctx: open the upstream session and the writer, restore trajectories, sweep."""
    st = app[STATE]
    st.session = make_session()
    st.upstream = UpstreamClient()
    if st.writer is None:
        st.writer = await asyncio.to_thread(
            st.pool.writer,
            durability=st.config.durability,
            commit_interval_s=st.config.commit_interval_s,
            name="proxy",
        )
    st.recorder = Recorder(st.writer, st.stats, strict=st.config.durability == "strict")
    if st.config.restore:
        try:
            n = await asyncio.to_thread(restore, st.registry, st.pool)
            if n:
                log.info("restored %d open trajectories from the pool", n)
        except (AgentWorldError, OSError) as exc:
            log.error("could not restore open trajectories from the pool index: %s", exc)
    sweeper = asyncio.get_running_loop().create_task(_sweep(st))
    try:
        yield
    finally:
        sweeper.cancel()
        try:
            await sweeper
        except asyncio.CancelledError:
            pass
        await st.recorder.drain()
        await st.session.close()
        await st.upstream.close()
        if st.own_writer:
            await asyncio.to_thread(st.writer.close)
