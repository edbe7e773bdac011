"""Journals: their framing, reading, sealing into shards, and recovery after a crash.

A journal is an append-only file owned by one writer, which holds an exclusive
``flock`` on it for its whole life. Each line is ``<crc32 as 8 hex> <json>\\n``,
so a torn or corrupt tail is detected and cut rather than read as data. A
journal whose lock can be taken belongs to a dead writer and is recovered:
its valid prefix is sealed into a shard and the journal is removed.

The writer that owns a journal (``writer.py``) compresses its records into the
future shard as they are committed, so closing only ends the frame. Before the
shard gets its name the journal gets a last line, the sealed trailer, naming
it: a crash after that point never seals the records a second time.
"""

from __future__ import annotations

import fcntl
import logging
import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentworld import records
from agentworld.errors import PoolFormatError
from agentworld.pool.layout import Layout, fsync_dir
from agentworld.pool.shards import verify_shard, write_shard

log = logging.getLogger(__name__)


_CRC_PIECE = 5 * 1024  # zlib.crc32 keeps the GIL for buffers up to this size


def crc32(data: bytes) -> int:
    """zlib's CRC-32 of ``data``, computed without giving up the GIL.

    zlib.crc32 (and binascii's) releases the GIL for buffers over 5 KB, and then
    waits out the switch interval of whichever thread took it to get it back: a
    committer checksumming 7 KB records next to a busy appender spent a second
    on what takes two milliseconds. In pieces of 5 KB it never lets go.
    """
    n = len(data)
    if n <= _CRC_PIECE:
        return zlib.crc32(data)
    view = memoryview(data)
    crc = 0
    for start in range(0, n, _CRC_PIECE):
        crc = zlib.crc32(view[start : start + _CRC_PIECE], crc)
    return crc


def frame(data: bytes) -> bytes:
    """One journal line for a canonical JSON record."""
    return b"%08x " % crc32(data) + data + b"\n"


TORN_JOURNAL_LINE = "incomplete last line"  # a write cut short: what a crash leaves


@dataclass
class JournalScan:
    """What a journal holds: its valid records and how many bytes of torn tail follow them."""

    path: Path
    lines: list[bytes]
    valid_bytes: int
    torn_bytes: int
    problem: str | None


def _checksum_field(line: bytes) -> int | None:
    """A line's CRC field, or None unless its first eight bytes are hex digits (``int``
    alone also takes spaces, a sign and underscores, which no writer puts there)."""
    field = line[:8]
    if not field.isalnum():
        return None
    try:
        return int(field, 16)
    except ValueError:
        return None


def scan_journal(path: Path, data: bytes | None = None) -> JournalScan:
    """Parse a journal, stopping at the first line that is incomplete or fails its checksum."""
    if data is None:
        data = path.read_bytes()
    lines: list[bytes] = []
    pos = 0
    problem = None
    n = len(data)
    while pos < n:
        end = data.find(b"\n", pos)
        if end < 0:
            problem = f"{TORN_JOURNAL_LINE} at byte {pos}"
            break
        line = data[pos:end]
        if len(line) < 10 or line[8:9] != b" ":
            problem = f"malformed line at byte {pos}"
            break
        body = line[9:]
        crc = _checksum_field(line)
        if crc is None:
            problem = f"malformed checksum at byte {pos}"
            break
        if crc32(body) != crc:
            problem = f"checksum mismatch at byte {pos}"
            break
        lines.append(body)
        pos = end + 1
    return JournalScan(path, lines, pos, n - pos, problem)


def _is_header(line: bytes) -> bool:
    try:
        obj = records.loads(line)
    except ValueError:
        return False
    return isinstance(obj, dict) and "journal" in obj and "kind" not in obj


# Version 2 added the sealed trailer; version 1 journals (no trailer) read the same.
JOURNAL_VERSION = 2
READABLE_JOURNAL_VERSIONS = (1, 2)

# Canonical JSON sorts keys and every record has "agent", so no record starts like this.
_TRAILER_PREFIX = b'{"records":'


def trailer_line(shard_digest: str, count: int) -> bytes:
    """The sealed trailer: the journal's ``count`` records are in shard ``shard_digest``."""
    return records.dumps({"records": count, "sealed": shard_digest})


def parse_trailer(line: bytes) -> dict[str, Any] | None:
    """The trailer's fields if ``line`` is a sealed trailer, else None."""
    if not line.startswith(_TRAILER_PREFIX):
        return None
    try:
        obj = records.loads(line)
    except ValueError:
        return None
    if (
        isinstance(obj, dict)
        and obj.keys() == {"records", "sealed"}
        and type(obj["records"]) is int
        and isinstance(obj["sealed"], str)
    ):
        return obj
    return None


def split_trailer(lines: list[bytes]) -> tuple[list[bytes], dict[str, Any] | None]:
    """Record lines without a sealed trailer at their end, and that trailer (or None)."""
    trailer = parse_trailer(lines[-1]) if lines else None
    return (lines[:-1], trailer) if trailer is not None else (lines, None)


def journal_version_problem(scan: JournalScan) -> str | None:
    """Why this build cannot read the journal's framing, or None when it can."""
    if not scan.lines or not _is_header(scan.lines[0]):
        return None
    version = records.loads(scan.lines[0]).get("journal")
    if version in READABLE_JOURNAL_VERSIONS and type(version) is int:
        return None
    return f"journal version {version!r} unknown to this build"


