"""Curation labels: an append-only, git-diffable overlay that never rewrites shards.

Files are ``labels/<author>/<YYYY-MM-DD>.jsonl``; each line sets (or, with
``null``, clears) fields on one target, ``step:<id>`` or ``trajectory:<id>``.
The winner per (target, field) is the entry with the greatest (time, author,
id), so the result does not depend on file order and two pools merged as a
union (git's ``merge=union``) agree.
"""

from __future__ import annotations

import math
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from agentworld import records
from agentworld.errors import CorruptDataError, RecordError
from agentworld.pool.layout import Layout

FIELDS = ("trainable", "quality", "tags", "note", "reward")
QUALITIES = ("good", "bad", "unsure")
_AUTHOR_RE = re.compile(r"[^A-Za-z0-9._@-]+")


def check_value(field: str, value: Any) -> Any:
    """Validate one label value (``None`` clears the field); return it normalised."""
    if value is None:
        return None
    if field == "trainable":
        if not isinstance(value, bool):
            raise RecordError(f"labels.{field}", "expected true or false")
    elif field == "quality":
        if value not in QUALITIES:
            raise RecordError(f"labels.{field}", f"must be one of {list(QUALITIES)}")
    elif field == "tags":
        if not isinstance(value, list) or not all(isinstance(t, str) and t for t in value):
            raise RecordError(f"labels.{field}", "expected a list of non-empty strings")
        value = sorted(set(value))
    elif field == "note":
        if not isinstance(value, str):
            raise RecordError(f"labels.{field}", "expected a string")
    elif field == "reward":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise RecordError(f"labels.{field}", "expected a number")
        if not math.isfinite(value):
            raise RecordError(f"labels.{field}", "must be finite")
        value = float(value)
    else:
        raise RecordError(f"labels.{field}", f"unknown label field; known: {list(FIELDS)}")
    return value


def check_target(target: str) -> str:
    kind, _, ident = target.partition(":")
    if kind not in ("step", "trajectory") or not ident:
        raise RecordError("target", f"expected 'step:<id>' or 'trajectory:<id>', got {target!r}")
    return target


def safe_author(author: str) -> str:
    """An author name usable as a directory name."""
    cleaned = _AUTHOR_RE.sub("_", author).strip("._") or "anonymous"
    return cleaned[:64]


@dataclass(frozen=True)
class LabelEntry:
    """One field's value on one target, with who set it and when."""

    target: str
    field: str
    value: Any
    author: str
    time: float
    id: str

    @property
    def key(self) -> tuple[float, str, str]:
        return (self.time, self.author, self.id)


def parse_label_file(path: Path, limit_bytes: int | None = None) -> Iterator[LabelEntry]:
    """Entries of one label file; a bad line raises CorruptDataError with its line number.

    ``limit_bytes`` reads only the file's first bytes: label files are append-only, so
    this replays the labels exactly as they were when the file had that size.
    """
    with open(path, "rb") as f:
        lines = f.read(limit_bytes).splitlines(keepends=True) if limit_bytes is not None else f
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                obj = orjson.loads(line)
                target = check_target(obj["target"])
                author, t, ident = str(obj["author"]), float(obj["time"]), str(obj["id"])
                fields = obj["set"]
                if not isinstance(fields, dict):
                    raise ValueError("'set' must be an object")
                for field, value in fields.items():
                    yield LabelEntry(target, field, check_value(field, value), author, t, ident)
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, RecordError) as exc:
                raise CorruptDataError(f"{path}:{n}", f"bad label line: {exc}") from None


class Labels:
    """Reads the effective labels and appends new ones."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self._lock = threading.Lock()

    def files(self) -> list[Path]:
        if not self.layout.labels.is_dir():
            return []
        return sorted(self.layout.labels.glob("*/*.jsonl"))

    def entries(self, upto: Mapping[str, int] | None = None) -> Iterator[LabelEntry]:
        """Every entry; ``upto`` (file path relative to the pool -> size in bytes) pins a snapshot."""
        if upto is None:
            for path in self.files():
                yield from parse_label_file(path)
            return
        for rel, size in sorted(upto.items()):
            yield from parse_label_file(self.layout.root / rel, limit_bytes=size)

    def snapshot(self) -> dict[str, int]:
        """Label files and their current sizes: with ``effective(upto=...)``, a replayable view."""
        return {str(p.relative_to(self.layout.root)): p.stat().st_size for p in self.files()}

    def effective(self, upto: Mapping[str, int] | None = None) -> dict[str, dict[str, LabelEntry]]:
        """target -> field -> winning entry (cleared fields omitted)."""
        best: dict[tuple[str, str], LabelEntry] = {}
        for e in self.entries(upto):
            k = (e.target, e.field)
            cur = best.get(k)
            if cur is None or e.key > cur.key:
                best[k] = e
        out: dict[str, dict[str, LabelEntry]] = {}
        for (target, field), e in best.items():
            if e.value is not None:
                out.setdefault(target, {})[field] = e
        return out

    def set(
        self,
        targets: Iterable[str],
        fields: Mapping[str, Any],
        *,
        author: str,
        at: float | None = None,
    ) -> int:
        """Append one entry per target setting ``fields``; returns how many were written."""
        clean = {f: check_value(f, v) for f, v in fields.items()}
        if not clean:
            raise RecordError("labels", "no label fields given")
        now = time.time() if at is None else at
        day = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%d")
        d = self.layout.labels / safe_author(author)
        d.mkdir(parents=True, exist_ok=True)
        lines = []
        for target in targets:
            entry = {
                "author": author,
                "id": records.new_id("lb"),
                "set": clean,
                "target": check_target(target),
                "time": now,
            }
            lines.append(orjson.dumps(entry, option=orjson.OPT_SORT_KEYS) + b"\n")
        if not lines:
            return 0
        with self._lock:
            fd = os.open(d / f"{day}.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, b"".join(lines))
                os.fsync(fd)
            finally:
                os.close(fd)
        return len(lines)


def apply_labels(
    step_or_traj_labels: Mapping[str, LabelEntry] | None,
    trajectory_labels: Mapping[str, LabelEntry] | None,
) -> dict[str, Any]:
    """Effective label values for a step: its own labels win over its trajectory's."""
    out: dict[str, Any] = {}
    for src in (trajectory_labels, step_or_traj_labels):
        if src:
            out.update({f: e.value for f, e in src.items()})
    return out
