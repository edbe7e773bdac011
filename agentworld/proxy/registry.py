"""Open trajectories: ids, step numbering, automatic threading, upstream affinity, idle timeout.

Only in-memory state lives here; every step is already in the pool, so after
a restart ``restore`` rebuilds this registry from the pool index.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import itertools
import logging
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from agentworld import records
from agentworld.proxy.normal_form import thread_form

log = logging.getLogger(__name__)

# How long an upstream URL that refused a connection is left out when another of its
# agent's URLs can take the call; after that, new calls try it again.
URL_COOLDOWN_S = 10.0

MAX_CLOSED_REMEMBERED = 100_000
MAX_STEP_IDS = 100_000  # per trajectory; beyond it rewards by index need the pool
PEER_SCAN = 64  # twins of one conversation looked through for the caller's own (find_thread)
# Conversation points (a threaded step's prompt, and its prompt and reply) remembered to tell
# where a new conversation branched off (``fork_point``): the most recent this many.
MAX_FORK_POINTS = 50_000


class UnknownTrajectory(LookupError):
    """No open trajectory has this id (``status`` says if it was closed)."""

    def __init__(self, trajectory: str, status: str | None = None) -> None:
        self.trajectory = trajectory
        self.status = status
        super().__init__(trajectory)


@dataclass
class Trajectory:
    """One open trajectory."""

    id: str
    agent: str
    group: str | None = None
    dataset: str | None = None
    split: str | None = None
    task: str | None = None
    metadata: dict[str, Any] | None = None
    seed: int | None = None  # each call's sampling seed derives from it (``seed_call``)
    threaded: bool = False  # started by automatic threading
    next_index: int = 0
    steps: int = 0  # step records written (choices count separately)
    reward: float | None = None
    slot: int | None = None  # which of the agent's upstream URLs serves it (prefix cache)
    last_active: float = field(default_factory=time.monotonic)
    inflight: int = 0
    policy_version: int = 0
    thread_keys: set[bytes] = field(default_factory=set)
    peer: Any = None  # the agent's address on its last threaded call (tells twins apart)
    spent_keys: tuple[bytes, ...] = ()  # taken by the last call (``resume_thread``, ``retract``)
    step_ids: dict[int, list[str]] = field(default_factory=dict)
    # Where a threaded conversation branched off another's step (``Registry.fork_point``).
    forked_from: dict[str, Any] | None = None
    end_written: bool = False  # its end record went to the writer: no step may follow it
    _landed: asyncio.Event | None = field(default=None, repr=False)  # wakes ``settled``

    def common(self) -> dict[str, Any]:
        """Fields every record of this trajectory carries."""
        return {
            "trajectory": self.id,
            "agent": self.agent,
            "group": self.group,
            "dataset": self.dataset,
            "split": self.split,
            "task": self.task,
        }

    def call_landed(self) -> None:
        """A call's steps are recorded (or it has none to record): one call fewer in flight."""
        self.inflight -= 1
        if not self.inflight and self._landed is not None:
            self._landed.set()

    async def settled(self) -> None:
        """Return once no call of this trajectory is in flight (its steps all recorded)."""
        while self.inflight:
            if self._landed is None or self._landed.is_set():
                self._landed = asyncio.Event()
            await self._landed.wait()


def _chain(prev: bytes, message: dict[str, Any]) -> bytes:
    # sha256 (cut to 128 bits): with the CPU's SHA extensions, twice blake2b's speed
    # on the ~80 KB a long conversation hashes each call.
    h = hashlib.sha256(prev)
    h.update(orjson.dumps(thread_form(message), option=orjson.OPT_SORT_KEYS))
    return h.digest()[:16]


@functools.lru_cache(maxsize=1024)
def _root_key(agent: str, group: str | None, task: str | None) -> bytes:
    return hashlib.sha256(orjson.dumps([agent, group, task])).digest()[:16]


def prefix_keys(
    agent: str,
    messages: Sequence[dict[str, Any]],
    group: str | None = None,
    task: str | None = None,
) -> list[bytes]:
    """keys[i] identifies the conversation messages[:i] of this agent, in this group and
    task when the calls name them: the same conversation in two groups (one task
    rolled out in two GRPO groups) never threads across them."""
    keys = [_root_key(agent, group, task)]
    for m in messages:
        keys.append(_chain(keys[-1], m))
    return keys


