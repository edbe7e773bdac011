"""The gateway: an OpenAI- and Anthropic-compatible proxy that records every LLM call into the pool.

The rooms, and the path of one call (``POST /t/T/v1/chat/completions``):

- ``front/`` is where a call comes in: the proxy's own HTTP/1.1 server for plain
  generation calls (``front/protocol.py``), which hands any other connection to
  aiohttp's server of the same app.
- ``app.py`` assembles the app: ``middlewares.py`` (errors, auth, access log),
  the routes, ``lifespan.py`` (upstream clients, pool writer, restore, sweeper).
  ``state.py`` holds what every handler shares (``STATE``); no handler imports app.
- ``pipeline/`` is the one call path of every recorded route. ``handler.generate``:
  ``agent_request.py`` reads the body and says whose call it is; the adapter checks
  it and gives what goes upstream; ``call.thread_call`` joins or opens its
  trajectory and ``new_call`` numbers its step; then ``unary.py`` or ``stream.py``
  ask the upstream (``call.open_upstream``: failover across the agent's URLs) and
  answer the agent, the step recorded before the answer (strict) or after
  (batched); ``faults.py`` ends a call that failed or whose agent left.
- ``adapters/`` has one adapter per wire format behind one interface
  (``adapters/base.py``): ``openai.py`` (chat: the identity; completions; its
  stream relay ``openai_stream.py`` reads chat events into ``openai_chunks.py``'s
  typed structs) and
  ``translated.py`` (Anthropic Messages, OpenAI Responses: translated to a chat
  upstream, or passed through). Each turns the upstream's answer or event stream
  (its ``Relay``) into the agent's, and gives its protocol's errors.
- ``translate/`` is the translation itself: Messages and Responses to and from
  chat, their streams, ``previous_response_id`` chains, context-window handling.
- ``upstream/`` is the upstream client: ``client.py`` (the HTTP/1.1 client of
  generation calls), ``answer_json.py`` (an answer parsed with its prompt ids kept
  as bytes), ``headers.py`` (what goes up and comes back), ``faults.py``.
- The registry: ``registry.py`` (open trajectories, automatic threading).
- Recording: ``recorder.py`` (steps, through ``redact.py``, into the writer the
  ``pool_seam.py`` protocol types), ``write_health.py`` (a pool that cannot be written).
- The ``/aw/`` API: ``aw_api.py`` (trajectories, rewards, white-box steps, stats).
- Un-recorded routes: ``relay.py`` (other ``/v1/*`` paths), ``count_tokens.py``.
- Running it: ``command.py`` (``aw proxy``; imports only typer, so ``aw --help``
  stays fast), ``inprocess.py`` (``ProxyServer``, for ``aw run`` and tests),
  ``fake_upstream.py`` (a vLLM-shaped upstream for tests and benchmarks).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentworld.proxy.config import ProxyConfig, UpstreamConfig
    from agentworld.proxy.inprocess import ProxyServer

__all__ = ["ProxyConfig", "ProxyServer", "UpstreamConfig"]


def __getattr__(name: str) -> object:
    if name == "ProxyServer":
        from agentworld.proxy.inprocess import ProxyServer

        return ProxyServer
    if name in ("ProxyConfig", "UpstreamConfig"):
        from agentworld.proxy import config

        return getattr(config, name)
    raise AttributeError(name)
