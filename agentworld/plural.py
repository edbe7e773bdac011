"""Counts in words for people: ``1 shard``, ``2 shards``, ``12,400 trajectories``."""

from __future__ import annotations

from typing import Any

# Nouns whose plural is not the singular + "s".
_IRREGULAR = {"trajectory": "trajectories", "entry": "entries", "policy": "policies"}


def plural(n: Any, one: str, many: str | None = None) -> str:
    """``n`` and the noun in the number it takes: ``1 trajectory``, ``2 trajectories``,
    ``- trajectories`` (an unknown count, None); thousands separated; a float as ``.3g``."""
    many = many or _IRREGULAR.get(one) or one + "s"
    shown = f"{n:,}" if isinstance(n, int) else "-" if n is None else f"{n:.3g}"
    return f"{shown} {one if n == 1 else many}"