class Registry:
    """All open trajectories of one proxy.

    ``open`` is kept in the order of last activity (``touch``), oldest first, so
    the idle sweep reads only the trajectories it closes, and upstream affinity
    keeps a count per URL: no per-call or per-sweep work grows with the number
    of open trajectories (up to ``max_open``, 100,000 by default).
    """

    def __init__(self, *, max_open: int = 100_000, max_fork_points: int = MAX_FORK_POINTS) -> None:
        self.open: OrderedDict[str, Trajectory] = OrderedDict()  # least recently active first
        self.closed: OrderedDict[str, str] = OrderedDict()  # id -> end status
        # closed, their end records waiting for their calls in flight (``close``, ``ended``)
        self.ending: dict[str, Trajectory] = {}
        # continuation key -> the open trajectories that can continue there, in the order
        # they got there (a dict as an ordered set: taking or closing one is O(1) however
        # many twins, rollouts of one task that got the same answers, share a key)
        self.threads: dict[bytes, dict[str, None]] = {}
        self.max_open = max_open
        # conversation point key -> (trajectory, step index) of the step that reached it,
        # the most recent first to go (``remember``), kept after their trajectories close
        self.points: OrderedDict[bytes, tuple[str, int]] = OrderedDict()
        self.max_fork_points = max_fork_points
        self.done_count = 0
        self._rr = 0
        self._slot_load: dict[str, list[int]] = {}  # agent -> open trajectories per URL
        self._down: dict[tuple[str, int], float] = {}  # (agent, URL index) -> down until

    def __len__(self) -> int:
        return len(self.open)

    def create(self, agent: str, *, trajectory: str | None = None, **fields: Any) -> Trajectory:
        """Open a trajectory (id given by the caller, or a new one)."""
        tid = trajectory or records.new_id("tr")
        if tid in self.open:
            raise ValueError(f"trajectory {tid!r} is already open")
        if tid in self.closed:
            raise ValueError(f"trajectory {tid!r} already ended ({self.closed[tid]})")
        t = Trajectory(id=tid, agent=agent, **fields)
        self.open[tid] = t
        return t

    def touch(self, t: Trajectory) -> None:
        """A call started or ended on ``t``: it becomes the most recently active.

        Every change of ``last_active`` goes through here (the sweep relies on the order).
        """
        t.last_active = time.monotonic()
        if t.id in self.open:
            self.open.move_to_end(t.id)

    def get(self, tid: str) -> Trajectory:
        t = self.open.get(tid)
        if t is None:
            raise UnknownTrajectory(tid, self.closed.get(tid))
        return t

    def close(self, tid: str, status: str) -> Trajectory:
        """Remove an open trajectory: no call joins it any more. It is ``ending`` until the
        caller has written its end record (``ended``), after its calls in flight."""
        t = self.open.pop(tid)
        self.ending[tid] = t
        if t.slot is not None:
            self._slot_load[t.agent][t.slot] -= 1
        self._forget_keys(t)
        self.closed[tid] = status
        if len(self.closed) > MAX_CLOSED_REMEMBERED:
            self.closed.popitem(last=False)
        self.done_count += 1
        return t

    def ended(self, tid: str) -> None:
        """A closed trajectory's end record is written (or could not be): it is not ``ending``."""
        self.ending.pop(tid, None)

    def over_capacity(self) -> list[Trajectory]:
        """Least recently active trajectories beyond ``max_open``, no call in flight on them
        (to be closed as timeouts)."""
        extra = len(self.open) - self.max_open
        out: list[Trajectory] = []
        if extra <= 0:
            return out
        for t in self.open.values():
            if not t.inflight:
                out.append(t)
                if len(out) == extra:
                    break
        return out

    def idle(self, now: float, timeout_s: float) -> list[Trajectory]:
        """Trajectories with no call in flight and none for over ``timeout_s``."""
        out = []
        for t in self.open.values():
            if now - t.last_active <= timeout_s:
                break  # all later ones were active more recently
            if not t.inflight:  # a long call keeps its place from when it started
                out.append(t)
        return out

    # -- automatic threading ----------------------------------------------------------

    def find_thread(self, keys: Sequence[bytes], peer: Any = None) -> Trajectory | None:
        """The open trajectory whose last request + response the messages continue (longest).

        Where several do (identical conversations, as a group's rollouts of one task
        can be), the one whose last call came from ``peer`` (the same agent
        connection; looked for among the first ``PEER_SCAN`` only, so a crowd of
        identical calls stays cheap), else the one that got there first. Each is
        taken once (``continue_thread`` spends its keys), so every twin
        conversation keeps a trajectory of its own.
        """
        for i in range(len(keys) - 1, 0, -1):  # the whole request too: a failed one's retry
            tids = self.threads.get(keys[i])
            if not tids:
                continue
            if peer is not None and len(tids) > 1:
                for tid in itertools.islice(tids, PEER_SCAN):
                    t = self.open[tid]
                    if t.peer == peer:
                        return t
            return self.open[next(iter(tids))]
        return None

    def remember(self, key: bytes, t: Trajectory, index: int) -> None:
        """Step ``index`` of ``t`` sent (or was answered up to) the conversation point ``key``."""
        points = self.points
        if key in points:  # reached again (twins, a retry): the latest step, the newest point
            points.move_to_end(key)
        points[key] = (t.id, index)
        if len(points) > self.max_fork_points:
            points.popitem(last=False)

    def fork_point(self, keys: Sequence[bytes]) -> dict[str, Any] | None:
        """Where a conversation that continues no open trajectory branched off: the latest step
        whose prompt, or prompt and reply, is the longest proper prefix of its messages (an
        earlier point of a session, a point another call already took, or one of a closed
        trajectory), as ``{trajectory, step, messages}`` (the messages they share). The
        whole request is not looked for: an identical one is a twin or a retry, not a fork."""
        points = self.points
        for i in range(len(keys) - 2, 0, -1):
            hit = points.get(keys[i])
            if hit is not None:
                return {"trajectory": hit[0], "step": hit[1], "messages": i}
        return None

    def continue_thread(self, t: Trajectory) -> None:
        """A call goes on with the conversation: the old continuation points are spent (kept
        aside until it answers, for ``resume_thread``)."""
        spent = tuple(t.thread_keys)
        self._forget_keys(t)
        t.spent_keys = spent

    def resume_thread(self, t: Trajectory, prompt_key: bytes | None) -> None:
        """A threaded call got no answer (an upstream error, the agent gone): the
        conversation is where it was, so the same request sent again (an SDK's retry)
        finds this trajectory: by the points its last answer left, or, for its first
        call, by that call's own prompt (``prompt_key``)."""
        if t.id not in self.open or t.thread_keys:
            return
        keys = t.spent_keys or ((prompt_key,) if prompt_key is not None else ())
        t.spent_keys = ()
        for k in keys:
            self._register(t, k)

    def retract(self, t: Trajectory) -> None:
        """The answer that left continuation points never reached the agent (strict mode
        could not make its step durable, so the agent got a 503): they are dropped, and
        ``resume_thread`` (at the call's end) puts the conversation back where it was, for
        the agent's retry of the same request."""
        self._forget_keys(t)

    def _register(self, t: Trajectory, k: bytes) -> None:
        tids = self.threads.get(k)
        if tids is None:
            self.threads[k] = {t.id: None}
        else:
            tids[t.id] = None
        t.thread_keys.add(k)

    def _forget_keys(self, t: Trajectory) -> None:
        for k in t.thread_keys:
            tids = self.threads.get(k)
            if tids is not None:
                tids.pop(t.id, None)
                if not tids:
                    del self.threads[k]
        t.thread_keys.clear()

    def add_continuations(
        self,
        t: Trajectory,
        prompt_key: bytes,
        responses: Iterable[dict[str, Any]],
        index: int | None = None,
    ) -> None:
        """Register where this trajectory's conversation can continue (one per choice), after
        its step ``index`` (remembered for ``fork_point``)."""
        if t.id not in self.open:
            return
        # ``spent_keys`` stay until the call ends (``call_ended``): ``retract`` may need them.
        for msg in responses:
            k = _chain(prompt_key, msg)
            if k not in t.thread_keys:  # two choices with the same reply: one way on
                self._register(t, k)
                if index is not None:
                    self.remember(k, t, index)

    # -- upstream affinity ---------------------------------------------------------------

    def pick_slot(self, t: Trajectory, n_urls: int) -> int:
        """Give a trajectory the least-loaded of its agent's upstream URLs, for good: unless
        its URL is down (``mark_down``) and another is not, when it moves to one of those."""
        if t.slot is None or t.slot >= n_urls:
            self._assign(t, n_urls, self._healthy(t.agent, n_urls))
        elif self._down and (t.agent, t.slot) in self._down:
            healthy = self._healthy(t.agent, n_urls)  # all of them when every one is down
            if t.slot not in healthy:
                self._assign(t, n_urls, healthy)
        return t.slot  # type: ignore[return-value]

    def mark_down(self, agent: str, slot: int, for_s: float = URL_COOLDOWN_S) -> None:
        """An upstream URL refused a connection: new calls avoid it for ``for_s`` seconds."""
        self._down[(agent, slot)] = time.monotonic() + for_s

    def down(self) -> list[tuple[str, int, float]]:
        """(agent, URL index, seconds left) of the URLs left out now."""
        now = time.monotonic()
        return [(a, i, until - now) for (a, i), until in self._down.items() if until > now]

    def first_up(self, agent: str, n_urls: int) -> int:
        """The first of ``agent``'s URLs not marked down (the first when all are)."""
        return self._healthy(agent, n_urls)[0]

    def _healthy(self, agent: str, n_urls: int) -> list[int]:
        """The URLs of ``agent`` not marked down (all of them when every one is)."""
        if not self._down:
            return list(range(n_urls))
        now = time.monotonic()
        for key in [k for k, until in self._down.items() if until <= now]:
            del self._down[key]  # back in service: tried again
        up = [i for i in range(n_urls) if (agent, i) not in self._down]
        return up or list(range(n_urls))

    def _assign(self, t: Trajectory, n_urls: int, among: list[int]) -> None:
        counts = self._slot_load.setdefault(t.agent, [])
        if len(counts) < n_urls:
            counts.extend([0] * (n_urls - len(counts)))
        counted = t.id in self.open  # open trajectories count, until ``close``
        if t.slot is not None and counted:  # it moves (or its agent has fewer URLs now)
            counts[t.slot] -= 1
        if len(among) == 1:
            t.slot = among[0]
        else:
            low = min(counts[i] for i in among)
            candidates = [i for i in among if counts[i] == low]
            self._rr += 1
            t.slot = candidates[self._rr % len(candidates)]
        if counted:
            counts[t.slot] += 1


