"""What `aw pool merge` may bring of another pool's shards: their records checked against this pool's first.

Two pools can hold different records under one id. The common way there: this
pool is exported (ATIF, say), the file imported into another pool, which keeps
the trajectory and step ids but not every field (`aw pool import` stamps
``protocol = "import"`` and drops what the format has no place for), and that
pool is merged back. Its shards copied as they are hold a second record under
each id and a second end record for each trajectory: readers keep whichever
comes first in pool order, and `aw pool fsck` fails. So before anything is
copied, each record of the shards to copy whose id or trajectory this pool
holds is compared with what is here:

- the same bytes: nothing to decide (the shard still comes whole, as `git
  merge` would bring it; fsck names the overlap as a warning and compaction
  folds it);
- different, and one of the two pools holds that trajectory as an `aw pool
  import` (of the other's export): already here, as `aw pool import` itself
  counts a trajectory the pool holds. This pool's copy stays and theirs is left
  out; the rest of a shard that held some of it is written here as a new shard;
- different otherwise (two records under one id, a second end record, more
  steps than the end record counts): a clash. Neither copy is the one to keep
  for the user, so the merge refuses before it writes anything, naming them.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentworld.errors import CorruptDataError
from agentworld.pool.index import Index
from agentworld.pool.layout import (
    Layout,
    final_replacement,
    hidden_shards,
    read_superseded,
    shard_digest,
)
from agentworld.pool.reader import RecordFetcher
from agentworld.pool.shards import shard_records

_CHUNK = 500  # SQLite's limit on bound parameters is 999 on old builds


@dataclass
class _Theirs:
    """One record of the other pool whose id or trajectory this pool holds."""

    id: str
    trajectory: str
    kind: str
    steps: int | None  # an end record's count
    imported: bool  # a step `aw pool import` wrote
    digest: bytes
    path: Path
    line: int  # 1-based, as fsck counts
    same: bool = False  # byte for byte the record here

    @classmethod
    def of(cls, raw: bytes, rec: dict[str, Any], path: Path, line: int) -> _Theirs:
        return cls(
            id=rec["id"],
            trajectory=rec["trajectory"],
            kind=rec["kind"],
            steps=rec.get("steps") if rec["kind"] == "end" else None,
            imported=rec.get("protocol") == "import",
            digest=_digest(raw),
            path=path,
            line=line,
        )


@dataclass
class MergePlan:
    """What to copy: shards whole, except ``drop`` (shard -> its lines to leave out, the
    rest written as a new shard) and ``skip``; or nothing, when there are ``clashes``.
    ``checked``: shards whose lines the check read as valid records, so the copy checks
    only their hash again (merging 25,000 new 1 kB records took 1.0 s unchecked, 2.2 s
    with every record validated by the check and again by the copy, 1.3 s as now)."""

    drop: dict[Path, set[int]] = field(default_factory=dict)
    checked: set[Path] = field(default_factory=set)  # every line read as a valid record
    # superseded there by a shard in ``drop``: its records come with that one
    skip: set[Path] = field(default_factory=set)
    left_out: dict[str, int] = field(default_factory=dict)  # trajectory -> records left out
    clashes: list[str] = field(default_factory=list)


def _digest(raw: bytes) -> bytes:
    # 128 bits, as fsck tells a copy from a different record under a copied id
    return hashlib.blake2b(raw, digest_size=16).digest()


def _rows(db: sqlite3.Connection, sql: str, values: Iterable[str]) -> list[sqlite3.Row]:
    """The rows of ``sql`` (an ``IN ({})`` query) over ``values``, a chunk at a time."""
    values = list(values)
    out: list[sqlite3.Row] = []
    for i in range(0, len(values), _CHUNK):
        chunk = values[i : i + _CHUNK]
        out.extend(db.execute(sql.format(",".join("?" * len(chunk))), chunk))
    return out


def _here(row: Any) -> str:
    """Where an index row's record is, as fsck names it (a journal's line 1 is its header)."""
    source, line = row["source"], row["line"]
    return f"{source}:{line + (2 if source.startswith('journals/') else 1)}"


def plan_merge(dst: Layout, src: Layout, index: Index) -> MergePlan:
    """Compare the records of ``src``'s shards that ``dst`` lacks with ``dst``'s (``index``
    up to date); reads both pools, writes nothing."""
    plan = MergePlan()
    db = index.db
    hidden = hidden_shards(src)
    todo = [p for p in src.shard_paths() if not dst.shard_path(shard_digest(p)).exists()]
    theirs: dict[str, list[_Theirs]] = {}
    here: dict[str, sqlite3.Row] = {}  # step id -> its index row here
    for path in todo:
        if path.name in hidden:
            continue  # superseded there: its records are in its replacement
        try:
            # Each line checked as fsck does (here once: the copy then checks the hash
            # alone), and kept as the few fields the check reads: a shard's whole
            # records held at once cost half a second more in the merge measured above
            # (the garbage collector walks them).
            recs = [
                _Theirs.of(raw, rec, path, n) for n, (raw, rec) in enumerate(shard_records(path), 1)
            ]
        except CorruptDataError:
            continue  # checked again, refused and named when the merge copies it
        plan.checked.add(path)
        sql = "SELECT id, trajectory, source, line FROM steps WHERE id IN ({})"
        held = {r["id"]: r for r in _rows(db, sql, [r.id for r in recs])}
        tids = {r.trajectory for r in recs}
        held_t = {
            r[0] for r in _rows(db, "SELECT trajectory FROM steps WHERE trajectory IN ({})", tids)
        }
        held_t |= {
            r[0] for r in _rows(db, "SELECT trajectory FROM ends WHERE trajectory IN ({})", tids)
        }
        here.update(held)
        for r in recs:
            if r.id in held or r.trajectory in held_t:
                theirs.setdefault(r.trajectory, []).append(r)
    if not theirs:
        return plan
    sql = "SELECT trajectory, id, steps, source, line FROM ends WHERE trajectory IN ({})"
    ends = {r["trajectory"]: r for r in _rows(db, sql, theirs)}
    sql = (
        "SELECT trajectory, COUNT(*) AS n, MAX(protocol = 'import') AS imported FROM steps "
        "WHERE trajectory IN ({}) GROUP BY trajectory"
    )
    counts = {r["trajectory"]: r for r in _rows(db, sql, theirs)}
    fetch = RecordFetcher(dst)
    same: dict[Path, set[int]] = {}
    for tid, recs in theirs.items():
        problems = _compare(src, tid, recs, here, ends.get(tid), counts.get(tid), fetch)
        for r in recs:
            if r.same:
                same.setdefault(r.path, set()).add(r.line)
        if not problems:
            continue
        if any(r.imported for r in recs) or (tid in counts and counts[tid]["imported"]):
            plan.left_out[tid] = len(recs)
            for r in recs:
                plan.drop.setdefault(r.path, set()).add(r.line)
        else:
            plan.clashes.extend(problems)
    for path, lines in plan.drop.items():
        lines |= same.get(path, set())  # already here: not written a second time
    sup = read_superseded(src)
    dropped = {p.name for p in plan.drop}
    for path in todo:
        if path.name in hidden and final_replacement(sup, path.name) in dropped:
            plan.skip.add(path)
    return plan


def _compare(
    src: Layout,
    tid: str,
    recs: list[_Theirs],
    here: dict[str, sqlite3.Row],
    end: sqlite3.Row | None,
    count: sqlite3.Row | None,
    fetch: RecordFetcher,
) -> list[str]:
    """What of trajectory ``tid``'s records there cannot join this pool's (fsck's checks)."""
    problems: list[str] = []
    new_steps: set[str] = set()
    their_end: _Theirs | None = None

    def there(r: _Theirs) -> str:
        return f"{r.path.relative_to(src.root)}:{r.line} there"

    for r in recs:
        if r.kind == "end":
            their_end = their_end or r
            if end is None:
                continue
            if end["id"] != r.id:
                problems.append(
                    f"{tid}: a second end record {r.id} ({there(r)}; "
                    f"end record {end['id']} at {_here(end)} here)"
                )
            elif _digest(fetch.raw(end["source"], end["line"])) != r.digest:
                problems.append(
                    f"{r.id}: other content than at {_here(end)} here ({there(r)}), "
                    f"the end record of {tid}"
                )
            else:
                r.same = True
            continue
        row = here.get(r.id)
        if row is None:
            new_steps.add(r.id)
        elif _digest(fetch.raw(row["source"], row["line"])) != r.digest:
            where = "" if row["trajectory"] == tid else f" (a step of {row['trajectory']})"
            problems.append(f"{r.id}: other content than at {_here(row)}{where} here ({there(r)})")
        else:
            r.same = True
    if problems:
        return problems
    steps = (count["n"] if count is not None else 0) + len(new_steps)
    limit = end["steps"] if end is not None else (their_end.steps if their_end else None)
    if limit is not None and steps > limit:
        problems.append(
            f"{tid}: {steps} steps with theirs ({len(new_steps)} new), "
            f"but its end record counts {limit}"
        )
    return problems
