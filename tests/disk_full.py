"""A disk that fills up on demand: patches ``os.writev``/``os.write`` for files under one folder.

While ``full``, a gathered write takes the first ``take`` bytes (cutting a line) and
the next write fails with ENOSPC; after ``whole_calls`` successful gathered writes it
fails without writing anything. Files elsewhere (sockets, logs) are never touched.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


def no_space() -> OSError:
    return OSError(errno.ENOSPC, "No space left on device")


class DiskFull:
    def __init__(
        self,
        monkeypatch: pytest.MonkeyPatch,
        root: Path,
        *,
        take: int = 0,
        whole_calls: int = 0,
    ) -> None:
        self.root = str(Path(root).resolve())
        self.full = False
        self.take = take
        self.whole_calls = whole_calls
        self._calls = 0
        self._short = False
        self.real_writev: Callable[..., int] = os.writev
        self.real_write: Callable[..., int] = os.write
        monkeypatch.setattr(os, "writev", self._writev)
        monkeypatch.setattr(os, "write", self._write)

    def _ours(self, fd: int) -> bool:
        try:
            return os.readlink(f"/proc/self/fd/{fd}").startswith(self.root)
        except OSError:
            return False

    def _writev(self, fd: int, bufs: list[bytes]) -> int:
        if not self.full or not self._ours(fd):
            return self.real_writev(fd, bufs)
        self._calls += 1
        if self._calls <= self.whole_calls:
            return self.real_writev(fd, bufs)
        if self.take:
            self._short = True
            return self.real_write(fd, b"".join(bufs)[: self.take])
        raise no_space()

    def _write(self, fd: int, data: Any) -> int:
        if self.full and self._ours(fd) and (self._short or not self.take):
            raise no_space()
        return self.real_write(fd, data)
