"""Index queries the TUI needs beyond the pool's own: rates, distinct values, errors, histograms."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

DISTINCT_COLUMNS = {"agent": "agent", "dataset": "dataset", "status": "status", "group": "grp"}


def step_count(db: sqlite3.Connection) -> int:
    return db.execute("SELECT COUNT(*) FROM steps").fetchone()[0]


def trajectories_by_status(db: sqlite3.Connection) -> dict[str, int]:
    return dict(db.execute("SELECT status, COUNT(*) FROM trajectories GROUP BY status"))


def steps_per_second(
    db: sqlite3.Connection, *, now: float, window_s: int = 120, bucket_s: int = 2
) -> list[float]:
    """Steps started per second in consecutive buckets ending at ``now`` (oldest first)."""
    start = now - window_s
    counts = [0] * (window_s // bucket_s)
    q = (
        "SELECT CAST((started_at - ?) / ? AS INTEGER) AS b, COUNT(*) FROM steps "
        "WHERE started_at >= ? AND started_at < ? GROUP BY b"
    )
    for b, n in db.execute(q, (start, bucket_s, start, now)):
        if 0 <= b < len(counts):
            counts[b] = n
    return [c / bucket_s for c in counts]


def pool_totals(db: sqlite3.Connection) -> dict[str, Any]:
    """Whole-pool aggregates for the monitor, each from one scan of a covering index."""
    steps = errors = prompt = completion = engine = 0
    versions: dict[int | None, int] = {}
    q = (
        "SELECT policy_version, COUNT(*), SUM(status != 'ok'), SUM(prompt_tokens), "
        "SUM(completion_tokens), SUM(token_source = 'engine') FROM steps GROUP BY policy_version"
    )
    for v, n, e, p, c, g in db.execute(q):
        versions[v] = n
        steps += n
        errors += e or 0
        prompt += p or 0
        completion += c or 0
        engine += g or 0
    per_agent = [
        dict(r)
        for r in db.execute(
            "SELECT agent, dataset, COUNT(*) AS trajectories, SUM(n_steps) AS steps, "
            "AVG(reward) AS reward_mean, SUM(status = 'open') AS open, "
            "SUM(status = 'done') AS done, SUM(status IN ('failed', 'timeout', 'cancelled')) "
            "AS failed FROM trajectories GROUP BY agent, dataset ORDER BY agent, dataset"
        )
    ]
    return {
        "steps": steps,
        "step_errors": errors,
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "engine_token_steps": engine,
        "policy_versions": versions,
        "per_agent": per_agent,
        "labelled_trajectories": db.execute("SELECT COUNT(*) FROM tlabels").fetchone()[0],
    }


def recent_errors(db: sqlite3.Connection, limit: int = 5) -> list[dict[str, Any]]:
    q = (
        "SELECT id, trajectory, agent, started_at, error FROM steps "
        "WHERE error IS NOT NULL ORDER BY started_at DESC LIMIT ?"
    )
    return [dict(r) for r in db.execute(q, (limit,))]


def reward_histogram(db: sqlite3.Connection, bins: int = 10) -> list[tuple[float, float, int]]:
    """Effective rewards (label overrides win) in ``bins`` equal bins, computed in SQL.

    Rewards that are all one value (every one 0 early in a run) are one bin ``(v, v, n)``:
    ten bins of width 1 from it showed a 0…10 range no reward had."""
    r = "COALESCE(l.reward, t.reward)"
    frm = f"FROM trajectories t LEFT JOIN tlabels l ON l.trajectory = t.id WHERE {r} IS NOT NULL"
    lo, hi, total = db.execute(f"SELECT MIN({r}), MAX({r}), COUNT(*) {frm}").fetchone()
    if lo is None:
        return []
    if hi == lo:
        return [(lo, hi, total)]
    width = (hi - lo) / bins
    counts = [0] * bins
    q = f"SELECT MIN(CAST(({r} - ?) / ? AS INTEGER), ?) AS b, COUNT(*) {frm} GROUP BY b"
    for b, n in db.execute(q, (lo, width, bins - 1)):
        counts[b] = n
    return [(lo + i * width, lo + (i + 1) * width, c) for i, c in enumerate(counts)]


def reward_by_version(db: sqlite3.Connection) -> list[dict[str, Any]]:
    """Ended trajectories per policy version (the newest that sampled them): how many, how
    many scored, their mean effective reward (label overrides win), how many failed."""
    r = "COALESCE(l.reward, t.reward)"
    q = (
        f"SELECT t.policy_max AS version, COUNT(*) AS trajectories, COUNT({r}) AS scored, "
        f"AVG({r}) AS reward_mean, SUM(t.status = 'failed' OR t.status = 'timeout') AS failed "
        "FROM trajectories t LEFT JOIN tlabels l ON l.trajectory = t.id "
        "WHERE t.status != 'open' GROUP BY t.policy_max ORDER BY t.policy_max"
    )
    return [dict(row) for row in db.execute(q)]


def distinct(db: sqlite3.Connection, column: str, limit: int = 200) -> list[str]:
    """Distinct values of a trajectory column, for completing the filter line."""
    col = DISTINCT_COLUMNS[column]
    q = f"SELECT DISTINCT {col} FROM trajectories WHERE {col} IS NOT NULL ORDER BY 1 LIMIT ?"
    return [r[0] for r in db.execute(q, (limit,))]


def group_members(db: sqlite3.Connection, group: str) -> list[str]:
    q = "SELECT id FROM trajectories WHERE grp = ? ORDER BY first_at, id"
    return [r[0] for r in db.execute(q, (group,))]


def disk_use(root: Path) -> dict[str, int]:
    """Bytes under each top-level part of the pool (shards, journals, labels, cache)."""
    out: dict[str, int] = {}
    for name in ("objects", "journals", "labels", ".cache"):
        total = 0
        stack = [root / name]
        while stack:
            try:
                entries = list(os.scandir(stack.pop()))
            except (FileNotFoundError, NotADirectoryError):
                continue
            for e in entries:
                try:
                    if e.is_dir(follow_symlinks=False):
                        stack.append(Path(e.path))
                    else:
                        total += e.stat(follow_symlinks=False).st_size
                except FileNotFoundError:
                    continue
        out[name] = total
    return out
