"""Responses the proxy answered, by id, so a ``previous_response_id`` chain can be rebuilt for an
upstream that stores nothing (a chat-completions engine), and joined to its trajectory.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import orjson

from agentworld.proxy.bad_request import BadRequest

MAX_STORED_RESPONSES = 100_000
MAX_STORED_BYTES = 512 * 1024 * 1024  # of items, as JSON: an agent resending long histories


@dataclass(frozen=True)
class Stored:
    """One response the proxy answered: its trajectory, predecessor, own input and output items."""

    trajectory: str
    previous: str | None
    input: list[dict[str, Any]]
    output: list[dict[str, Any]]
    size: int = field(default=0, compare=False)  # bytes of its items as JSON (set by ``put``)


class ResponseChains:
    """Responses by id, newest kept within a count and a size (a chain whose start was evicted
    cannot be rebuilt)."""

    def __init__(
        self, max_responses: int = MAX_STORED_RESPONSES, max_bytes: int = MAX_STORED_BYTES
    ) -> None:
        self.max_responses = max_responses
        self.max_bytes = max_bytes
        self.bytes = 0
        self._by_id: OrderedDict[str, Stored] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_id)

    def put(self, response_id: str, stored: Stored) -> None:
        size = len(orjson.dumps(stored.input)) + len(orjson.dumps(stored.output))
        stored = Stored(stored.trajectory, stored.previous, stored.input, stored.output, size)
        old = self._by_id.pop(response_id, None)
        if old is not None:
            self.bytes -= old.size
        self._by_id[response_id] = stored
        self.bytes += size
        while len(self._by_id) > self.max_responses or (
            self.bytes > self.max_bytes and len(self._by_id) > 1
        ):
            _, gone = self._by_id.popitem(last=False)
            self.bytes -= gone.size

    def get(self, response_id: str) -> Stored | None:
        return self._by_id.get(response_id)

    def history(self, response_id: str) -> list[dict[str, Any]]:
        """Every item of the conversation up to and including that response's output."""
        parts: list[list[dict[str, Any]]] = []
        rid: str | None = response_id
        seen = set()
        while rid is not None:
            s = self._by_id.get(rid)
            if s is None or rid in seen:
                raise BadRequest(
                    f"Previous response with id '{response_id}' not found"
                    + (
                        "" if rid == response_id else f" (its ancestor '{rid}' is no longer stored)"
                    ),
                    "previous_response_id",
                    code="previous_response_not_found",  # OpenAI's code: clients key on it
                )
            seen.add(rid)
            parts.append(s.input + s.output)
            rid = s.previous
        return [item for part in reversed(parts) for item in part]
