"""The proxy's aiohttp application: its state, middlewares and routes, assembled.

``make_app`` is shared by ``aw proxy``, the in-process ``ProxyServer`` and the
tests. The handlers live in modules of their own and import ``state``, never
this module.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from aiohttp import web

from agentworld.proxy import aw_api, count_tokens, lifespan, relay
from agentworld.proxy.adapters.openai import CHAT, COMPLETIONS
from agentworld.proxy.adapters.translated import MESSAGES, RESPONSES
from agentworld.proxy.config import ProxyConfig
from agentworld.proxy.middlewares import (
    ServerLog,
    access_middleware,
    auth_middleware,
    errors_middleware,
)
from agentworld.proxy.pipeline.handler import route
from agentworld.proxy.policy_store import PolicyKeeper
from agentworld.proxy.redact import KnownKeys
from agentworld.proxy.registry import Registry
from agentworld.proxy.state import CHAINS, GENERATION, STATE, State
from agentworld.proxy.stats import ProxyStats
from agentworld.proxy.translate.response_chains import ResponseChains
from agentworld.proxy.write_health import refuse_while_failing

if TYPE_CHECKING:
    from agentworld.pool import Pool
    from agentworld.proxy.pool_seam import StepWriter

ROUTE_PREFIXES = (
    "",
    "/t/{trajectory}",
    "/t/{trajectory}/g/{group}",
    "/t/{trajectory}/a/{agent}",
    "/t/{trajectory}/g/{group}/a/{agent}",
    # No trajectory: automatic threading, within this agent and group. For agents that
    # take only a base URL (ANTHROPIC_BASE_URL=http://HOST:PORT/a/claude-code).
    "/a/{agent}",
    "/g/{group}",
    "/g/{group}/a/{agent}",
)


def make_app(
    config: ProxyConfig, pool: Pool, *, writer: StepWriter | None = None
) -> web.Application:
    """The proxy app over an open Pool; creates (and closes) its own writer unless given one.

    The policy version is ``config.policy_version`` when set, else the one this proxy kept
    in the pool before a restart (``policy_store``; a damaged file is an error naming it).
    """
    policy = PolicyKeeper.start(pool.root, config.instance, config.policy_version)
    stats = ProxyStats()
    middlewares: list[Any] = [errors_middleware]
    if config.log_requests:
        middlewares.insert(0, access_middleware)
    if config.auth_token:
        middlewares.append(auth_middleware(config.auth_token, stats))
    middlewares.append(refuse_while_failing)  # after auth: no probing without it
    app = web.Application(
        client_max_size=config.max_body_bytes,
        middlewares=middlewares,
        handler_args={"logger": ServerLog(logging.getLogger("aiohttp.server"), {})},
    )
    app[STATE] = State(
        config=config,
        pool=pool,
        stats=stats,
        registry=Registry(max_open=config.max_open_trajectories),
        writer=writer,
        own_writer=writer is None,
        policy_version=policy.version,
        policy=policy,
        known_keys=KnownKeys([config.auth_token, *config.api_keys.values()]),
    )
    app[CHAINS] = ResponseChains()
    app.cleanup_ctx.append(lifespan.lifespan)

    generation = {a.path: route(a) for a in (CHAT, COMPLETIONS, MESSAGES, RESPONSES)}
    app[GENERATION] = generation
    for prefix in ROUTE_PREFIXES:
        for path, handler in generation.items():  # recorded: the one pipeline
            app.router.add_post(prefix + path, handler)
        count_tokens.add_routes(app, prefix)  # Anthropic's token count (not recorded)
        app.router.add_get(prefix + "/v1/models", relay.models)
        app.router.add_get(prefix + "/v1/models/{model_id:.+}", relay.model)
        app.router.add_route("*", prefix + "/v1/{tail:.*}", relay.relay_v1)
    aw_api.add_routes(app)
    return app
