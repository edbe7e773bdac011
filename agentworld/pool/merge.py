"""Merge another pool into this one: the union of sealed shards and label lines.

Shards are named by their hash, so a shard already present is never copied
twice, and every copied byte is re-hashed against its name on the way in.
Label files (and superseded.txt) merge as a union of lines, exactly what
git's ``merge=union`` does, so merging by hand and merging clones with
``git merge`` give the same pool. Safe while writers run on either side:
copies land under a temporary name and are renamed into place; label lines
are appended with O_APPEND in one write, like ``Labels.set``.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from agentworld.errors import CorruptDataError, PoolError
from agentworld.pool.layout import Layout, check_version, fsync_dir, shard_digest


@dataclass
class MergeReport:
    shards_copied: int = 0
    shards_present: int = 0
    bytes_copied: int = 0
    label_files: int = 0
    label_lines_added: int = 0
    superseded_added: int = 0
    journals_skipped: list[str] = field(default_factory=list)


def copy_shard(src: Path, dst_layout: Layout) -> int:
    """Copy one shard into a pool, verifying its hash; returns bytes copied (0 when present)."""
    digest = shard_digest(src)
    final = dst_layout.shard_path(digest)
    if final.exists():
        return 0
    dst_layout.tmp.mkdir(parents=True, exist_ok=True)
    tmp = dst_layout.tmp / f"{digest}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    h = hashlib.sha256()
    size = 0
    try:
        with open(src, "rb") as fin, open(tmp, "wb") as fout:
            while chunk := fin.read(1 << 20):
                h.update(chunk)
                fout.write(chunk)
                size += len(chunk)
            fout.flush()
            os.fsync(fout.fileno())
        if h.hexdigest() != digest:
            raise CorruptDataError(str(src), "content hash does not match its name; not copied")
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(final.parent)
    return size


def union_lines(src: Path, dst: Path) -> int:
    """Append to ``dst`` the lines of ``src`` it lacks (in ``src`` order); returns how many."""
    have: set[bytes] = set()
    if dst.exists():
        have = {line.rstrip(b"\n") for line in dst.read_bytes().splitlines() if line.strip()}
    missing = [line for line in src.read_bytes().splitlines() if line.strip() and line not in have]
    missing = list(dict.fromkeys(missing))
    if not missing:
        return 0
    dst.parent.mkdir(parents=True, exist_ok=True)
    prefix = b""
    if dst.exists() and dst.stat().st_size:
        with open(dst, "rb") as f:
            f.seek(-1, os.SEEK_END)
            prefix = b"" if f.read(1) == b"\n" else b"\n"
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, prefix + b"".join(line + b"\n" for line in missing))
        os.fsync(fd)
    finally:
        os.close(fd)
    return len(missing)


def merge_pools(dst: Layout, src_root: Path) -> MergeReport:
    """Bring every sealed shard and label line of the pool at ``src_root`` into ``dst``.

    The other pool is only read (its dead writers are not recovered); records
    still in its live journals are reported, not merged: seal them there first.
    """
    src = Layout(Path(src_root))
    check_version(src)
    check_version(dst)
    if src.root.resolve() == dst.root.resolve():
        raise PoolError(f"{src.root}: cannot merge a pool into itself")
    report = MergeReport()
    for path in src.shard_paths():
        n = copy_shard(path, dst)
        if n:
            report.shards_copied += 1
            report.bytes_copied += n
        else:
            report.shards_present += 1
    if src.labels.is_dir():
        for path in sorted(src.labels.glob("*/*.jsonl")):
            added = union_lines(path, dst.labels / path.relative_to(src.labels))
            report.label_files += 1
            report.label_lines_added += added
    if src.superseded.exists():
        report.superseded_added = union_lines(src.superseded, dst.superseded)
    report.journals_skipped = [p.name for p in src.journal_paths()]
    return report
