"""Curation labels: an append-only, git-diffable overlay that never rewrites shards.

Files are ``labels/<author>/<YYYY-MM-DD>.jsonl``; each line sets (or, with
``null``, clears) fields on one target, ``step:<id>`` or ``trajectory:<id>``.
The winner per (target, field) is the entry with the greatest (time, author,
id), so the result does not depend on file order and two pools merged as a
union (git's ``merge=union``) agree.
"""

from __future__ import annotations

import fcntl
import logging
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

log = logging.getLogger(__name__)


def check_value(field: str, value: Any) -> Any:
    """Validate one label value (``None`` clears the field); return it normalised."""
    if field not in FIELDS:
        raise RecordError(f"labels.{field}", f"unknown label field; known: {list(FIELDS)}")
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
        for t in value:
            _check_utf8(t, f"labels.{field}")
        value = sorted(set(value))
    elif field == "note":
        if not isinstance(value, str):
            raise RecordError(f"labels.{field}", "expected a string")
        _check_utf8(value, f"labels.{field}")
    elif field == "reward":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise RecordError(f"labels.{field}", "expected a number")
        if not math.isfinite(value):
            raise RecordError(f"labels.{field}", "must be finite")
        value = float(value)
    else:
        raise RecordError(f"labels.{field}", f"unknown label field; known: {list(FIELDS)}")
    return value


def _check_utf8(text: str, path: str) -> None:
    """RecordError unless ``text`` is UTF-8 text: a command-line argument with a byte that
    is not (``--note "$(printf 'a\\xffb')"``) arrives holding a lone surrogate."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise RecordError(path, "not valid UTF-8 text (a byte that is not UTF-8)") from None


def label_text(fields: Mapping[str, Any]) -> str:
    """Label fields as people write them: ``trainable=false quality=good tags=a,b``
    (a cleared field is ``note=(cleared)``), for the CLI and the TUI alike."""

    def value(v: Any) -> str:
        if v is None:
            return "(cleared)"
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, list | tuple):
            return ",".join(map(str, v))
        if isinstance(v, float):
            return f"{v:g}"
        return str(v)

    return " ".join(f"{k}={value(v)}" for k, v in fields.items())


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


def parse_label_line(line: bytes) -> list[LabelEntry]:
    """The entries of one label line; raises ValueError (or RecordError) saying what is wrong."""
    obj = orjson.loads(line)
    if not isinstance(obj, dict):
        raise ValueError("a label line is a JSON object")
    missing = [k for k in ("target", "author", "time", "id", "set") if k not in obj]
    if missing:
        raise ValueError(f"missing {missing[0]!r}")
    target = check_target(obj["target"])
    author, ident, t = obj["author"], obj["id"], obj["time"]
    if not isinstance(author, str) or not isinstance(ident, str):
        raise ValueError("'author' and 'id' must be strings")
    if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t):
        raise ValueError("'time' must be a finite number (unix seconds)")
    fields = obj["set"]
    if not isinstance(fields, dict):
        raise ValueError("'set' must be an object")
    return [
        LabelEntry(target, field, check_value(field, value), author, float(t), ident)
        for field, value in fields.items()
    ]


def parse_label_file(path: Path, limit_bytes: int | None = None) -> Iterator[LabelEntry]:
    """Entries of one label file; a bad line raises CorruptDataError with its line number.

    ``limit_bytes`` reads only the file's first bytes: label files are append-only, so
    this replays the labels exactly as they were when the file had that size.
    """
    with open(path, "rb") as f:
        lines: Iterable[bytes] = f
        if limit_bytes is not None:
            # At "\n" only, as iterating the file splits (splitlines also splits at "\r",
            # which JSON may hold between tokens): a snapshot reads what a full read does.
            *whole, tail = f.read(limit_bytes).split(b"\n")
            lines = [line + b"\n" for line in whole] + [tail]
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            if not line.endswith(b"\n"):
                break  # a torn append (crash mid-write) was never acknowledged: not data
            try:
                entries = parse_label_line(line)
            except (orjson.JSONDecodeError, TypeError, ValueError, RecordError) as exc:
                raise BadLabelLineError(path, n, str(exc)) from None
            yield from entries


class BadLabelLineError(CorruptDataError):
    """A complete label line that does not parse: readers refuse the pool until a person
    removes or fixes it (which line wins cannot be known without it)."""

    def __init__(self, path: Path, line: int, problem: str) -> None:
        self.file = path
        self.line = line
        super().__init__(
            f"{path}:{line}",
            f"bad label line: {problem}; remove or fix that line (commands that read "
            "labels stop here until then)",
        )


def label_file_problems(path: Path) -> tuple[list[tuple[int, str]], tuple[int, str] | None]:
    """(line number, problem) for every bad line of a label file (fsck's view of it), and
    its torn last line if any: a crashed append, ignored by readers, not a problem."""
    out = []
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    torn = lines.pop()  # b"" when the file ends with a newline, as it should
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            parse_label_line(line)
        except (orjson.JSONDecodeError, TypeError, ValueError, RecordError) as exc:
            out.append((n, f"bad label line: {exc}"))
    if torn:
        why = (
            "last line has no newline: a torn append, ignored by readers (the next append cuts it)"
        )
        return out, (len(lines) + 1, why)
    return out, None


class Labels:
    """Reads the effective labels and appends new ones."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self._lock = threading.Lock()
        self._last_time = 0.0

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
        if at is None:
            # Successive labels from this process must order after each other even
            # within one clock tick, or an undo could lose to the label it undoes.
            now = max(now, self._last_time + 1e-6)
            self._last_time = now
        day = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%d")
        _check_utf8(author, "labels.author")  # before its folder is made
        d = self.layout.labels / safe_author(author)
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
        d.mkdir(parents=True, exist_ok=True)  # once every line is made: no empty folder
        written = len(lines)
        with self._lock:
            # Appenders in other processes take the same lock, so a line without its
            # newline there is a crashed append: cut, as a journal's torn tail is cut,
            # so it never fuses with ours.
            append_label_lines(d / f"{day}.jsonl", lines)
        return written


def append_label_lines(path: Path, lines: list[bytes]) -> None:
    """Append whole label lines (each ending in a newline) to ``path`` as ``Labels.set``
    does: under the file's lock, a torn last line cut first, one write, fsynced."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        _cut_torn_tail(fd)
        os.write(fd, b"".join(lines))
        os.fsync(fd)
    finally:
        os.close(fd)


_TAIL_PIECE = 1 << 20


def _cut_torn_tail(fd: int) -> None:
    """Cut a last line without its newline back to the newline before it, however long it
    is (a note may be megabytes): left in place, the next line would fuse with it into one
    that does not parse, and readers refuse the whole file."""
    size = os.fstat(fd).st_size
    if not size or os.pread(fd, 1, size - 1) == b"\n":
        return
    keep, end = 0, size
    while end > 0:
        start = max(0, end - _TAIL_PIECE)
        cut = os.pread(fd, end - start, start).rfind(b"\n")
        if cut >= 0:
            keep = start + cut + 1
            break
        end = start
    log.warning("labels: cutting a torn last line (%d bytes)", size - keep)
    os.ftruncate(fd, keep)


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
