"""Where a step leaves the proxy for the pool: what the proxy asks of a pool writer.

``agentworld.pool.writer.PoolWriter`` is the writer; tests and embedders may hand
``make_app`` another with these members (one that fails on demand, one that is
slow). Typed here so a reader, and mypy, can follow a step from the recorder
into the pool.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class StepWriter(Protocol):
    """What the proxy uses of a pool writer."""

    write_error: BaseException | None  # the last write's failure (None: it succeeded)
    stats: dict[str, int]  # appended, committed, lost... (shown in /aw/stats)

    async def append_async(self, record: Mapping[str, Any]) -> None:
        """Append one record; returns once it is as durable as the writer's mode promises."""
        ...

    @property
    def failing(self) -> bool:
        """Whether the last write failed (the proxy then refuses recording calls)."""
        ...

    def probe(self, size_bytes: int = ...) -> bool:
        """Whether a test write succeeds now (after a failure)."""
        ...

    def flush(self) -> None:
        """Make every record appended so far visible to readers."""
        ...

    def seal_now(self, timeout_s: float = ...) -> bool:
        """Seal the journal into a shard now and go on in a new one (False: it was empty)."""
        ...

    def close(self, *, seal: bool = ...) -> None:
        """Commit what is queued and seal the journal."""
        ...
