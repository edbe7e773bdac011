"""What the pipeline does around every generation call: threading it into a trajectory,
numbering its step, the upstream request (with failover), and stamping the policy version."""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Any

import orjson
from aiohttp import web
from multidict import CIMultiDict

from agentworld.proxy.adapters.base import PASSTHROUGH, Adapter, Exchange
from agentworld.proxy.adapters.openai import Injected
from agentworld.proxy.agent_request import Ident
from agentworld.proxy.config import UpstreamConfig
from agentworld.proxy.recorder import Call
from agentworld.proxy.registry import Trajectory, prefix_keys
from agentworld.proxy.state import State
from agentworld.proxy.upstream.client import UpstreamConnectError, UpstreamResponse
from agentworld.proxy.upstream.faults import read_limited
from agentworld.proxy.upstream.headers import POLICY_HEADER, policy_from, relayed, upstream_headers
from agentworld.seeds import derive

log = logging.getLogger("agentworld.proxy")


def continue_thread(x: Exchange, replies: list[dict[str, Any]] | None) -> None:
    """The continuation points of an answered call: where the agent's next call, resending
    ``replies`` after this call's prompt, finds its trajectory. Registered before the
    answer leaves (the next call may come as soon as it has)."""
    if replies is None or not x.threads:
        return
    call = x.call
    x.st.registry.add_continuations(
        call.trajectory, x.prompt_key, [m for m in replies if m], call.index
    )


def thread_call(
    st: State, request: web.Request, ident: Ident, agent: str, messages: list[dict[str, Any]] | None
) -> tuple[Trajectory, bytes | None]:
    """Join the open trajectory this conversation continues, or start one."""
    keys: list[bytes] | None = None
    t: Trajectory | None = None
    peer: Any = None  # the agent connection's address: twins' ties go to their own trajectory
    if messages is not None:
        keys = prefix_keys(agent, messages, ident.group, ident.task)
        transport = request.transport
        peer = transport.get_extra_info("peername") if transport is not None else None
        t = st.registry.find_thread(keys, peer)
    if t is not None:
        st.registry.continue_thread(t)
    else:
        t = st.registry.create(
            agent,
            group=ident.group,
            task=ident.task,
            dataset=ident.dataset,
            split=ident.split,
            threaded=messages is not None,
            policy_version=st.policy_version,
        )
        if keys is not None:
            t.forked_from = st.registry.fork_point(keys)
    if keys is not None:
        t.peer = peer
        st.registry.remember(keys[-1], t, t.next_index)  # the prompt of the step it becomes
    return t, keys[-1] if keys else None


def new_call(
    st: State,
    t: Trajectory,
    up: UpstreamConfig,
    adapter: Adapter,
    sent: dict[str, Any],
    injected: Injected,
    *,
    requested_model: Any,
    started_at: float,
    t0: float,
    messages: list[dict[str, Any]] | None,
    metadata: dict[str, Any] | None = None,
) -> tuple[Call, str]:
    """Number the trajectory's next step and pick its upstream URL (affinity): the call, and
    that URL. ``call_ended`` must follow, however the call ends."""
    slot = st.registry.pick_slot(t, len(up.urls))
    index = t.next_index
    t.next_index += 1
    t.inflight += 1
    st.registry.touch(t)
    metadata = metadata if metadata is not None else {}
    metadata["upstream"] = up.urls[slot]
    if t.threaded:
        metadata["threading"] = "auto"
        if index == 0 and t.forked_from is not None:
            metadata["forked_from"] = t.forked_from
    if up.model is not None and requested_model not in (None, up.model):
        metadata["requested_model"] = requested_model
    call = Call(
        trajectory=t,
        index=index,
        adapter=adapter,
        sent=sent,
        injected=injected,
        policy_version=st.policy_version,
        started_at=started_at,
        t0=t0,
        metadata=metadata,
        messages=messages,
    )
    return call, up.urls[slot]


def seed_call(call: Call, body: dict[str, Any], mode: str) -> None:
    """A call of a trajectory opened with a seed (`aw run --seed`) gets its own: the
    agent's own ``seed`` wins, else ``derive(trajectory seed, step index)`` goes upstream
    and into the step's metadata. Not on a pass-through call: that API has no seed.
    Every call of a seeded trajectory records the trajectory's seed
    (``metadata.trajectory_seed``): a restarted proxy reopens it seeded (``restore``)."""
    seed = call.trajectory.seed
    if seed is None:
        return
    call.metadata["trajectory_seed"] = seed
    if mode == PASSTHROUGH or "seed" in body:
        return
    call.sent["seed"] = call.metadata["seed"] = derive(seed, call.index)


