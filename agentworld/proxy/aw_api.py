"""The /aw/ endpoints: trajectories, rewards, white-box steps, policy, health, stats, metrics."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from agentworld import __version__, records
from agentworld.errors import PoolError, RecordError
from agentworld.proxy.agent_request import (
    agent_for,
    check_name,
    get_trajectory,
    identify,
    read_json,
)
from agentworld.proxy.bad_request import BadRequest
from agentworld.proxy.error_responses import error_response
from agentworld.proxy.normal_form import normalise_message
from agentworld.proxy.recorder import RecordFailed, retry_later
from agentworld.proxy.registry import MAX_STEP_IDS, Trajectory
from agentworld.proxy.state import STATE, State
from agentworld.seeds import check_seed

log = logging.getLogger("agentworld.proxy")

# How long /complete waits, unless told (``wait_s``), for the trajectory's calls in flight
# to land before it answers that the end is pending.
COMPLETE_WAIT_S = 30.0


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(obj), content_type="application/json")


async def _body(request: web.Request, *, optional: bool = False) -> dict[str, Any]:
    st = request.app[STATE]
    if optional and not request.can_read_body:
        return {}
    return await read_json(request, st.config.max_body_bytes, st.config.client_timeout_s)


def _number(v: Any, what: str) -> float:
    if (
        isinstance(v, bool)
        or not isinstance(v, int | float)
        or v != v
        or v in (float("inf"), float("-inf"))
    ):
        raise BadRequest(f"'{what}' must be a finite number", what)
    return v


def _error_field(v: Any) -> dict[str, Any] | None:
    if v is None:
        return None
    if isinstance(v, str):
        return {"type": "agent_error", "message": v}
    if isinstance(v, dict) and isinstance(v.get("message"), str):
        return {"type": str(v.get("type") or "agent_error"), "message": v["message"]}
    raise BadRequest("'error' must be a string or {type, message}", "error")


def _seed(v: Any) -> int | None:
    if v is None:
        return None
    try:
        return check_seed(v, "'seed'")
    except ValueError as exc:
        raise BadRequest(str(exc), "seed") from None


def _metadata(v: Any) -> dict[str, Any] | None:
    if v is not None and not isinstance(v, dict):
        raise BadRequest("'metadata' must be an object", "metadata")
    if v:
        try:
            records.check_metadata(v)
        except RecordError as exc:
            raise BadRequest(str(exc), exc.field) from None
    return v or None


def close_trajectory(
    st: State,
    t: Trajectory,
    status: str,
    *,
    reward: float | None = None,
    error: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Close a trajectory to new calls and make its end record, for ``write_end`` (RecordError,
    and the trajectory stays open, if that record would be invalid)."""
    rec = records.make_end(
        **t.common(),
        status=status,
        steps=t.steps,
        reward=reward if reward is not None else t.reward,
        policy_version=t.policy_version or st.policy_version,
        error=error,
        metadata=metadata if metadata is not None else t.metadata,
    )
    records.validate(rec)
    t.reward = rec.get("reward")
    st.registry.close(t.id, status)
    st.stats.ended(status)
    return rec


async def write_end(st: State, t: Trajectory, rec: dict[str, Any]) -> None:
    """Write a closed trajectory's end record once its calls in flight have recorded their
    steps (``Recorder.end``); RecordFailed in strict mode when it cannot be written."""
    assert st.recorder is not None
    try:
        await st.recorder.end(t, rec)
    finally:
        st.registry.ended(t.id)


