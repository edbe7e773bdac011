"""The proxy's policy version, kept in its pool so that a restarted proxy stamps what it stamped.

Every step records the policy version that sampled it (``State.policy_version``,
read on every call). It lives in memory; an upstream that says it
(``X-AW-Policy-Version``: `aw serve`) stamps each answer anyway, but one that
does not (plain vLLM) leaves the trainer's last ``POST /aw/policy`` as the only
source. A proxy restarted there (a crash, a deploy) used to stamp 0 until the
trainer's next publish: steps sampled by version 7 recorded as version 0, and
trained on with the wrong policy lag.

So each change of the version is written to ``state/policy/`` in the pool (one small
JSON file per proxy, replaced atomically and fsynced, in a thread) and read back
at start-up; ``--policy-version`` (``ProxyConfig.policy_version``) still wins.
A change is rare (a trainer's publish, a reload seen in a header), so nothing is
added per call.

Why a file rather than the highest ``policy_version`` among the steps the proxy
wrote last: a publish followed by a restart before any call leaves no step that
says it; a trainer's catch-up takes the version back (``POST /aw/policy`` may go
down), which a maximum would undo; an answer sampled before a reload and landing
after it carries the older version; and reading the steps means the index at
every start, growing with the pool.

Proxies sharing a pool each take a name (``--instance``), as their open
trajectories do, and each keeps its own file: ``proxy@NAME.json``. Unnamed
proxies share ``proxy.json`` (as they share their trajectories): the last
version set wins.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson

from agentworld.errors import CorruptDataError
from agentworld.pool.layout import write_atomic

log = logging.getLogger("agentworld.proxy")

# How this process came by its version (``GET /aw/policy``'s ``source``); the last three
# are also what a file says set the version it holds (``set_by``).
DEFAULT = "default"  # nothing stored for this proxy: 0
RESTORED = "restored"  # read from its file at start-up
CONFIGURED = "--policy-version"  # ProxyConfig.policy_version
POSTED = "POST /aw/policy"
UPSTREAM = "X-AW-Policy-Version"

# A file name's byte limit is 255 on common file systems; a name percent-encoded past
# this is named by its hash instead (the file still holds the name itself).
_MAX_NAME_CHARS = 160


def policy_path(pool_root: Path, instance: str | None) -> Path:
    """The file holding the version of the proxy named ``instance`` (None: unnamed)."""
    folder = pool_root / "state" / "policy"
    if instance is None:
        return folder / "proxy.json"
    name = quote(instance, safe="")  # "/", "@", spaces, non-ASCII: %XX
    if len(name) > _MAX_NAME_CHARS:
        name = "sha256-" + hashlib.sha256(instance.encode()).hexdigest()[:32]
    return folder / f"proxy@{name}.json"


@dataclass(frozen=True)
class StoredPolicy:
    """What a policy file holds."""

    version: int
    set_by: str  # POSTED, UPSTREAM or CONFIGURED
    set_at: str  # UTC, ISO 8601
    proxy: str | None = None  # the instance name

    def as_json(self) -> dict[str, Any]:
        return {
            "policy_version": self.version,
            "set_by": self.set_by,
            "set_at": self.set_at,
            "proxy": self.proxy,
        }


_WAYS_OUT = "; fix or delete it, or start the proxy with --policy-version N"


def read_policy(path: Path, instance: str | None) -> StoredPolicy | None:
    """The version stored at ``path``; None when there is none yet. A file that cannot be
    read as one is an error naming it and the ways out, rather than a silent 0."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CorruptDataError(
            str(path), f"cannot read: {exc.strerror or exc}{_WAYS_OUT}"
        ) from None
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise CorruptDataError(str(path), f"not valid JSON ({exc}){_WAYS_OUT}") from None
    v = raw.get("policy_version") if isinstance(raw, dict) else None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        problem = f"policy_version: expected an integer >= 0, got {v!r}"
        raise CorruptDataError(str(path), problem + _WAYS_OUT)
    proxy = raw.get("proxy")
    if proxy is not None and proxy != instance:  # two long names hashed alike, or a copy
        problem = f"holds the version of proxy {proxy!r}, not of {instance!r}"
        raise CorruptDataError(str(path), problem + _WAYS_OUT)
    set_by, set_at = str(raw.get("set_by") or "?"), str(raw.get("set_at") or "?")
    return StoredPolicy(v, set_by, set_at, instance)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class PolicyKeeper:
    """One proxy's policy version as it was come by, and its copy in the pool.

    ``State`` holds the version the calls read and tells the keeper of each change
    (``changed``); ``save`` writes the latest change, one write at a time, off the
    event loop.
    """

    def __init__(
        self,
        path: Path,
        instance: str | None,
        version: int,
        source: str,
        *,
        restored: StoredPolicy | None = None,
    ) -> None:
        self.path = path
        self.instance = instance
        self.version = version
        self.source = source
        self.restored = restored  # what start-up read, when it read something
        # When the version was set (None: never, the default 0).
        self.set_at = restored.set_at if restored else None if source == DEFAULT else _now()
        self.save_error: str | None = None  # the last save's failure, until one succeeds
        self._saved: tuple[int, str, str] | None = None
        if restored is not None:
            self._saved = (restored.version, restored.set_by, restored.set_at)
        self._lock = asyncio.Lock()
        self._pending: set[asyncio.Task[bool]] = set()

    @classmethod
    def start(cls, pool_root: Path, instance: str | None, configured: int | None) -> PolicyKeeper:
        """The version a proxy starts with: ``configured`` when given, else the one its
        file holds, else 0."""
        path = policy_path(pool_root, instance)
        if configured is not None:
            return cls(path, instance, configured, CONFIGURED)
        stored = read_policy(path, instance)
        if stored is None:
            return cls(path, instance, 0, DEFAULT)
        return cls(path, instance, stored.version, RESTORED, restored=stored)

    def describe(self) -> str:
        """Where the version came from, for the start-up log."""
        if self.source == RESTORED:
            assert self.restored is not None
            return (
                f"policy version {self.version}, restored from {self.path}"
                f" (set by {self.restored.set_by} at {self.restored.set_at})"
            )
        if self.source == CONFIGURED:
            return f"policy version {self.version}, from {CONFIGURED} (kept in {self.path})"
        return f"policy version {self.version}: none stored yet ({self.path})"

    def as_json(self) -> dict[str, Any]:
        """``GET /aw/policy``'s account of the version (beside ``policy_version``)."""
        return {
            "source": self.source,
            "set_at": self.set_at,
            "file": str(self.path),
            "restored": self.restored.as_json() if self.restored is not None else None,
            "save_error": self.save_error,
        }

    def changed(self, version: int, source: str) -> None:
        """The version moved (``State``): remember how, for the next ``save``."""
        self.version, self.source, self.set_at = version, source, _now()

    async def save(self) -> bool:
        """Write the latest change to the pool; False (logged, and kept in ``save_error``)
        when it cannot be: the version still holds in memory, only a restart would lose it."""
        async with self._lock:  # one write at a time, each of the latest change: no reorder
            if self.source in (DEFAULT, RESTORED):
                return True  # nothing set in this process
            assert self.set_at is not None  # set with the version: changed(), or configured
            want = (self.version, self.source, self.set_at)
            if want == self._saved:
                return True
            stored = StoredPolicy(self.version, self.source, self.set_at, self.instance)
            try:
                await asyncio.to_thread(write_atomic, self.path, orjson.dumps(stored.as_json()))
            except OSError as exc:
                error = f"{self.path}: {exc.strerror or exc}"
                if error != self.save_error:
                    log.error(
                        "cannot keep policy version %d in the pool (%s): a restart would not"
                        " know it",
                        self.version,
                        error,
                    )
                self.save_error = error
                return False
            self._saved, self.save_error = want, None
            return True

    def save_soon(self) -> asyncio.Task[bool]:
        """``save`` as a task of its own: from code that cannot wait for it (a call's answer
        moving the version), or that must not cancel it (a handler whose client hangs up).
        ``close`` waits for it."""
        task = asyncio.get_running_loop().create_task(self.save())
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        return task

    async def close(self) -> None:
        """Wait for the saves under way (the app's shutdown)."""
        while self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