def call_headers(
    st: State, request: web.Request, call: Call, api_key: str | None
) -> tuple[CIMultiDict[str], dict[str, str]]:
    """(the headers for the upstream, those the agent's answer carries) of a call."""
    tid = call.trajectory.id
    headers = upstream_headers(
        request.headers,
        api_key,
        forward_client_auth=not st.config.auth_token,
        extra={
            "Content-Type": "application/json",
            "Accept-Encoding": "identity",
            "X-AW-Trajectory": tid,
        },
    )
    return headers, step_headers(call)


def step_headers(call: Call) -> dict[str, str]:
    """The headers naming the step a call is recorded as. Every answer to a recorded call
    carries them, an error too, so a harness can tell which step failed (to label it,
    or to close its trajectory)."""
    return {"X-AW-Trajectory": call.trajectory.id, "X-AW-Step": str(call.index)}


async def served(
    st: State, call: Call, prompt_key: bytes | None, answer: Awaitable[web.StreamResponse]
) -> web.StreamResponse:
    """Await the call's answer; then its bookkeeping (``call_ended``) and request count."""
    try:
        resp = await answer
    finally:
        call_ended(st, call, prompt_key)
    st.stats.request(call.adapter.protocol, resp.status)
    return resp


def call_ended(st: State, call: Call, prompt_key: bytes | None) -> None:
    """Bookkeeping once a generation call is over, however it ended."""
    t = call.trajectory
    t.call_landed()
    st.registry.touch(t)
    if not t.thread_keys and t.threaded:  # no answer: a retry must find it again
        st.registry.resume_thread(t, prompt_key)
    else:
        t.spent_keys = ()  # answered: no ``retract`` can need them any more
    if call.upstream_s is not None:
        st.stats.upstream(call.upstream_s)


async def open_upstream(
    st: State, call: Call, url: str, up: UpstreamConfig, headers: Any
) -> UpstreamResponse:
    """POST the call's body upstream; the response once its status and headers are in.

    When the trajectory's URL cannot be connected to (nothing was sent) and its
    agent has others, that URL is left out for a while (``Registry.mark_down``)
    and the trajectory moves to another for good: its engine's prefix cache is
    lost, the episode goes on. The response's ``url`` is the one that answered;
    the step's metadata names the URLs that failed.
    """
    assert st.upstream is not None
    body = orjson.dumps(call.sent)
    t = call.trajectory
    while True:
        try:
            return await st.upstream.post(
                url,
                body,
                headers,
                connect_timeout_s=up.connect_timeout_s,
                read_timeout_s=up.timeout_s,
            )
        except UpstreamConnectError as exc:
            base = call.metadata.get("upstream")
            if len(up.urls) < 2 or t.slot is None or base not in up.urls:
                raise
            failed = call.metadata.setdefault("upstream_failed", [])
            failed.append(base)
            st.registry.mark_down(t.agent, t.slot)
            slot = st.registry.pick_slot(t, len(up.urls))
            if up.urls[slot] in failed:
                raise  # every URL of this agent failed this call
            log.warning(
                "upstream %s unreachable (%s): trajectory %s moves to %s",
                base,
                exc,
                t.id,
                up.urls[slot],
            )
            url = up.urls[slot] + url[len(base) :]
            call.metadata["upstream"] = up.urls[slot]


async def post_upstream(
    st: State, call: Call, url: str, up: UpstreamConfig, headers: Any
) -> tuple[bytes, int, str]:
    """POST the call's body upstream; (body, status, content type), the policy version stamped.

    Network failures propagate: each caller answers them in its own protocol's shape.
    """
    resp = await open_upstream(st, call, url, up, headers)
    async with resp:
        raw = await read_limited(resp, st.config.max_response_bytes)
        status, ctype = resp.status, resp.headers.get("Content-Type", "application/json")
        stamp(st, call, resp.headers)
    return raw, status, ctype


def stamp(st: State, call: Call, headers: Any) -> None:
    """What the upstream's response headers say: the policy version, and what to relay."""
    call.relay = relayed(headers)
    pv = policy_from(headers)
    if pv is not None:
        st.upstream_policy(pv)
        call.policy_version = pv
    call.trajectory.policy_version = call.policy_version
    # The agent learns the version its step is recorded under, as `aw serve`'s own answers
    # tell it: on every protocol, unary or streamed, since every recorded route relays this.
    call.relay[POLICY_HEADER] = str(call.policy_version)