async def end_trajectory(
    st: State,
    t: Trajectory,
    status: str,
    *,
    reward: float | None = None,
    error: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Close a trajectory and write its end record (``close_trajectory``, ``write_end``)."""
    rec = close_trajectory(st, t, status, reward=reward, error=error, metadata=metadata)
    await write_end(st, t, rec)
    return rec


# -- trajectories ------------------------------------------------------------------------------


async def create_trajectory(request: web.Request) -> web.Response:
    """POST /aw/trajectories {agent?, dataset?, split?, task?, group?, metadata?, trajectory?,
    seed?}: ``seed`` seeds each of its calls' sampling (``pipeline.call.seed_call``)."""
    st = request.app[STATE]
    body = await _body(request, optional=True)
    ident = identify(request)
    agent = check_name(body.get("agent"), "agent") or agent_for(st, ident, None)
    if st.config.upstream_for(agent) is None:
        raise BadRequest(
            f"no upstream for agent {agent!r}; configured: {sorted(st.config.agents)}", "agent"
        )
    fields = {
        "group": check_name(body.get("group"), "group") or ident.group,
        "dataset": check_name(body.get("dataset"), "dataset") or ident.dataset,
        "split": check_name(body.get("split"), "split") or ident.split,
        "task": check_name(body.get("task"), "task", max_chars=1024) or ident.task,
        "metadata": _metadata(body.get("metadata")),
        "seed": _seed(body.get("seed")),
    }
    tid = check_name(body.get("trajectory"), "trajectory")
    try:
        t = st.registry.create(agent, trajectory=tid, policy_version=st.policy_version, **fields)
    except ValueError as exc:
        raise BadRequest(str(exc), "trajectory", 409) from None
    base = f"{request.scheme}://{request.host}/t/{t.id}"
    return _json(
        {
            "trajectory": t.id,
            "agent": t.agent,
            "group": t.group,
            "base_url": base + "/v1",
            "anthropic_base_url": base,
        }
    )


async def get_trajectory_state(request: web.Request) -> web.Response:
    """GET /aw/trajectories/<id>: an open trajectory's state, or how a closed one ended.

    ``status`` is ``open`` or the end status (as in the pool); ``end`` says whether
    a closed one's end record is ``written`` or ``pending`` (its calls in flight).
    """
    st = request.app[STATE]
    tid = request.match_info["trajectory"]
    t = st.registry.open.get(tid)
    if t is not None:
        return _json(
            {
                "trajectory": t.id,
                "agent": t.agent,
                "group": t.group,
                "task": t.task,
                "status": "open",
                "steps": t.steps,
                "next_index": t.next_index,
                "inflight": t.inflight,
                "threaded": t.threaded,
                "reward": t.reward,
            }
        )
    t = st.registry.ending.get(tid)
    if t is not None:
        return _json(
            {
                "trajectory": t.id,
                "agent": t.agent,
                "group": t.group,
                "task": t.task,
                "status": st.registry.closed.get(tid),
                "end": "pending",
                "steps": t.steps,
                "inflight": t.inflight,
                "reward": t.reward,
            }
        )
    end = await asyncio.to_thread(lambda: _fresh_index(st).end(tid))
    if end is None:
        if tid in st.registry.closed:  # closed here, its end record not stored (logged)
            return _json({"trajectory": tid, "status": st.registry.closed[tid], "end": "missing"})
        raise BadRequest(f"unknown trajectory {tid!r}", "trajectory", 404)
    return _json(
        {
            "trajectory": tid,
            "agent": end["agent"],
            "group": end["grp"],
            "task": end["task"],
            "status": end["status"],
            "end": "written",
            "steps": end["steps"],
            "reward": end["reward"],
        }
    )


async def set_reward(request: web.Request) -> web.Response:
    """POST /aw/trajectories/<id>/reward {reward, step?: index or step id, choice?}."""
    st = request.app[STATE]
    tid = request.match_info["trajectory"]
    body = await _body(request)
    reward = _number(body.get("reward"), "reward")
    step = body.get("step")
    choice = body.get("choice")
    t = st.registry.open.get(tid)
    if step is None:
        if t is not None:
            t.reward = reward  # goes into the end record
            return _json({"trajectory": tid, "reward": reward, "target": "end"})
        return await _label(st, [f"trajectory:{tid}"], reward, tid)
    if choice is not None and (
        isinstance(choice, bool) or not isinstance(choice, int) or choice < 0
    ):
        raise BadRequest("'choice' must be an integer >= 0", "choice")
    if isinstance(step, str) and step:
        sid = check_name(step, "step")
        if t is not None and any(sid in ids for ids in t.step_ids.values()):
            ids = [sid]
        else:  # an ended trajectory, one restored after a restart, or not its step: ask the index
            rows = await asyncio.to_thread(_indexed_steps, st, tid)
            ids = [r["id"] for r in rows if r["id"] == sid]
    elif isinstance(step, int) and not isinstance(step, bool) and step >= 0:
        if t is not None and step in t.step_ids:
            ids = list(t.step_ids[step])  # in choice order
            if isinstance(choice, int) and len(ids) > 1:
                ids = ids[choice : choice + 1]
        else:  # an ended trajectory, or one restored after a restart: ask the index
            rows = await asyncio.to_thread(_indexed_steps, st, tid)
            ids = [
                r["id"]
                for r in rows
                if r["idx"] == step and (choice is None or r["choice"] in (choice, None))
            ]
    else:
        raise BadRequest("'step' must be a step index (integer >= 0) or a step id", "step")
    if not ids:
        raise BadRequest(f"trajectory {tid!r} has no step {step!r}", "step", 404)
    return await _label(st, [f"step:{i}" for i in ids], reward, tid)


def _fresh_index(st: State) -> Any:
    """The pool's index with every record this proxy appended, for looking up ended trajectories.

    In batched durability a record can still be queued in the writer (up to
    ``commit_interval_s``): it is written out first, or a reward sent right after
    ``complete`` could miss the step it names.
    """
    if st.writer is not None:
        try:
            st.writer.flush()
        except PoolError as exc:  # what did reach the pool can still be found
            log.warning("flushing the pool writer before an index lookup failed: %s", exc)
    return st.pool.index()


def _indexed_steps(st: State, tid: str) -> list[dict[str, Any]]:
    """The trajectory's steps in the pool's index, the ones this proxy appended included."""
    return _fresh_index(st).steps(tid)


async def _label(st: State, targets: list[str], reward: float, tid: str) -> web.Response:
    if targets[0].startswith("trajectory:") and tid not in st.registry.closed:
        rows = await asyncio.to_thread(_indexed_steps, st, tid)
        if (
            not rows
            and await asyncio.to_thread(lambda: st.pool.index(refresh=False).end(tid)) is None
        ):
            raise BadRequest(f"unknown trajectory {tid!r}", "trajectory", 404)
    await asyncio.to_thread(st.pool.labels.set, targets, {"reward": reward}, author="aw-proxy")
    return _json({"trajectory": tid, "reward": reward, "target": "labels", "labelled": targets})


async def complete(request: web.Request) -> web.Response:
    """POST /aw/trajectories/<id>/complete {status?, reward?, error?, metadata?, wait_s?}.

    The trajectory takes no call from here on. Its end record is written once the
    calls still in flight have recorded their steps, so it always comes after them
    and counts them: the answer waits for that up to ``wait_s`` (200, ``end:
    written``), then says the end is pending (202, ``end: pending``, ``inflight``).
    """
    st = request.app[STATE]
    body = await _body(request, optional=True)
    t = get_trajectory(st, request.match_info["trajectory"])  # no wait from here to closing it
    status = body.get("status", "done")
    if not isinstance(status, str) or status not in records.END_STATUSES:
        raise BadRequest(f"'status' must be one of {sorted(records.END_STATUSES)}", "status")
    reward = _number(body["reward"], "reward") if body.get("reward") is not None else None
    error, metadata = _error_field(body.get("error")), _metadata(body.get("metadata"))
    wait_s = body.get("wait_s", COMPLETE_WAIT_S)
    if _number(wait_s, "wait_s") < 0:
        raise BadRequest("'wait_s' must be a number >= 0", "wait_s")
    try:
        rec = close_trajectory(st, t, status, reward=reward, error=error, metadata=metadata)
    except RecordError as exc:
        raise BadRequest(f"invalid end record: {exc}", exc.field) from None
    assert st.recorder is not None
    # A task of its own: the end is written even if this request stops waiting for it.
    ending = st.recorder.background(write_end(st, t, rec))
    done, _ = await asyncio.wait((ending,), timeout=wait_s if t.inflight else None)
    answer = {"trajectory": t.id, "status": status, "reward": rec.get("reward")}
    if not done:
        return _json({**answer, "steps": t.steps, "end": "pending", "inflight": t.inflight}, 202)
    failed = ending.exception()
    if isinstance(failed, RecordFailed):
        return error_response(
            503,
            f"the end record could not be stored: {failed}",
            "service_unavailable",
            headers=retry_later(),
        )
    if failed is not None:
        raise failed
    return _json({**answer, "steps": rec["steps"], "end": "written"})


async def whitebox_step(request: web.Request) -> web.Response:
    """POST /aw/steps: a step an agent produced itself, with token ids (protocol "whitebox")."""
    st = request.app[STATE]
    body = await _body(request)
    tid = check_name(body.get("trajectory"), "trajectory")
    if tid is None:
        raise BadRequest(
            "'trajectory' is required (create one with POST /aw/trajectories)", "trajectory"
        )
    t = get_trajectory(st, tid)
    index = body.get("index")
    if index is None:
        index = t.next_index
    elif isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise BadRequest("'index' must be an integer >= 0", "index")
    request_part: dict[str, Any] = {}
    if isinstance(body.get("messages"), list):
        if not all(isinstance(m, dict) for m in body["messages"]):
            raise BadRequest("'messages' must be a list of objects", "messages")
        request_part["messages"] = [normalise_message(m) for m in body["messages"]]
    for key in ("prompt", "model", "tools", "params"):
        if body.get(key) is not None:
            request_part[key] = body[key]
    response = body.get("response")
    if response is None and isinstance(body.get("completion"), str):
        response = {"message": {"role": "assistant", "content": body["completion"]}}
    if isinstance(response, dict) and isinstance(response.get("message"), dict):
        response = {
            **response,
            "message": normalise_message({"role": "assistant", **response["message"]}),
        }
    tokens = body.get("tokens")
    if isinstance(tokens, dict) and "source" not in tokens:
        tokens = {
            "source": "engine" if tokens.get("completion_ids") is not None else "none",
            **tokens,
        }
    pv = body.get("policy_version", st.policy_version)
    rec = records.make_step(
        **t.common(),
        index=index,
        request=request_part,
        response=response,
        tokens=tokens,
        protocol="whitebox",
        status=body.get("status", "ok"),
        policy_version=pv,
        choice=body.get("choice"),
        reward=body.get("reward"),
        error=body.get("error"),
        metadata=_metadata(body.get("metadata")),
        timings=body.get("timings"),
    )
    try:
        records.validate(rec)
    except RecordError as exc:
        st.stats.error("bad_request")
        raise BadRequest(f"invalid step: {exc}", exc.field) from None
    _claim(t, index, rec.get("choice"), rec["id"])
    t.next_index = max(t.next_index, index + 1)
    st.registry.touch(t)
    if isinstance(pv, int):
        t.policy_version = pv
    assert st.recorder is not None
    t.inflight += 1  # a complete meanwhile writes the end record after this step
    try:
        await st.recorder.steps(t, [rec])
    except RecordFailed as exc:
        claimed = t.step_ids.get(index, [])
        if rec["id"] in claimed:  # not recorded: the index is free for the agent's retry
            claimed.remove(rec["id"])
            if not claimed:
                del t.step_ids[index]
        return error_response(
            503,
            f"the step could not be recorded durably: {exc}",
            "service_unavailable",
            headers=retry_later(),
        )
    finally:
        t.call_landed()
    st.stats.whitebox_steps += 1
    return _json({"id": rec["id"], "trajectory": t.id, "index": index})


def _claim(t: Trajectory, index: int, choice: int | None, step_id: str) -> None:
    """Take step ``index`` of ``t`` for a white-box step, or a 409 if a step has it already.

    Another choice of a step index is taken in order, as a call with ``n`` > 1
    records its choices: a reward by index and choice finds the step by its place
    among the index's step ids. The claim is made before the step is written, so
    two steps sent at once cannot both take it. (An index a proxied call still in
    flight was given is not known to be taken until its step is recorded.)
    """
    taken = t.step_ids.get(index)
    if taken and choice != len(taken):
        what = f"step {index}" if choice is None else f"step {index} choice {choice}"
        raise BadRequest(
            f"trajectory {t.id!r} already has {what} ({len(taken)} recorded; another"
            f" choice of it is sent as choice {len(taken)})",
            "index",
            409,
        )
    if taken:
        taken.append(step_id)
    elif len(t.step_ids) < MAX_STEP_IDS:
        t.step_ids[index] = [step_id]


# -- policy, health, stats ------------------------------------------------------------------


async def set_policy(request: web.Request) -> web.Response:
    """POST /aw/policy {version}: the version stamped on every step from now on, and after a
    restart. ``saved`` false: it holds, but the pool could not keep it (the log says why)."""
    st = request.app[STATE]
    body = await _body(request)
    v = body.get("version")
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise BadRequest("'version' must be an integer >= 0", "version")
    saved = await st.set_policy(v)
    return _json({"policy_version": v, "saved": saved})


async def get_policy(request: web.Request) -> web.Response:
    """GET /aw/policy: the version stamped now, how this proxy came by it (``source``:
    default, restored, --policy-version, POST /aw/policy or X-AW-Policy-Version) and the
    file in the pool that keeps it across restarts (``restored``: what start-up read)."""
    st = request.app[STATE]
    return _json({"policy_version": st.policy_version, **st.policy.as_json()})


async def seal(request: web.Request) -> web.Response:
    """POST /aw/seal: seal the proxy's journal into a shard now and go on in a new one, so
    what it recorded so far is a shard (what `git add pool` and other machines take)
    without stopping it; `aw pool seal --proxy URL` asks for it. 503 when the pool
    cannot be written."""
    st = request.app[STATE]
    assert st.writer is not None
    try:
        sealed = await asyncio.to_thread(st.writer.seal_now)
    except PoolError as exc:
        return error_response(503, str(exc), "server_error", headers=retry_later())
    return _json({"sealed": sealed, "sealed_shards": st.writer.stats.get("sealed_shards", 0)})


async def health(request: web.Request) -> web.Response:
    """GET /aw/health: 200 "ok", or 503 "degraded" while the pool cannot be written (so a
    load balancer moves traffic away); it clears by itself once writes succeed again."""
    st = request.app[STATE]
    err = getattr(st.writer, "write_error", None)
    return _json(
        {
            "status": "degraded" if err else "ok",
            "version": __version__,
            "pool": str(st.pool.root),
            "durability": st.config.durability,
            "on_write_failure": st.config.on_write_failure,
            "open_trajectories": len(st.registry),
            "policy_version": st.policy_version,
            "writer_error": str(err) if err else None,
        },
        503 if err else 200,
    )


async def stats(request: web.Request) -> web.Response:
    st = request.app[STATE]
    snap = st.stats.snapshot(open_trajectories=len(st.registry), policy_version=st.policy_version)
    snap["writer"] = dict(getattr(st.writer, "stats", {}))
    down = []
    for agent, slot, left in st.registry.down():
        found = st.config.upstream_for(agent)
        if found is not None and slot < len(found[0].urls):
            down.append(
                {"agent": agent, "url": found[0].urls[slot], "seconds_left": round(left, 1)}
            )
    snap["upstreams_down"] = down  # left out after refusing connections (failover)
    return _json(snap)


async def metrics(request: web.Request) -> web.Response:
    st = request.app[STATE]
    st.stats.snapshot(open_trajectories=len(st.registry), policy_version=st.policy_version)
    return web.Response(
        body=generate_latest(st.stats.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
    )


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_post("/aw/trajectories", create_trajectory)
    r.add_get("/aw/trajectories/{trajectory}", get_trajectory_state)
    r.add_post("/aw/trajectories/{trajectory}/reward", set_reward)
    r.add_post("/aw/trajectories/{trajectory}/complete", complete)
    r.add_post("/aw/steps", whitebox_step)
    r.add_post("/aw/policy", set_policy)
    r.add_get("/aw/policy", get_policy)
    r.add_post("/aw/seal", seal)
    r.add_get("/aw/health", health)
    r.add_get("/aw/stats", stats)
    r.add_get("/metrics", metrics)