def parse_journal(scan: JournalScan) -> tuple[list[bytes], dict[str, Any] | None]:
    """The record lines of a scanned journal (without header and trailer) and its trailer.

    Raises PoolFormatError for a journal framing version this build does not know.
    """
    if not scan.lines or not _is_header(scan.lines[0]):
        return split_trailer(scan.lines)
    problem = journal_version_problem(scan)
    if problem is not None:
        raise PoolFormatError(
            f"{scan.path}: {problem} (it reads versions "
            f"{', '.join(map(str, READABLE_JOURNAL_VERSIONS))}); upgrade agentworld"
        )
    return split_trailer(scan.lines[1:])


def journal_records(scan: JournalScan) -> list[bytes]:
    """The record lines of a scanned journal (without its header and sealed trailer)."""
    return parse_journal(scan)[0]


# Fault injection for crash tests: called with the name of each point in sealing
# where a crash leaves a distinct state ("trailer-written", "shard-installed").
fault_hook: Callable[[str], None] | None = None


def fault_point(point: str) -> None:
    """Where tests kill the process to prove a crash there is safe (``fault_hook``)."""
    if fault_hook is not None:
        fault_hook(point)


@dataclass
class Recovery:
    """One journal recovered from a writer that is gone."""

    journal: str
    records: int
    torn_bytes: int
    problem: str | None
    shard: str | None
    kept: str | None = None  # damaged mid-way: where the whole journal was kept


def seal_journal(
    layout: Layout, path: Path, fd: int | None = None, *, log_cuts: bool = True
) -> Recovery:
    """Seal a journal's valid records into a shard, then remove the journal.

    The caller holds the journal's lock (``fd``), or the journal is known closed.
    ``log_cuts``: log a cut torn tail or a kept damaged journal (False when the caller
    reports the returned Recovery itself, as the CLI does: said once, not twice).
    """
    with open(path, "rb") as f:
        data = f.read()
    scan = scan_journal(path, data)
    body, trailer = parse_journal(scan)
    shard = None
    if trailer is not None:
        if trailer["records"] != len(body):
            raise PoolFormatError(
                f"{path}: sealed trailer counts {trailer['records']} records, "
                f"the journal holds {len(body)}"
            )
        shard = layout.shard_path(trailer["sealed"])
        # Crashed before the shard got its name, or the shard there is damaged: seal
        # again (one-shot, another name) rather than drop the only good copy.
        if not shard.exists() or verify_shard(shard) is not None:
            shard = None
    if shard is None and body:
        shard = write_shard(layout, body)
    kept = None
    if scan.torn_bytes:
        later = later_valid_lines(data, scan.valid_bytes)
        if later:  # damage, not a crash: keep what sealing cannot read before unlinking
            kept = keep_damaged(layout, path, data)
            (log.error if log_cuts else log.debug)(
                "%s: %s; %d later lines pass their checksum, so this is damage, not a torn "
                "write: the journal is kept whole as %s (not read as data; delete it once "
                "its records are recovered or not wanted)",
                path,
                scan.problem,
                later,
                kept,
            )
        else:
            (log.warning if log_cuts else log.debug)(
                "%s: cut %d torn bytes (%s)", path, scan.torn_bytes, scan.problem
            )
    os.unlink(path)
    fsync_dir(path.parent)
    return Recovery(
        path.name,
        len(body),
        scan.torn_bytes,
        scan.problem,
        shard.name if shard else None,
        str(kept) if kept else None,
    )


def later_valid_lines(data: bytes, start: int) -> int:
    """How many complete lines after the first bad one (at byte ``start``) pass their
    checksum. A crash tears only the end of the last write, so any means damage: records
    acknowledged after it that a seal from the valid prefix would drop."""
    count = 0
    pos = data.find(b"\n", start) + 1  # past the bad line
    while 0 < pos < len(data):
        end = data.find(b"\n", pos)
        if end < 0:
            break
        line = data[pos:end]
        if len(line) >= 10 and line[8:9] == b" " and _checksum_field(line) == crc32(line[9:]):
            count += 1
        pos = end + 1
    return count


def keep_damaged(layout: Layout, path: Path, data: bytes) -> Path:
    """A copy of a damaged journal under ``damaged/`` (durable before the journal goes)."""
    layout.damaged.mkdir(exist_ok=True)
    dest = layout.damaged / path.name
    n = 1
    while dest.exists():
        n += 1
        dest = layout.damaged / f"{path.name}.{n}"
    tmp = dest.with_name(f".{dest.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, dest)
    fsync_dir(layout.damaged)
    return dest


def journal_is_live(path: Path) -> bool:
    """Whether a writer holds ``path`` locked (it is alive and still appending to it)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def recover_orphans(layout: Layout, *, log_cuts: bool = True) -> list[Recovery]:
    """Seal every journal whose writer is gone (its lock is free). Safe with live writers.
    ``log_cuts``: as ``seal_journal``'s."""
    out = []
    for path in layout.journal_paths():
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue  # sealed by its writer or another recoverer meanwhile
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live writer owns it
            if not path.exists() or os.fstat(fd).st_ino != os.stat(path).st_ino:
                continue
            out.append(seal_journal(layout, path, fd, log_cuts=log_cuts))
        except FileNotFoundError:
            continue
        except PoolFormatError as exc:
            log.error("not recovering %s: %s", path, exc)  # a newer writer's: leave it be
        except OSError as exc:
            # A full disk, a read-only mount, a pool owned by another user: the journal
            # stays as it is (readers read it there) and sealing waits for a command that
            # can write. Reading the pool must not need to write to it.
            log.warning(
                "could not seal the dead writer's journal %s (left as it is): %s", path, exc
            )
        finally:
            os.close(fd)
    return out
