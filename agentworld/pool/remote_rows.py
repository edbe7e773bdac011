"""Index rows of one sealed shard, stored beside it in an object store, so readers list without downloading.

A reader of ``s3://…`` builds its SQLite index from the object listing plus,
per shard, one small *rows object* (``index/ab/<sha256>.rows.zst``): the
exact index rows (``index._step_row`` / ``index._end_row``) the shard yields,
written by whoever uploaded the shard. `aw pool ls/stats` and the TUI then
cost one small get per shard instead of the shard itself; shards are fetched
(and cached by hash) only when a step's body is read. A shard whose rows
object is missing, or was made for another index version, is downloaded and
indexed the ordinary way, so the rows objects are a cache like the index.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import zstandard

from agentworld import records
from agentworld.errors import RecordError
from agentworld.pool.index import INDEX_VERSION, Index, _end_row, _step_row
from agentworld.pool.layout import SHARD_SUFFIX, shard_digest
from agentworld.pool.shards import iter_shard_lines

if TYPE_CHECKING:
    from agentworld.pool.remote_pool import RemoteLayout

log = logging.getLogger(__name__)

ROWS_SUFFIX = ".rows.zst"
_STEP_SOURCE = 20  # the column of index._step_row that names the shard
_END_SOURCE = 7  # and of index._end_row


def shard_key(digest: str) -> str:
    """The object key of a shard (the same relative path as in a pool folder)."""
    return f"objects/{digest[:2]}/{digest}{SHARD_SUFFIX}"


def rows_key(digest: str) -> str:
    """The object key of a shard's index rows."""
    return f"index/{digest[:2]}/{digest}{ROWS_SUFFIX}"


def shard_rows(path: Path, rel: str) -> bytes:
    """The rows object of a local, sealed shard (hash-checked as it is read).

    Lines that are not records the index takes are left out, as the index
    leaves them out (fsck names them).
    """
    steps: list[Any] = []
    ends: list[Any] = []
    n = 0
    for n, raw in enumerate(iter_shard_lines(path), 1):
        try:
            rec = records.parse_stored(raw)  # what the index files (Index._index_lines)
            if rec["kind"] == "step":
                steps.append(_step_row(rec, rel, n - 1))
            else:
                ends.append(_end_row(rec, rel, n - 1))
        except (AttributeError, KeyError, TypeError, ValueError, RecordError):
            continue
    body = {"index_version": INDEX_VERSION, "records": n, "steps": steps, "ends": ends}
    return zstandard.ZstdCompressor(level=3).compress(orjson.dumps(body))


def parse_rows(data: bytes, rel: str) -> tuple[int, list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """(records, step rows, end rows) of a rows object; ValueError when it is not one for
    this index version or not for this shard."""
    body = orjson.loads(zstandard.ZstdDecompressor().decompress(data, max_output_size=1 << 30))
    if not isinstance(body, dict) or body.get("index_version") != INDEX_VERSION:
        raise ValueError("made for another index version")
    steps = [tuple(r) for r in body["steps"]]
    ends = [tuple(r) for r in body["ends"]]
    # Each row's source column (see index._step_row / _end_row) must name this shard.
    if any(r[_STEP_SOURCE] != rel for r in steps) or any(r[_END_SOURCE] != rel for r in ends):
        raise ValueError("rows name another shard")
    return int(body["records"]), steps, ends


class RemoteIndex(Index):
    """The index of a remote pool's local mirror: shards come in as rows objects when they can."""

    layout: RemoteLayout
    _rows: dict[str, bytes | None] = {}  # noqa: RUF012  (rows objects fetched ahead, per refresh)

    def refresh(self, progress: Any = None, *, log_corrupt: bool = True) -> Any:
        """List the store again (at most every few seconds), then index what is new, its rows
        objects fetched several at a time first (one request's latency each, not in series)."""
        from agentworld.pool.remote_store import run_parallel

        mirror = self.layout.mirror
        mirror.sync()
        known = {r[0] for r in self.db.execute("SELECT path FROM sources")}
        new = [
            shard_digest(p)
            for p in self.layout.shard_paths()
            if str(p.relative_to(self.layout.root)) not in known and not p.is_file()
        ]
        got = run_parallel([lambda d=d: mirror.rows_object(d) for d in new])
        self._rows = dict(zip(new, got, strict=True))
        try:
            return super().refresh(progress, log_corrupt=log_corrupt)
        finally:
            self._rows = {}

    def _index_source(self, rel: str, kind: str, path: Path) -> int:
        mirror = self.layout.mirror
        if path.is_file() or kind != "shard":
            return super()._index_source(rel, kind, path)
        digest = shard_digest(path)
        rows = self._rows.pop(digest) if digest in self._rows else mirror.rows_object(digest)
        parsed = None
        if rows is not None:
            try:
                parsed = parse_rows(rows, rel)
            except (ValueError, KeyError, TypeError, zstandard.ZstdError) as exc:
                log.info("index: %s: rows object not used (%s); reading the shard", rel, exc)
        if parsed is None:
            mirror.ensure_shard(path.name)
            return super()._index_source(rel, kind, path)
        count, steps, ends = parsed
        self._flush_rows(steps, ends)
        self.db.execute(
            "INSERT OR REPLACE INTO sources VALUES (?, ?, ?, ?, 0, 0)",  # no local file yet
            (rel, kind, mirror.listed_size(path.name), count),
        )
        return count
