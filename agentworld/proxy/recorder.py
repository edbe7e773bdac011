"""Turning one proxied call into step records, and writing them to the pool without hurting the agent.

A recording failure (invalid record, disk full, closed writer) is logged and
counted; it reaches the agent only in strict durability mode, as a 503.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentworld import records
from agentworld.errors import AgentWorldError, RecordError
from agentworld.proxy.redact import KnownKeys, redact_record
from agentworld.proxy.registry import MAX_STEP_IDS, Trajectory
from agentworld.proxy.stats import ProxyStats

if TYPE_CHECKING:
    from agentworld.proxy.adapters.base import Adapter
    from agentworld.proxy.adapters.openai import Injected
    from agentworld.proxy.pool_seam import StepWriter

log = logging.getLogger(__name__)


class RecordFailed(Exception):
    """A step could not be made durable (strict mode turns this into a 503)."""


# What an agent is told to wait before retrying a call refused because its step could not
# be stored (a 503's Retry-After): the pool is written again by then, or still refused.
# SDKs honour Retry-After up to a minute.
RETRY_AFTER_S = 5


def retry_later() -> dict[str, str]:
    """The headers of such a 503."""
    return {"Retry-After": str(RETRY_AFTER_S)}


@dataclass
class Call:
    """What the proxy learnt about one generation call while serving it."""

    trajectory: Trajectory
    index: int
    adapter: Adapter
    sent: dict[str, Any]
    injected: Injected
    policy_version: int
    started_at: float = field(default_factory=time.time)
    t0: float = field(default_factory=time.perf_counter)
    first_token_s: float | None = None
    upstream_s: float | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    messages: list[dict[str, Any]] | None = None  # normalised once, shared with threading
    relay: dict[str, str] = field(default_factory=dict)  # upstream headers for the agent

    def timings(self) -> dict[str, Any]:
        t: dict[str, Any] = {"started_at": self.started_at, "ended_at": time.time()}
        if self.first_token_s is not None:
            t["first_token_s"] = round(self.first_token_s, 6)
        if self.upstream_s is not None:
            t["upstream_s"] = round(self.upstream_s, 6)
        return t


def _base(call: Call) -> dict[str, Any]:
    """The fields all step records of one call share (what ``records.make_step`` fills in).

    Built directly rather than through ``make_step``'s keyword copies: this runs
    once per proxied call. Absent optional fields are left out, as make_step does.
    """
    t = call.trajectory
    rec: dict[str, Any] = {
        "kind": records.STEP,
        "schema": records.SCHEMA_VERSION,
        "trajectory": t.id,
        "index": call.index,
        "agent": t.agent,
        "protocol": call.adapter.protocol,
        "policy_version": call.policy_version,
        "timings": call.timings(),
    }
    if t.group is not None:
        rec["group"] = t.group
    if t.dataset is not None:
        rec["dataset"] = t.dataset
    if t.split is not None:
        rec["split"] = t.split
    if t.task is not None:
        rec["task"] = t.task
    if call.metadata:
        rec["metadata"] = call.metadata
    return rec


def _step(
    base: dict[str, Any],
    *,
    request: dict[str, Any],
    response: dict[str, Any] | None,
    tokens: dict[str, Any] | None,
    status: str = "ok",
    error: dict[str, Any] | None = None,
    choice: int | None = None,
) -> dict[str, Any]:
    rec = base.copy()
    rec["id"] = records.new_id("st")
    rec["status"] = status
    rec["request"] = request
    if response is not None:
        rec["response"] = response
    rec["tokens"] = tokens or {"source": "none"}
    if error is not None:
        rec["error"] = error
    if choice is not None:
        rec["choice"] = choice
    return rec


def mark_left(recs: list[dict[str, Any]], before: str) -> None:
    """The agent hung up before ``before`` reached it: its steps are recorded as cancelled."""
    for r in recs:
        r["status"] = "cancelled"
        r["error"] = {"type": "client_disconnected", "message": f"the agent left before {before}"}


def ok_steps(
    call: Call, body: dict[str, Any], replies: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """One step record per choice of a successful response body (``replies``: already made)."""
    request = call.adapter.request_record(call.sent, call.injected, call.messages)
    choices = call.adapter.choices(body, replies)
    base = _base(call)
    if not choices:
        return [
            _step(
                base,
                request=request,
                response=None,
                tokens=None,
                status="error",
                error={"type": "upstream_invalid", "message": "the response has no choices"},
            )
        ]
    if len(choices) == 1:
        _, response, tokens = choices[0]
        return [_step(base, request=request, response=response, tokens=tokens)]
    choice_request = call.adapter.choice_request  # a batch of prompts: each choice its own
    return [
        _step(
            base,
            request=choice_request(request, call.sent, index),
            response=response,
            tokens=tokens,
            choice=index,
        )
        for index, response, tokens in choices
    ]


def failed_step(
    call: Call,
    *,
    status: str,
    error: dict[str, Any],
    partial: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """One step for a call that failed or was cancelled (with what arrived before, if any)."""
    request = call.adapter.request_record(call.sent, call.injected, call.messages)
    response = None
    tokens = None
    if partial is not None:
        got = call.adapter.choices(partial)
        if got:
            index, response, tokens = got[0]
            request = call.adapter.choice_request(request, call.sent, index)
    return [
        _step(
            _base(call),
            request=request,
            response=response,
            tokens=tokens,
            status=status,
            error=error,
        )
    ]


def step_tokens(rec: dict[str, Any]) -> tuple[int, int]:
    usage = (rec.get("response") or {}).get("usage") or {}
    tokens = rec.get("tokens") or {}
    prompt = usage.get("prompt_tokens") or len(tokens.get("prompt_ids") or ())
    completion = usage.get("completion_tokens") or len(tokens.get("completion_ids") or ())
    return (
        prompt if isinstance(prompt, int) else 0,
        completion if isinstance(completion, int) else 0,
    )


_TOOL_CALL_PART = re.compile(r"response\.message\.tool_calls\[(\d+)\]\.(id|name)$")


def _salvage(rec: dict[str, Any], exc: RecordError) -> bool:
    """Make a step refused for a part the upstream gave recordable without it: its
    ``tokens`` or ``usage`` or ``finish_reason`` left out, a tool call's id or name too long
    for a record cut short; ``metadata.upstream_invalid`` names what and why. False if
    that is not what refused it."""
    if rec.get("kind") != records.STEP:
        return False
    field = exc.field
    response = rec.get("response")
    if field.startswith("tokens") and (rec.get("tokens") or {}).get("source") != "none":
        rec["tokens"] = {"source": "none"}
    elif isinstance(response, dict) and (
        field.startswith("response.usage") or field == "response.finish_reason"
    ):
        key = field.split(".")[1]
        rec["response"] = {k: v for k, v in response.items() if k != key}
    elif (m := _TOOL_CALL_PART.match(field)) and isinstance(response, dict):
        message = dict(response["message"])
        calls = [dict(c) for c in message["tool_calls"]]
        call = calls[int(m.group(1))]
        call[m.group(2)] = str(call.get(m.group(2)))[: records.MAX_TOOL_NAME_BYTES // 4]
        message["tool_calls"] = calls
        rec["response"] = {**response, "message": message}
    else:
        return False
    invalid = {**((rec.get("metadata") or {}).get("upstream_invalid") or {}), field: exc.problem}
    rec["metadata"] = {**(rec.get("metadata") or {}), "upstream_invalid": invalid}
    return True


class Recorder:
    """Writes records through the pool writer; counts and logs failures."""

    def __init__(
        self,
        writer: StepWriter,
        stats: ProxyStats,
        *,
        strict: bool,
        instance: str | None = None,
        known_keys: KnownKeys | None = None,
    ) -> None:
        self.writer = writer
        self.stats = stats
        self.strict = strict
        self.instance = instance  # stamped on every step as metadata.proxy
        self.known_keys = known_keys if known_keys is not None else KnownKeys()
        self._background: set[asyncio.Task[None]] = set()

    async def steps(self, t: Trajectory, recs: list[dict[str, Any]]) -> None:
        """Append step records; raise RecordFailed only in strict mode.

        Never after the trajectory's end record: readers drop steps past it. ``end``
        waits for the calls in flight, so only a step from outside any call could come
        so late; it is refused (logged and counted as a recording failure).
        """
        for rec in recs:
            if t.end_written:
                self._failed(rec, "its trajectory's end record is already written")
                continue
            if self.instance is not None:
                rec["metadata"] = {**(rec.get("metadata") or {}), "proxy": self.instance}
            await self._append(rec)
            t.steps += 1
            ids = t.step_ids.get(rec["index"])
            if ids is None:
                if len(t.step_ids) < MAX_STEP_IDS:
                    t.step_ids[rec["index"]] = [rec["id"]]
            elif rec["id"] not in ids:  # a white-box step claims its place before it is written
                ids.append(rec["id"])
            self.stats.step(rec["status"], *step_tokens(rec))

    async def end(self, t: Trajectory, rec: dict[str, Any]) -> None:
        """Append the end record of ``t`` (closed: no call starts on it any more) once its
        calls in flight have recorded their steps: it comes after all of them, and its
        ``steps`` counts them."""
        if t.inflight:
            await t.settled()
            rec["ended_at"] = time.time()  # when its last call landed
        rec["steps"] = t.steps
        t.end_written = True
        await self._append(rec)

    async def _append(self, rec: dict[str, Any]) -> None:
        """Write one record, the redaction rule applied: every record the proxy writes
        comes through here."""
        try:
            redact_record(rec, self.known_keys.listed())
            for attempt in range(4):
                try:
                    await self.writer.append_async(rec)
                    break
                except RecordError as exc:
                    # Malformed token ids, usage, ... from the upstream: the step is kept
                    # without them rather than lost (``_salvage``), one part at a time.
                    if attempt == 3 or not _salvage(rec, exc):
                        raise
                    if attempt == 0:
                        self.stats.error("upstream_invalid")
                    log.warning("step %s: left out what the upstream sent: %s", rec.get("id"), exc)
        except (AgentWorldError, OSError, ValueError, TypeError) as exc:
            self._failed(rec, exc)

    def _failed(self, rec: dict[str, Any], why: Exception | str) -> None:
        """A record that could not be written: counted and logged; RecordFailed in strict mode."""
        self.stats.error("record")
        log.error(
            "recording %s %s of trajectory %s failed: %s",
            rec.get("kind"),
            rec.get("id"),
            rec.get("trajectory"),
            why,
        )
        if self.strict:
            raise RecordFailed(str(why)) from (why if isinstance(why, Exception) else None)

    def later(self, t: Trajectory, recs: list[dict[str, Any]]) -> None:
        """Record from a context that is being cancelled (the task outlives the handler).

        Until its steps are recorded, it counts as a call in flight on ``t``: the
        trajectory's end record waits for them (``end``).
        """
        t.inflight += 1
        self.background(self._quiet(t, recs))

    def background(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run ``work`` in a task that outlives the request that started it (``drain`` awaits
        it). A RecordFailed it ends with was logged when it was raised."""
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._background.discard(task)
        if task.cancelled():
            return
        exc = task.exception()  # retrieved, so asyncio does not report it again
        if exc is not None and not isinstance(exc, RecordFailed):
            log.error("recording in the background failed", exc_info=exc)

    async def _quiet(self, t: Trajectory, recs: list[dict[str, Any]]) -> None:
        try:
            await self.steps(t, recs)
        except RecordFailed:
            pass
        finally:
            t.call_landed()

    async def drain(self) -> None:
        """Shutdown: await the work in the background (the steps of cancelled calls, and the
        end records that wait for them)."""
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
