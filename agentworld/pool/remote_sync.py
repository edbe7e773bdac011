"""Copy a pool to and from an object store: what is missing, verified by hash, never overwriting.

``push`` uploads a local pool's live sealed shards (each with its rows object,
remote_rows.py) and its label lines; ``pull`` downloads the shards and label
objects a local pool lacks, each checked as `aw pool merge` checks a shard
(shards.copy_shard: hash and every record). Both are idempotent and safe to
run while writers work: only sealed shards travel, and every object is
created with put-if-absent, so two nodes pushing the same shard never race.
``ShardUploader`` runs ``push`` in the background of a writer process
(`aw proxy --remote`, `aw run --remote`), so each shard goes up within a
second or so of being sealed.
"""

from __future__ import annotations

import logging
import re
import tempfile
import threading
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson

from agentworld.errors import PoolError, PoolFormatError
from agentworld.pool.layout import Layout, check_version, hidden_shards, shard_digest
from agentworld.pool.remote_pool import (
    download_label,
    label_keys,
    listed_shards,
    upload_label_bytes,
)
from agentworld.pool.remote_rows import rows_key, shard_key, shard_rows
from agentworld.pool.remote_store import RemoteStore, run_parallel, url_key
from agentworld.pool.shards import copy_shard, read_verified

log = logging.getLogger(__name__)

# A label file that came from a store (pull, or a mirror) is named <day>.<16 hex>.jsonl.
_CONTENT_NAMED_RE = re.compile(r"^.+\.[0-9a-f]{16}\.jsonl$")


@dataclass
class SyncReport:
    """What one push or pull moved."""

    url: str
    shards_copied: int = 0
    bytes_copied: int = 0
    shards_present: int = 0
    rows_objects: int = 0
    label_objects: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def remote_of(layout: Layout) -> str | None:
    """The ``remote = "s3://…"`` POOL.toml names, if any (a writer uploads there)."""
    remote = check_version(layout).get("remote")
    if remote is not None and not isinstance(remote, str):
        raise PoolError(f"{layout.meta}: `remote` must be a URL string, got {remote!r}")
    return remote


def check_remote_meta(store: RemoteStore, local_meta: bytes | None) -> None:
    """Refuse a store whose POOL.toml is of another format; create it from ours when absent."""
    data = store.get_bytes("POOL.toml")
    if data is None:
        if local_meta is None:
            raise PoolError(f"{store.name}: not a pool (no POOL.toml object)")
        store.put_if_absent("POOL.toml", local_meta)
        return
    try:
        meta = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise PoolError(f"{store.name}/POOL.toml: not valid TOML: {exc}") from None
    ours = tomllib.loads(local_meta.decode()) if local_meta else {}
    for key in ("format", "version"):
        if ours and meta.get(key) != ours.get(key):
            raise PoolFormatError(
                f"{store.name}/POOL.toml: {key} is {meta.get(key)!r}, this pool's is {ours[key]!r}"
            )


class Pusher:
    """Uploads what a local pool has and the store lacks; remembers what it saw between runs."""

    def __init__(self, layout: Layout, store: RemoteStore) -> None:
        self.layout = layout
        self.store = store
        self._remote_shards: set[str] | None = None
        self._remote_rows: set[str] = set()
        self._remote_labels: set[str] = set()
        self._state = layout.cache / f"remote-{url_key(store.url)}.json"

    def push(self) -> SyncReport:
        """One pass: shards (with rows objects) first, then label lines."""
        import time

        t0 = time.perf_counter()
        report = SyncReport(url=self.store.name)
        if self._remote_shards is None:  # the first pass lists; later ones trust what they did
            check_remote_meta(self.store, self.layout.meta.read_bytes())
            self._remote_shards = set(listed_shards(self.store))
            self._remote_rows = set(self.store.list("index/"))
            self._remote_labels = set(label_keys(self.store))
        hidden = hidden_shards(self.layout)
        todo = []
        for path in self.layout.shard_paths():
            if path.name in hidden:
                continue  # compacted away: its records are in the shard that replaced it
            if path.name in self._remote_shards:
                report.shards_present += 1
            else:
                todo.append(path)
        for size in run_parallel([lambda p=p: self._push_shard(p) for p in todo]):
            report.shards_copied += 1 if size else 0
            report.bytes_copied += size
            report.rows_objects += 1
        report.label_objects = self._push_labels()
        report.seconds = time.perf_counter() - t0
        return report

    def _push_shard(self, path: Path) -> int:
        """Rows object first, then the shard: a listed shard always has its rows."""
        digest = shard_digest(path)
        data = read_verified(path)  # a corrupt local shard is never spread
        rel = str(path.relative_to(self.layout.root))
        if rows_key(digest) not in self._remote_rows:
            self.store.put_if_absent(rows_key(digest), shard_rows(path, rel))
        created = self.store.put_if_absent(shard_key(digest), data)
        assert self._remote_shards is not None
        self._remote_shards.add(path.name)
        return len(data) if created else 0

    def _push_labels(self) -> int:
        """Upload the label lines appended since the last push, as new objects."""
        try:
            sent: dict[str, int] = orjson.loads(self._state.read_bytes())
        except (FileNotFoundError, orjson.JSONDecodeError):
            sent = {}
        uploaded = 0
        files = sorted(self.layout.labels.glob("*/*.jsonl")) if self.layout.labels.is_dir() else []
        for path in files:
            rel = str(path.relative_to(self.layout.root))
            if _CONTENT_NAMED_RE.match(path.name) and rel in self._remote_labels:
                continue  # it came from this store
            data = path.read_bytes()
            start = sent.get(rel, 0)
            end = data.rfind(b"\n") + 1  # whole lines only: a writer may be mid-append
            if start > end:
                start = 0  # the file was replaced (a git checkout): send it whole
            if end > start:
                key = upload_label_bytes(
                    self.store, path.parent.name, path.name[: -len(".jsonl")], data[start:end]
                )
                self._remote_labels.add(key)
                uploaded += 1
                sent[rel] = end
        if uploaded:
            self._state.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._state.with_suffix(".tmp")
            tmp.write_bytes(orjson.dumps(sent))
            tmp.replace(self._state)
        return uploaded


