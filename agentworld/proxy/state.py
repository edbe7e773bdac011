"""What the proxy's handlers share, held by the app under typed keys.

A module of its own so that the handlers and the app that routes to them both
import it, and neither imports the other.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web

from agentworld.proxy.agent_conn import AgentConnections
from agentworld.proxy.config import ProxyConfig
from agentworld.proxy.policy_store import POSTED, UPSTREAM, PolicyKeeper
from agentworld.proxy.recorder import Recorder
from agentworld.proxy.redact import KnownKeys
from agentworld.proxy.registry import Registry
from agentworld.proxy.stats import ProxyStats
from agentworld.proxy.translate.response_chains import ResponseChains
from agentworld.proxy.upstream.client import UpstreamClient

if TYPE_CHECKING:
    from agentworld.pool import Pool
    from agentworld.proxy.pool_seam import StepWriter


@dataclass
class State:
    """Everything a request handler needs, held by the app under STATE."""

    config: ProxyConfig
    pool: Pool
    stats: ProxyStats
    registry: Registry
    policy: PolicyKeeper  # how policy_version came, and its copy in the pool (policy_store.py)
    writer: StepWriter | None = None  # the pool's PoolWriter, made at startup unless given
    recorder: Recorder | None = None
    session: aiohttp.ClientSession | None = None  # pass-through routes
    upstream: UpstreamClient | None = None  # generation calls
    policy_version: int = 0  # stamped on every step (a plain read); ``policy`` says whence
    own_writer: bool = True
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    agent_conns: AgentConnections = field(default_factory=AgentConnections)
    known_keys: KnownKeys = field(default_factory=KnownKeys)  # masked in every record

    async def set_policy(self, version: int) -> bool:
        """``POST /aw/policy``: the version stamped from now on, older than before or not
        (a trainer's catch-up may take the server back to its checkpoint). It holds at
        once; returns whether it is also kept in the pool, for a restart."""
        self.policy_version = version
        self.policy.changed(version, POSTED)
        # Shielded: a trainer hanging up mid-request must not leave the change unsaved.
        return await asyncio.shield(self.policy.save_soon())

    def upstream_policy(self, version: int) -> None:
        """An answer's ``X-AW-Policy-Version``: the stamp only moves forward. An answer
        sampled before a reload and landing after it (or one from a replica not reloaded
        yet) says an older version; it is that step's, not the proxy's from then on."""
        if version > self.policy_version:
            self.policy_version = version
            self.policy.changed(version, UPSTREAM)  # once a reload, not once a call
            self.policy.save_soon()


STATE: web.AppKey[State] = web.AppKey("agentworld_proxy_state", State)
# The Responses answers a later ``previous_response_id`` may point back to.
CHAINS: web.AppKey[ResponseChains] = web.AppKey("agentworld_response_chains", ResponseChains)
# The recorded generation routes' handlers by path (the front serves them: front/).
GENERATION: web.AppKey[dict[str, Any]] = web.AppKey("agentworld_generation_routes", dict)
