"""The app's life (its cleanup_ctx): upstream session, pool writer, kept policy version, restored
trajectories, idle sweeper."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Collection
from typing import Any

from aiohttp import web

from agentworld.errors import AgentWorldError
from agentworld.proxy.adapters.translated import RESPONSES
from agentworld.proxy.agent_conn import watch_agents
from agentworld.proxy.aw_api import end_trajectory
from agentworld.proxy.recorder import Recorder, RecordFailed
from agentworld.proxy.registry import restore
from agentworld.proxy.relay import make_session
from agentworld.proxy.state import CHAINS, STATE, State
from agentworld.proxy.translate.response_chains import ResponseChains
from agentworld.proxy.upstream.client import UpstreamClient
from agentworld.proxy.write_health import probe_writes, watch_lost

log = logging.getLogger("agentworld.proxy")


def restore_chains(chains: ResponseChains, pool: Any, trajectories: Collection[str]) -> int:
    """After a restart: the Responses answers of the re-opened trajectories go back into the
    chain store, from what their steps keep (``raw``: the agent's request and the answer it
    got), so a ``previous_response_id`` an agent got before the restart still finds its
    conversation. The newest ``chains.max_responses`` at most; returns how many."""
    if not trajectories:
        return 0
    steps = pool.index().steps_of(list(trajectories))
    rows = [
        r
        for rows in steps.values()
        for r in rows
        if r.get("protocol") == RESPONSES.protocol and r.get("status") == "ok"
    ]
    rows.sort(key=lambda r: r.get("started_at") or 0.0)
    rows = rows[-chains.max_responses :]
    got = pool.read_steps(rows)  # each shard or journal read once
    n = 0
    for row in rows:
        try:
            step = got[row["id"]]
            if isinstance(step, Exception):
                raise step
            raw = step.get("raw") or {}
            body, answer = raw.get("request"), raw.get("response")
            if isinstance(body, dict) and isinstance(answer, dict):
                before = len(chains)
                RESPONSES.remember(chains, row["trajectory"], body, answer)
                n += len(chains) > before
        except Exception as exc:  # the index is a cache; a bad row must not stop the proxy
            log.warning("restore: cannot read Responses step %s: %s", row.get("id"), exc)
    return n


# Trajectories closed between two chances for calls to run. A closure costs ~24 us of
# loop time (its end record built and queued): 32 hold the loop under a millisecond,
# where 256 held it ~6 ms, again and again once the open cap is reached under load.
SWEEP_BATCH = 32


async def _sweep(st: State) -> None:
    """Close trajectories idle past the timeout (and the oldest beyond the open cap)."""
    timeout_s = st.config.idle_timeout_s
    interval_s = st.config.sweep_interval_s or min(max(timeout_s / 4, 0.02), 5.0)
    while True:
        await asyncio.sleep(interval_s)
        now = time.monotonic()
        expired = st.registry.idle(now, timeout_s) + st.registry.over_capacity()
        for i, t in enumerate(expired):
            if i and not i % SWEEP_BATCH:
                await asyncio.sleep(0)  # a big sweep lets calls in between its batches
            if t.id not in st.registry.open or t.inflight or t.last_active > now:
                continue  # closed meanwhile, or a call came while the sweep gave way
            try:
                await end_trajectory(
                    st,
                    t,
                    "timeout",
                    error={"type": "idle_timeout", "message": f"no call for {timeout_s:g} s"},
                )
            except (RecordFailed, AgentWorldError) as exc:
                log.error("closing idle trajectory %s failed: %s", t.id, exc)


LOOP_LAG_WARN_S = 0.5
LOOP_LAG_WARN_EVERY_S = 60.0
# The share of a late check's time the loop's thread ran on a core, from which the lateness
# is mostly its own work (CPU-bound) rather than a wait (for the GIL, a core, a blocking
# call): a CPU-bound loop measures ~100%, one held up ~0%.
CPU_BOUND_BUSY = 0.5
# An in-process proxy's lateness has been said in this process (each `aw run` session of an
# `aw demo` starts a proxy of its own: said once, not once a session).
_said_in_process = False


async def _watch_loop(st: State) -> None:
    """Measure how late the event loop runs a timer: the sign of a CPU-bound proxy.

    One proxy serves from one event loop, so one CPU core; past that, calls
    queue behind each other. The lateness goes to /aw/stats and /metrics, and
    a warning to the log (at most once a minute) when it passes half a second.
    The warning tells the two causes apart by the CPU time the loop's thread
    used meanwhile: busy, the proxy is CPU-bound; idle, it was held up (a
    blocking call on the loop, another thread of its process holding the GIL,
    as an engine or agent run in the same process does, or a machine whose
    cores are taken), and more proxies would not help.
    """
    loop = asyncio.get_running_loop()
    interval_s = st.config.loop_check_interval_s
    warned = -LOOP_LAG_WARN_EVERY_S
    while True:
        t0, cpu0 = loop.time(), time.thread_time()
        await asyncio.sleep(interval_s)
        now = loop.time()
        lag = max(0.0, now - t0 - interval_s)
        st.stats.loop_lag(lag)
        if lag > LOOP_LAG_WARN_S and now - warned >= LOOP_LAG_WARN_EVERY_S:
            warned = now
            busy = (time.thread_time() - cpu0) / max(now - t0, 1e-9)
            if st.config.in_process:
                _say_in_process(lag, busy)
            elif busy >= CPU_BOUND_BUSY:
                log.warning(
                    "the event loop ran %.2f s late, its thread busy %.0f%% of the time: this"
                    " proxy is CPU-bound (it uses one core); spread the agents over more proxies",
                    lag,
                    100 * busy,
                )
            else:
                log.warning(
                    "the event loop ran %.2f s late, its thread busy only %.0f%% of the time:"
                    " held up, not CPU-bound (a blocking call on the loop, another thread of"
                    " this process holding the GIL, or a machine short of cores)",
                    lag,
                    100 * busy,
                )


def _say_in_process(lag: float, busy: float) -> None:
    """The lateness of a proxy on another program's loop, once a process: the agents and
    engine that program runs there are late with it, and a proxy of its own is the remedy."""
    global _said_in_process
    if _said_in_process:
        return
    _said_in_process = True
    log.warning(
        "the event loop ran %.2f s late (its thread busy %.0f%% of the time): the proxy `aw run`"
        " started in-process shares that loop, and one core, with the agents it runs; for more"
        " throughput start `aw proxy` on its own and pass --proxy URL (said once)",
        lag,
        100 * busy,
    )


async def lifespan(app: web.Application) -> AsyncIterator[None]:
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
    watch_lost(st)
    st.recorder = Recorder(
        st.writer,
        st.stats,
        strict=st.config.durability == "strict",
        instance=st.config.instance,
        known_keys=st.known_keys,
    )
    log.info("%s", st.policy.describe())
    await st.policy.save()  # --policy-version: kept for the next start without it
    if st.config.restore:
        try:
            n = await asyncio.to_thread(restore, st.registry, st.pool, instance=st.config.instance)
            if n:
                log.info("restored %d open trajectories from the pool", n)
            if n:
                back = list(st.registry.open)  # nothing else is open before serving starts
                k = await asyncio.to_thread(restore_chains, app[CHAINS], st.pool, back)
                if k:
                    log.info("restored %d Responses answers (previous_response_id chains)", k)
        except (AgentWorldError, OSError) as exc:
            log.error("could not restore open trajectories from the pool index: %s", exc)
    loop = asyncio.get_running_loop()
    tasks = [
        loop.create_task(_sweep(st)),
        loop.create_task(_watch_loop(st)),
        loop.create_task(probe_writes(st)),
        loop.create_task(watch_agents(st.agent_conns, st.config.client_timeout_s, st.stats)),
    ]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            try:
                await task
            except asyncio.CancelledError:
                pass
        await st.recorder.drain()
        await st.policy.close()  # a version an answer moved last is kept
        await st.session.close()
        await st.upstream.close()
        if st.own_writer:
            await asyncio.to_thread(st.writer.close)