def _read(got: dict[str, Any], tid: str, row: dict[str, Any]) -> dict[str, Any] | None:
    rec = got.get(row["id"])
    if isinstance(rec, Exception):  # the index is a cache; a bad row must not stop the proxy
        log.warning("restore %s: cannot read step %s: %s", tid, row.get("id"), rec)
        return None
    return rec


def _trajectory_seed(rec: dict[str, Any] | None) -> int | None:
    """The seed a trajectory was opened with, as its last step recorded it (``seed_call``)."""
    seed = ((rec or {}).get("metadata") or {}).get("trajectory_seed")
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else None


def restore(
    registry: Registry, pool: Any, *, limit: int = 100_000, instance: str | None = None
) -> int:
    """Re-open the pool's open trajectories (no end record) after a restart.

    Steps are numbered on from the last one stored, a seeded trajectory keeps its
    seed; threaded trajectories get their continuation points back from their last step. Only the trajectories
    whose last step this proxy ``instance`` served are taken (its name is in the
    step's ``metadata.proxy``; an unnamed proxy's steps carry none): another
    proxy sharing the pool goes on serving, and timing out, its own. A
    trajectory with a step in a journal a live writer holds is that writer's,
    and is left without reading its steps: the time to restart does not grow
    with what other proxies on the pool are writing. The last steps are read in
    one pass, each shard or journal once.
    """
    from agentworld.pool import Selection

    idx = pool.index()
    rows = idx.trajectories(Selection(status=("open",)), limit=limit)
    others = idx.trajectories_in(sorted(pool.live_journals()))
    rows = [row for row in rows if row["id"] not in registry.open and row["id"] not in others]
    step_rows = idx.steps_of([row["id"] for row in rows])
    todo = [(row, step_rows[row["id"]]) for row in rows if step_rows.get(row["id"])]
    got = pool.read_steps([steps[-1] for _, steps in todo])
    threaded: list[tuple[Trajectory, list[dict[str, Any]], dict[str, Any]]] = []
    n = 0
    for row, steps in todo:
        tid = row["id"]
        last = steps[-1]
        rec = _read(got, tid, last)
        if rec is None:
            if instance is not None:  # whose it is cannot be told: leave it to its owner
                continue
        elif (rec.get("metadata") or {}).get("proxy") != instance:
            continue
        t = Trajectory(
            id=tid,
            agent=row.get("agent") or "default",
            group=row.get("group"),
            dataset=row.get("dataset"),
            split=row.get("split"),
            task=row.get("task"),
            next_index=max(s["idx"] for s in steps) + 1,
            steps=len(steps),
            policy_version=row.get("policy_max") or 0,
            seed=_trajectory_seed(rec),
        )
        for s in steps:
            t.step_ids.setdefault(s["idx"], []).append(s["id"])
        registry.open[tid] = t
        n += 1
        if rec is not None and (rec.get("metadata") or {}).get("threading") == "auto":
            t.threaded = True
            if (rec.get("request") or {}).get("messages"):
                threaded.append((t, steps, rec))
    # The other choices of each threaded trajectory's last call, again in one pass.
    others = [s for _, steps, _ in threaded for s in steps[:-1] if s["idx"] == steps[-1]["idx"]]
    got_others = pool.read_steps(others) if others else {}
    for t, steps, rec in threaded:
        last = steps[-1]
        keys = prefix_keys(t.agent, rec["request"]["messages"], t.group, t.task)
        last_steps = [  # the choices of the last call (``rec`` is one of them)
            rec if s is last else _read(got_others, t.id, s)
            for s in steps
            if s["idx"] == last["idx"]
        ]
        responses = [
            s["response"]["message"]
            for s in last_steps
            if s is not None
            and s.get("status") == "ok"
            and (s.get("response") or {}).get("message")
        ]
        if responses:
            registry.add_continuations(t, keys[-1], responses, last["idx"])
        else:  # the last call got no answer: its retry goes on here (resume_thread)
            registry.resume_thread(t, keys[-1])
    return n