def push(layout: Layout, url: str) -> SyncReport:
    """Upload a local pool's missing shards and label lines to ``url``."""
    check_version(layout)
    return Pusher(layout, RemoteStore(url)).push()


def pull(layout: Layout, url: str) -> SyncReport:
    """Download the shards and label objects of ``url`` that the local pool lacks."""
    import time

    t0 = time.perf_counter()
    check_version(layout)
    store = RemoteStore(url)
    check_remote_meta(store, layout.meta.read_bytes())
    report = SyncReport(url=store.name)
    listed = listed_shards(store)
    todo = [n for n in sorted(listed) if not layout.shard_path(n[:64]).is_file()]
    report.shards_present = len(listed) - len(todo)
    layout.tmp.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".aw-pull-", dir=layout.tmp) as tmp:

        def one(name: str) -> int:
            staged = Path(tmp) / name
            store.download(shard_key(name[:64]), staged, sha256=name[:64])
            try:
                return copy_shard(staged, layout)  # every record checked, as merge does
            finally:
                staged.unlink(missing_ok=True)

        for size in run_parallel([lambda n=n: one(n) for n in todo]):
            report.shards_copied += 1
            report.bytes_copied += size
    for key, size in label_keys(store).items():
        dest = layout.root / key
        if dest.is_file() and dest.stat().st_size == size:
            continue
        download_label(store, key, dest)
        report.label_objects += 1
    report.seconds = time.perf_counter() - t0
    return report


class ShardUploader:
    """Pushes a writer's pool to its remote every ``interval_s``, and once more on ``stop``.

    Failures (the store unreachable, credentials expired) are logged and tried
    again on the next tick: the shards stay sealed on local disk meanwhile, so
    nothing is lost, and the writer keeps serving.
    """

    def __init__(self, layout: Layout, url: str, *, interval_s: float = 1.0) -> None:
        self.pusher = Pusher(layout, RemoteStore(url))
        self.interval_s = interval_s
        self.last_error: str | None = None
        self.pushed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="aw-shard-uploader", daemon=True)

    def start(self) -> ShardUploader:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.push_once()

    def push_once(self) -> SyncReport | None:
        try:
            report = self.pusher.push()
        except Exception as exc:  # any store failure: keep the shards, retry next tick
            self.last_error = str(exc)
            log.warning("upload to %s failed (retrying): %s", self.pusher.store.name, exc)
            return None
        self.last_error = None
        self.pushed += report.shards_copied
        return report

    def stop(self) -> SyncReport | None:
        """Stop the loop and push what was sealed since the last tick."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        return self.push_once()


def start_uploader(
    layout: Layout, remote: str | None, *, interval_s: float = 1.0
) -> ShardUploader | None:
    """A started uploader to ``remote`` (a --remote flag) or POOL.toml's ``remote``; None
    when neither names one."""
    from agentworld.errors import ConfigError
    from agentworld.pool.remote_store import remote_url

    url = remote_url(remote) if remote else None
    if remote and url is None:
        raise ConfigError(f"--remote: {remote!r} is not an object-store URL (s3://, gs://, az://)")
    if url is None:
        named = remote_of(layout)
        url = remote_url(named) if named else None
        if named and url is None:
            raise ConfigError(f"{layout.meta}: remote: {named!r} is not an object-store URL")
    if url is None:
        return None
    uploader = ShardUploader(layout, url, interval_s=interval_s)
    # A wrong bucket, prefix or credentials fail here, as one error, not once a second later.
    check_remote_meta(uploader.pusher.store, layout.meta.read_bytes())
    return uploader.start()
