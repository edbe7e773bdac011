"""A stand-in for ``sys.stderr`` that says it is a terminal, or not: what decides
whether a command draws progress bars."""

from __future__ import annotations

from typing import Any


class Stderr:
    """``stream`` with ``isatty()`` answering ``tty``."""

    def __init__(self, stream: Any, tty: bool) -> None:
        self._stream, self._tty = stream, tty

    def isatty(self) -> bool:
        return self._tty

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
