"""What an agent's request says: its JSON body, read within limits, and whom it belongs to.

Who: the trajectory, group, agent, task, dataset and split named by the route
prefix, the query or ``X-AW-*`` headers (``identify``); which agent and
upstream serve a request that names no trajectory (``agent_for``,
``upstream_of``). Every problem is a ``BadRequest`` naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from agentworld.proxy.agent_conn import read_body
from agentworld.proxy.bad_request import BadRequest
from agentworld.proxy.body_check import check_body
from agentworld.proxy.config import DEFAULT_AGENT, UpstreamConfig
from agentworld.proxy.registry import Trajectory, UnknownTrajectory
from agentworld.proxy.state import State


def first_line(exc: BaseException) -> str:
    """What an exception says, in one line (aiohttp's parser errors span several, and a
    payload error's words are its cause's)."""
    text = getattr(exc, "message", None) or getattr(exc.__cause__, "message", None) or str(exc)
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def check_headers(headers: Any) -> None:
    """BadRequest naming the first header whose value is not UTF-8 (aiohttp hands such
    bytes on as lone surrogates, which nothing downstream can encode: not the upstream
    request, not a record)."""
    for name, value in headers.items():
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise BadRequest(f"header {name}: its value is not valid UTF-8", name) from None


async def read_json(request: web.Request, limit: int, timeout_s: float) -> dict[str, Any]:
    """The request body as a JSON object, or BadRequest naming the problem (413 when too
    big, 408 when it stops arriving for ``timeout_s``)."""
    if request.content_length is not None and request.content_length > limit:
        raise BadRequest(f"request body over the {limit}-byte limit", None, 413)
    try:
        raw = await read_body(request, limit, timeout_s)
    except web.HTTPRequestEntityTooLarge:
        raise BadRequest(f"request body over the {limit}-byte limit", None, 413) from None
    except web.RequestPayloadError as exc:  # a body its Content-Encoding does not decode
        raise BadRequest(f"the request body could not be read: {first_line(exc)}") from None
    if not raw:
        raise BadRequest("the request body is empty; expected a JSON object")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest(f"the request body must be a JSON object, got {type(body).__name__}")
    check_body(body, raw)
    return body


# Characters no name may hold: path separators, and what would end or escape a URL path
# segment (a trajectory, group and agent name is one: /t/<trajectory>/g/<group>/a/<agent>).
_UNSAFE = frozenset("/\\?#%") | frozenset(map(chr, range(32))) | {"\x7f"}


def check_name(value: Any, what: str, *, max_chars: int = 200) -> str | None:
    """An id-like field from a path, header, query or body (None when absent).

    ``.`` and ``..`` are refused too: in a base URL (``/t/../v1``) an SDK resolves them
    away, and the agent's calls would silently leave their trajectory.
    """
    if value is None or value == "":
        return None
    if (
        not isinstance(value, str)
        or len(value) > max_chars
        or value.strip() != value
        or value in (".", "..")
        or any(c in _UNSAFE for c in value)
    ):
        raise BadRequest(
            f"{what}: must be a string of at most {max_chars} chars, not '.' or '..', without "
            "slashes, whitespace, control characters or any of ?#%",
            what,
        )
    return value


@dataclass(frozen=True)
class Ident:
    """Who a request belongs to: path and query first, then X-AW-* headers."""

    trajectory: str | None
    group: str | None
    agent: str | None
    task: str | None
    dataset: str | None
    split: str | None


_NO_IDENT = Ident(None, None, None, None, None, None)
_IDENT_HEADERS = (
    "X-AW-Trajectory",
    "X-AW-Group",
    "X-AW-Agent",
    "X-AW-Task",
    "X-AW-Dataset",
    "X-AW-Split",
)


def identify(request: web.Request) -> Ident:
    """Who ``request`` belongs to (BadRequest naming a name that is not safe)."""
    mi, q, h = request.match_info, request.query, request.headers
    if not mi and not request.query_string and all(x not in h for x in _IDENT_HEADERS):
        return _NO_IDENT  # an agent that says nothing about itself: threading decides

    def pick(key: str, header: str) -> str | None:
        return mi.get(key) or q.get(key) or h.get(header) or None

    return Ident(
        trajectory=check_name(pick("trajectory", "X-AW-Trajectory"), "trajectory"),
        group=check_name(pick("group", "X-AW-Group"), "group"),
        agent=check_name(pick("agent", "X-AW-Agent"), "agent"),
        task=check_name(pick("task", "X-AW-Task"), "task", max_chars=1024),
        dataset=check_name(pick("dataset", "X-AW-Dataset"), "dataset"),
        split=check_name(pick("split", "X-AW-Split"), "split"),
    )


def agent_for(st: State, ident: Ident, model: Any) -> str:
    """The agent a request without a trajectory belongs to."""
    if ident.agent:
        return ident.agent
    if isinstance(model, str) and model in st.config.agents:
        return model  # LiteLLM-style routing by model name
    if st.config.default_upstream is None and len(st.config.agents) == 1:
        return next(iter(st.config.agents))
    return DEFAULT_AGENT


def upstream_of(st: State, agent: str) -> tuple[UpstreamConfig, str | None]:
    """The upstream serving ``agent`` and its API key; BadRequest when there is none."""
    found = st.config.upstream_for(agent)
    if found is None:
        raise BadRequest(
            f"no upstream for agent {agent!r}; configured agents: {sorted(st.config.agents)}"
            + (
                " (name one with X-AW-Agent or as the model, or give the proxy --upstream"
                " or an [agents.default])"
                if agent == DEFAULT_AGENT
                else ""
            ),
            "agent",
        )
    return found


def get_trajectory(st: State, tid: str) -> Trajectory:
    """The open trajectory ``tid`` names; BadRequest 404 (unknown) or 409 (ended)."""
    try:
        return st.registry.get(tid)
    except UnknownTrajectory as exc:
        if exc.status is not None:
            raise BadRequest(
                f"trajectory {tid!r} has ended ({exc.status})", "trajectory", 409
            ) from None
        raise BadRequest(
            f"unknown trajectory {tid!r}; create one with POST /aw/trajectories",
            "trajectory",
            404,
        ) from None
