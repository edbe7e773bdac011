"""Read-only queries over the pool index: filtered, sorted trajectory lists, steps, stats.

``Index`` (index.py) keeps the tables up to date; these methods only read them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

import orjson

from agentworld.errors import NotFoundError
from agentworld.pool.search_text import like_escape, like_pattern
from agentworld.pool.selection import Selection

_IN_CHUNK = 500  # ids per IN (...): old SQLite builds take at most 999 parameters
CORRUPT = "corrupt"  # sources.kind of a shard left out because its hash or framing is wrong
MIN_SUFFIX = 6  # the shortest end of an id `find` looks ids up by (`aw tui` shows 10)

TRAJECTORY_SORTS = {
    "time": "t.last_at",
    "started": "t.first_at",
    "reward": "COALESCE(l.reward, t.reward)",
    "steps": "t.n_steps",
    "tokens": "t.completion_tokens",
    "agent": "t.agent",
    "dataset": "t.dataset",
    "status": "t.status",
    "id": "t.id",
}


class IndexQueries:
    """Queries shared by every reader of the index (CLI, TUI, trainer, exporters)."""

    db: sqlite3.Connection

    def _where(self, sel: Selection) -> tuple[str, list[Any]]:
        clauses: list[str] = []
        args: list[Any] = []
        for attr, col in (
            ("agent", "t.agent"),
            ("dataset", "t.dataset"),
            ("split", "t.split"),
            ("task", "t.task"),
            ("group", "t.grp"),
            ("trajectory", "t.id"),
        ):
            v = getattr(sel, attr)
            if v is not None:
                clauses.append(f"{col} = ?")
                args.append(v)
        if sel.status:
            clauses.append(f"t.status IN ({','.join('?' * len(sel.status))})")
            args.extend(sel.status)
        reward = "COALESCE(l.reward, t.reward)"
        if sel.min_reward is not None:
            clauses.append(f"{reward} >= ?")
            args.append(sel.min_reward)
        if sel.max_reward is not None:
            clauses.append(f"{reward} <= ?")
            args.append(sel.max_reward)
        if sel.min_policy is not None:
            clauses.append("t.policy_min >= ?")
            args.append(sel.min_policy)
        if sel.max_policy is not None:
            clauses.append("t.policy_max <= ?")
            args.append(sel.max_policy)
        if sel.since is not None:
            clauses.append("t.last_at >= ?")
            args.append(sel.since)
        if sel.until is not None:
            clauses.append("t.first_at <= ?")
            args.append(sel.until)
        if sel.trainable_only:
            clauses.append("(l.trainable IS NULL OR l.trainable != 0)")
        if sel.quality:
            clauses.append(f"l.quality IN ({','.join('?' * len(sel.quality))})")
            args.extend(sel.quality)
        if sel.tag is not None:
            # On the trajectory or on any of its steps (Selection.matches: the same rule).
            clauses.append(
                "(EXISTS (SELECT 1 FROM json_each(l.tags) WHERE value = ?)"
                " OR (l.any_label = 1 AND EXISTS (SELECT 1 FROM steps s"
                " JOIN labels sl ON sl.target = 'step:' || s.id AND sl.field = 'tags'"
                " WHERE s.trajectory = t.id"
                " AND EXISTS (SELECT 1 FROM json_each(sl.value) WHERE value = ?))))"
            )
            args += [sel.tag, sel.tag]
        if sel.labelled is True:
            clauses.append("l.any_label = 1")
        elif sel.labelled is False:
            clauses.append("l.any_label IS NULL")
        if sel.text:
            clauses.append(
                "EXISTS (SELECT 1 FROM steps s WHERE s.trajectory = t.id"
                " AND s.text LIKE ? ESCAPE '\\')"
            )
            args.append(like_pattern(sel.text))
        return (" WHERE " + " AND ".join(clauses)) if clauses else "", args

    def count_trajectories(self, sel: Selection = Selection()) -> int:
        where, args = self._where(sel)
        q = f"SELECT COUNT(*) FROM trajectories t LEFT JOIN tlabels l ON l.trajectory = t.id{where}"
        return self.db.execute(q, args).fetchone()[0]

    def trajectories(
        self,
        sel: Selection = Selection(),
        *,
        sort: str = "time",
        descending: bool = True,
        limit: int | None = 100,
        offset: int = 0,
    ) -> list[dict[str, Any]]:
        """Trajectory summaries with their trajectory-level labels, filtered and sorted."""
        if sort not in TRAJECTORY_SORTS:
            raise ValueError(f"unknown sort {sort!r}; known: {sorted(TRAJECTORY_SORTS)}")
        where, args = self._where(sel)
        way = "DESC" if descending else "ASC"  # ties too: a reversed sort reverses them
        order = f"{TRAJECTORY_SORTS[sort]} {way}, t.id {way}"
        q = (
            "SELECT t.*, l.trainable AS label_trainable, l.quality AS label_quality, "
            "l.tags AS label_tags, l.note AS label_note, l.reward AS label_reward, "
            "COALESCE(l.reward, t.reward) AS effective_reward, l.any_label AS labelled "
            f"FROM trajectories t LEFT JOIN tlabels l ON l.trajectory = t.id{where} "
            f"ORDER BY {order}"
        )
        if limit is not None:
            q += " LIMIT ? OFFSET ?"
            args = [*args, limit, offset]
        return [_traj_dict(r) for r in self.db.execute(q, args)]

    def trajectory_ids(self, sel: Selection = Selection()) -> list[str]:
        where, args = self._where(sel)
        q = f"SELECT t.id FROM trajectories t LEFT JOIN tlabels l ON l.trajectory = t.id{where}"
        return [r[0] for r in self.db.execute(q, args)]

    def trajectory(self, trajectory_id: str) -> dict[str, Any] | None:
        rows = self.trajectories(Selection(trajectory=trajectory_id), limit=1)
        return rows[0] if rows else None

    def steps(self, trajectory_id: str) -> list[dict[str, Any]]:
        """Step rows of one trajectory in order (choice 0 first)."""
        q = "SELECT * FROM steps WHERE trajectory = ? ORDER BY idx, COALESCE(choice, 0)"
        return [dict(r) for r in self.db.execute(q, (trajectory_id,))]

    def steps_of(self, trajectory_ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
        """``steps`` for many trajectories at once: id -> step rows in order (absent: none)."""
        out: dict[str, list[dict[str, Any]]] = {}
        for i in range(0, len(trajectory_ids), _IN_CHUNK):
            chunk = trajectory_ids[i : i + _IN_CHUNK]
            marks = ",".join("?" * len(chunk))
            q = (
                f"SELECT * FROM steps WHERE trajectory IN ({marks})"
                " ORDER BY trajectory, idx, COALESCE(choice, 0)"
            )
            for r in self.db.execute(q, chunk):
                out.setdefault(r["trajectory"], []).append(dict(r))
        return out

    def trajectories_in(self, sources: Sequence[str]) -> set[str]:
        """The trajectories with a step read from any of ``sources`` (pool-relative paths)."""
        out: set[str] = set()
        for i in range(0, len(sources), _IN_CHUNK):
            chunk = list(sources[i : i + _IN_CHUNK])
            marks = ",".join("?" * len(chunk))
            q = f"SELECT DISTINCT trajectory FROM steps WHERE source IN ({marks})"
            out.update(r[0] for r in self.db.execute(q, chunk))
        return out

    def step(self, step_id: str) -> dict[str, Any] | None:
        r = self.db.execute("SELECT * FROM steps WHERE id = ?", (step_id,)).fetchone()
        return dict(r) if r else None

    def find(self, prefix: str) -> list[tuple[str, str]]:
        """Resolve an id or unique prefix to ('step'|'trajectory', id) candidates; failing
        that, an id's end of at least ``MIN_SUFFIX`` characters (the short ids `aw tui`
        lists: the random end of an id, where the start is its time)."""
        out = self._matching("id >= ? AND id < ?", (prefix, prefix + "\uffff"))
        if out or len(prefix) < MIN_SUFFIX:
            return out
        return self._matching("id LIKE ? ESCAPE '\\'", ("%" + like_escape(prefix),))

    def resolve(self, ident: str, where: object = "the pool") -> tuple[str, str]:
        """("step" | "trajectory", full id) of the one record ``ident`` names (``find``'s
        rules; an exact id wins over longer ids it prefixes). No match and several
        matches are both NotFoundError, naming ``where``, so every command fails alike."""
        found = self.find(ident)
        exact = [f for f in found if f[1] == ident]
        if exact:
            found = exact
        if not found:
            raise NotFoundError(f"no step or trajectory matches {ident!r} in {where}")
        if len(found) > 1:
            raise NotFoundError(
                f"{ident!r} is ambiguous: " + ", ".join(f"{k} {i}" for k, i in found[:5])
            )
        return found[0]

    def _matching(self, where: str, args: tuple[str, ...]) -> list[tuple[str, str]]:
        out = []
        for kind, table in (("trajectory", "trajectories"), ("step", "steps")):
            rows = self.db.execute(f"SELECT id FROM {table} WHERE {where} LIMIT 5", args)
            out += [(kind, r[0]) for r in rows]
        return out

    def end(self, trajectory_id: str) -> dict[str, Any] | None:
        r = self.db.execute("SELECT * FROM ends WHERE trajectory = ?", (trajectory_id,)).fetchone()
        return dict(r) if r else None

    def labels_of(self, targets: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Effective label values per target."""
        out: dict[str, dict[str, Any]] = {}
        for i in range(0, len(targets), 500):
            chunk = list(targets[i : i + 500])
            q = f"SELECT * FROM labels WHERE target IN ({','.join('?' * len(chunk))})"
            for r in self.db.execute(q, chunk):
                out.setdefault(r["target"], {})[r["field"]] = orjson.loads(r["value"])
        return out

    def corrupt_shards(self) -> list[str]:
        """Pool-relative paths of the shards left out as corrupt (``aw pool fsck`` says why)."""
        q = "SELECT path FROM sources WHERE kind = ? ORDER BY path"
        return [r[0] for r in self.db.execute(q, (CORRUPT,))]

    def stats(self) -> dict[str, Any]:
        """Whole-pool aggregates for `aw pool stats` and the TUI monitor."""
        db = self.db
        steps = db.execute(
            "SELECT COUNT(*), SUM(status != 'ok'), SUM(prompt_tokens), SUM(completion_tokens), "
            "SUM(token_source = 'engine'), MIN(started_at), MAX(started_at) FROM steps"
        ).fetchone()
        by_status = dict(db.execute("SELECT status, COUNT(*) FROM trajectories GROUP BY status"))
        reward = db.execute(
            "SELECT AVG(r), MIN(r), MAX(r), COUNT(r) FROM "
            "(SELECT COALESCE(l.reward, t.reward) AS r FROM trajectories t "
            "LEFT JOIN tlabels l ON l.trajectory = t.id)"
        ).fetchone()
        per_agent = [
            dict(r)
            for r in db.execute(
                "SELECT agent, dataset, COUNT(*) AS trajectories, SUM(n_steps) AS steps, "
                "AVG(reward) AS reward_mean, SUM(status = 'open') AS open, "
                "SUM(status = 'done') AS done, SUM(status IN ('failed', 'timeout', 'cancelled')) "
                "AS failed, SUM(completion_tokens) AS completion_tokens "
                "FROM trajectories GROUP BY agent, dataset ORDER BY agent, dataset"
            )
        ]
        versions = dict(
            db.execute("SELECT policy_version, COUNT(*) FROM steps GROUP BY policy_version")
        )
        sources = dict(db.execute("SELECT kind, COUNT(*) FROM sources GROUP BY kind"))
        labelled = db.execute("SELECT COUNT(*) FROM tlabels").fetchone()[0]
        corrupt = self.corrupt_shards()
        return {
            "steps": steps[0] or 0,
            "step_errors": steps[1] or 0,
            "prompt_tokens": steps[2] or 0,
            "completion_tokens": steps[3] or 0,
            "engine_token_steps": steps[4] or 0,
            "first_step_at": steps[5],
            "last_step_at": steps[6],
            "trajectories": sum(by_status.values()),
            "trajectories_by_status": by_status,
            "reward": {"mean": reward[0], "min": reward[1], "max": reward[2], "count": reward[3]},
            "per_agent": per_agent,
            "policy_versions": versions,
            "shards": sources.get("shard", 0),
            "journals": sources.get("journal", 0),
            "corrupt_shards": corrupt,
            "labelled_trajectories": labelled,
        }


def step_summary(row: dict[str, Any]) -> dict[str, Any]:
    """A ``steps`` row under the names the records and trajectory rows use (``index``,
    ``group``), without the index's own bookkeeping (the file and line it was read from)."""
    names = {"idx": "index", "grp": "group"}
    return {names.get(k, k): v for k, v in row.items() if k not in ("source", "line")}


def _traj_dict(row: sqlite3.Row) -> dict[str, Any]:
    d = dict(row)
    d["group"] = d.pop("grp")
    if d.get("label_tags"):
        d["label_tags"] = orjson.loads(d["label_tags"])
    if d.get("label_trainable") is not None:
        d["label_trainable"] = bool(d["label_trainable"])
    return d
