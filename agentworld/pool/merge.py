"""Merge another pool into this one: the union of sealed shards and label lines.

Shards are named by their hash, so a shard already present is never copied
twice, and every copied shard is checked on the way in as ``fsck`` would: its
bytes against its name, then every line as a record. Before anything is copied,
their records are checked against this pool's (merge_check.py): a trajectory
one pool holds as an `aw pool import` of the other's is already here (theirs
left out, named), and two different records under one id otherwise stop the
merge before it writes anything.
Label files (and superseded.txt) merge as a union of lines, exactly what
git's ``merge=union`` does, so merging by hand and merging clones with
``git merge`` give the same pool; a label line that is not valid is named and
left out, never spread. ``MANIFEST`` (in a pool that keeps one) and `aw tui`'s
``filters.toml`` merge the same way; shards the other pool's MANIFEST lists but
that were never fetched there cannot be copied, and are counted. Safe while
writers run on either side: copies land
under a temporary name and are renamed into place; label lines are appended
as ``Labels.set`` appends them (the file's lock, one write).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from agentworld.errors import CorruptDataError, PoolError, RecordError
from agentworld.plural import plural
from agentworld.pool.index import Index
from agentworld.pool.labels import Labels, append_label_lines, parse_label_line
from agentworld.pool.layout import Layout, check_version
from agentworld.pool.manifest import check_manifest, manifest_file
from agentworld.pool.merge_check import MergePlan, plan_merge
from agentworld.pool.shards import copy_shard, iter_shard_lines, write_shard

MAX_CLASHES_SHOWN = 20  # clashing records named in the error; the rest counted
MAX_ALREADY_HERE_KEPT = 20  # trajectories already here named in the report

_SAVED = re.compile(rb"^\s*[A-Za-z0-9_-]{1,64}\s*=")  # one saved filter's line (filters.toml)


@dataclass
class MergeReport:
    shards_copied: int = 0
    shards_present: int = 0
    bytes_copied: int = 0
    label_files: int = 0
    label_lines_added: int = 0
    # "labels/<author>/<day>.jsonl:N: why" of the other pool's lines not merged: bad ones
    # would make every command on this pool fail (its readers refuse a bad label line)
    label_lines_refused: list[str] = field(default_factory=list)
    superseded_added: int = 0
    journals_skipped: list[str] = field(default_factory=list)
    # shards its MANIFEST lists that were not there (a clone that did not fetch them);
    # ``manifest_lines_added``: listed here too (this pool has a MANIFEST), to fetch later
    shards_unfetched: int = 0
    manifest_lines_added: int = 0
    filters_added: int = 0  # saved filters (`aw tui`) of names new here
    # shards that failed fsck's checks there ("path: why"): not copied, the rest merged
    shards_refused: list[str] = field(default_factory=list)
    # trajectories both pools hold, one of them as an `aw pool import` of the other's (this
    # pool exported, the file imported there): already here, so this pool's copy is kept
    # and their ``records_left_out`` are not merged; ``already_here`` names the first few
    trajectories_already_here: int = 0
    records_left_out: int = 0
    already_here: list[str] = field(default_factory=list)
    # shards there that held some of those: the rest of their records, written as a new shard
    shards_rewritten: int = 0


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


def union_label_lines(src: Path, dst: Path, refused: list[str], name: str) -> int:
    """Append to label file ``dst`` the valid lines of ``src`` it lacks; returns how many.

    A line ``src``'s own readers would refuse is left out and named in ``refused``, and
    its torn last line (no newline: an append that never finished) is not data; the
    append is ``Labels.set``'s (the lock, the target's torn tail cut first).
    """
    lines = src.read_bytes().split(b"\n")
    lines.pop()  # b"" after the last newline, or a torn append: not data either way
    have: set[bytes] = set()
    if dst.exists():
        # Not its torn last line: the append below cuts it, so a line of ``src`` equal to
        # it (an append that died before its newline) must be appended again.
        have = set(dst.read_bytes().split(b"\n")[:-1])
    missing: dict[bytes, None] = {}
    for n, line in enumerate(lines, 1):
        if not line.strip() or line in have:
            continue
        try:
            parse_label_line(line)
        except (orjson.JSONDecodeError, TypeError, ValueError, RecordError) as exc:
            refused.append(f"{name}:{n}: bad label line: {exc}")
            continue
        missing[line] = None
    if missing:
        append_label_lines(dst, [line + b"\n" for line in missing])
    return len(missing)


def merge_pools(
    dst: Layout, src_root: Path, *, index: Index | None = None, check_records: bool = True
) -> MergeReport:
    """Bring every sealed shard and label line of the pool at ``src_root`` into ``dst``.

    The other pool is only read (its dead writers are not recovered); records
    still in its journals (unsealed: live writers, or dead ones not yet recovered) are
    reported, not merged: seal them there first. Their records are first checked
    against ``dst``'s through ``index`` (``dst``'s; opened here when not given): PoolError
    names the records that clash, and nothing is written. ``check_records`` False copies
    shards unchecked, for a caller whose records cannot share an id with ``dst``'s.
    """
    src = Layout(Path(src_root))
    check_version(src)
    check_version(dst)
    if src.root.resolve() == dst.root.resolve():
        raise PoolError(f"{src.root}: cannot merge a pool into itself")
    report = MergeReport()
    if manifest_file(src).exists():  # read first: a bad one stops the merge before a copy
        try:
            report.shards_unfetched = len(check_manifest(src, verify=False).missing)
        except CorruptDataError as exc:
            raise PoolError(f"{exc}; nothing was merged") from None
    plan = _plan(dst, src, index) if check_records else MergePlan()
    if plan.clashes:
        raise _clash_error(src, plan.clashes)
    report.trajectories_already_here = len(plan.left_out)
    report.records_left_out = sum(plan.left_out.values())
    report.already_here = sorted(plan.left_out)[:MAX_ALREADY_HERE_KEPT]
    for path in src.shard_paths():
        if path in plan.skip:
            continue
        if path in plan.drop:
            try:
                kept = _kept_lines(path, plan.drop[path])
            except CorruptDataError as exc:  # refused whole, as copy_shard refuses it
                report.shards_refused.append(str(exc))
                continue
            if kept:
                write_shard(dst, kept)
                report.shards_rewritten += 1
            continue
        try:
            n = copy_shard(path, dst, lines_checked=path in plan.checked)
        except CorruptDataError as exc:  # refused, named; the good shards still come
            report.shards_refused.append(str(exc))
            continue
        if n:
            report.shards_copied += 1
            report.bytes_copied += n
        else:
            report.shards_present += 1
    if src.labels.is_dir():
        for path in sorted(src.labels.glob("*/*.jsonl")):
            rel = path.relative_to(src.labels)
            refused = report.label_lines_refused
            added = union_label_lines(path, dst.labels / rel, refused, f"labels/{rel}")
            report.label_files += 1
            report.label_lines_added += added
    if src.superseded.exists():
        report.superseded_added = union_lines(src.superseded, dst.superseded)
    report.journals_skipped = [p.name for p in src.journal_paths()]
    if manifest_file(src).exists() and manifest_file(dst).exists():
        # as git's union merge would: what it lists and lacks can be fetched here later
        report.manifest_lines_added = union_lines(manifest_file(src), manifest_file(dst))
    if src.filters.exists():
        report.filters_added = _merge_filters(src.filters, dst.filters)
    return report


def _kept_lines(path: Path, drop: set[int]) -> list[bytes]:
    """The lines of shard ``path`` (checked by the plan) but those numbered in ``drop``."""
    try:
        return [line for n, line in enumerate(iter_shard_lines(path), 1) if n not in drop]
    except CorruptDataError as exc:  # changed since the plan read it
        raise CorruptDataError(exc.path, f"{exc.problem}; not copied") from None


def _plan(dst: Layout, src: Layout, index: Index | None) -> MergePlan:
    if index is not None:
        index.refresh(log_corrupt=False)  # fsck names this pool's corrupt shards
        return plan_merge(dst, src, index)
    own = Index(dst, Labels(dst))
    try:
        own.refresh(log_corrupt=False)
        return plan_merge(dst, src, own)
    finally:
        own.close()


def _clash_error(src: Layout, clashes: list[str]) -> PoolError:
    shown = clashes[:MAX_CLASHES_SHOWN]
    more = len(clashes) - len(shown)
    return PoolError(
        f"{src.root}: {plural(len(clashes), 'record')} there clash with this pool's, and "
        "neither pool holds them as an `aw pool import` of the other's, so neither copy "
        "can be kept for you; nothing was merged (`aw pool show ID`, here and with --pool "
        "there, shows both):\n  " + "\n  ".join(shown) + (f"\n  … and {more} more" if more else "")
    )


def _merge_filters(src: Path, dst: Path) -> int:
    """Union the saved filters' lines as git's union merge does (``aw init`` sets it for
    ``filters.toml``): names new here are added; a name both saved differently is kept
    twice, which `aw tui` names as the line to delete. Returns the filters added."""
    before = _saved_lines(dst)
    union_lines(src, dst)
    return len(_saved_lines(dst) - before)


def _saved_lines(path: Path) -> set[bytes]:
    if not path.exists():
        return set()
    return {line for line in path.read_bytes().splitlines() if _SAVED.match(line)}
