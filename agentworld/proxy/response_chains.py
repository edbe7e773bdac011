"""Responses the proxy answered, by id, so a ``previous_response_id`` chain can be rebuilt for an
upstream that stores nothing (a chat-completions engine), and joined to its trajectory.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from agentworld.proxy.protocols import BadRequest

MAX_STORED_RESPONSES = 100_000


@dataclass(frozen=True)
class Stored:
    """One response the proxy answered: its trajectory, predecessor, own input and output items."""

    trajectory: str
    previous: str | None
    input: list[dict[str, Any]]
    output: list[dict[str, Any]]


class ResponseChains:
    """Responses by id, newest kept (a chain whose start was evicted cannot be rebuilt)."""

    def __init__(self, max_responses: int = MAX_STORED_RESPONSES) -> None:
        self.max_responses = max_responses
        self._by_id: OrderedDict[str, Stored] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_id)

    def put(self, response_id: str, stored: Stored) -> None:
        self._by_id[response_id] = stored
        self._by_id.move_to_end(response_id)
        while len(self._by_id) > self.max_responses:
            self._by_id.popitem(last=False)

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
                )
            seen.add(rid)
            parts.append(s.input + s.output)
            rid = s.previous
        return [item for part in reversed(parts) for item in part]
