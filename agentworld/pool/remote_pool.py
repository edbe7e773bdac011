"""A pool in an object store, read through a local mirror that fetches shards by hash on demand.

``open_pool("s3://bucket/prefix")`` (pool/opener.py) lands here. The mirror is a pool folder
under ``$AW_HOME/remote/<url key>/`` holding the store's POOL.toml, its label
objects, the shards fetched so far (named by hash, so a cached one never goes
stale) and the SQLite index. Listing comes from the object listing plus each
shard's rows object (remote_rows.py); a step's body, an export or a training
run fetches the shards it reads, several at a time. Writers never write into
the store through here: they seal shards locally and upload them
(remote_sync.py); labels set on a remote pool go up as new immutable objects.
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentworld.errors import PoolError
from agentworld.pool import Pool, Selection, Trajectory
from agentworld.pool.labels import Labels
from agentworld.pool.layout import SHARD_SUFFIX, Layout, check_version, shard_digest
from agentworld.pool.remote_rows import RemoteIndex, rows_key, shard_key
from agentworld.pool.remote_store import RemoteStore, run_parallel, url_key

_SHARD_KEY_RE = re.compile(r"^objects/[0-9a-f]{2}/([0-9a-f]{64})" + re.escape(SHARD_SUFFIX) + "$")
_LABEL_KEY_RE = re.compile(r"^labels/[A-Za-z0-9._@-]+/[A-Za-z0-9._-]+\.jsonl$")
SYNC_EVERY_S = 2.0  # a TUI refreshes every second; listing a big bucket that often is waste


def default_cache_root() -> Path:
    """Where remote mirrors live: $AW_HOME/remote, as the model cache lives under AW_HOME."""
    return Path(os.environ.get("AW_HOME") or Path.home() / ".cache" / "agentworld") / "remote"


def listed_shards(store: RemoteStore) -> dict[str, int]:
    """Shard file name -> size of every shard object in the store."""
    out = {}
    for key, size in store.list("objects/").items():
        m = _SHARD_KEY_RE.match(key)
        if m:
            out[key.rsplit("/", 1)[1]] = size
    return out


def download_label(store: RemoteStore, key: str, dest: Path) -> None:
    """Fetch one label object; one whose name carries a hash must match it (PoolError)."""
    import hashlib

    store.download(key, dest)
    stem = dest.name[: -len(".jsonl")]
    named = stem.rsplit(".", 1)[-1] if "." in stem else ""
    hex_named = len(named) == 16 and all(c in "0123456789abcdef" for c in named)
    if hex_named and hashlib.sha256(dest.read_bytes()).hexdigest()[:16] != named:
        dest.unlink()
        raise PoolError(f"{store.name}/{key}: content does not match the hash in its name")


def label_keys(store: RemoteStore) -> dict[str, int]:
    """Label object key -> size (keys a label file name may have; others are ignored)."""
    return {k: s for k, s in store.list("labels/").items() if _LABEL_KEY_RE.match(k)}


class RemoteMirror:
    """The local side of one remote pool: listing, label objects and the shard cache."""

    def __init__(self, store: RemoteStore, root: Path) -> None:
        self.store = store
        self.root = root
        self.listing: dict[str, int] = {}
        self._synced_at = float("-inf")
        self._lock = threading.Lock()

    def sync(self, *, max_age_s: float = SYNC_EVERY_S) -> None:
        """List shards, fetch new label objects and superseded.txt (skipped when recent)."""
        with self._lock:
            if time.monotonic() - self._synced_at < max_age_s:
                return
            self.listing = listed_shards(self.store)
            jobs = []
            for key, size in label_keys(self.store).items():
                dest = self.root / key
                if not (dest.is_file() and dest.stat().st_size == size):
                    jobs.append(lambda key=key, dest=dest: download_label(self.store, key, dest))
            for _ in run_parallel(jobs):
                pass
            superseded = self.store.get_bytes("superseded.txt")
            if superseded is not None:
                _write_atomic(self.root / "superseded.txt", superseded)
            self._synced_at = time.monotonic()

    def listed_size(self, name: str) -> int:
        return self.listing.get(name, 0)

    def shard_path(self, name: str) -> Path:
        return self.root / "objects" / name[:2] / name

    def ensure_shard(self, name: str, *, verify: bool = True) -> Path:
        """The local copy of a listed shard, downloaded (hash-checked) when not cached yet."""
        path = self.shard_path(name)
        if not path.is_file():
            digest = name[: -len(SHARD_SUFFIX)]
            self.store.download(shard_key(digest), path, sha256=digest if verify else None)
        return path

    def fetch(self, names: Iterable[str], *, verify: bool = True) -> int:
        """Download the listed shards not cached yet, several at a time; returns how many."""
        todo = [n for n in names if not self.shard_path(n).is_file()]
        for _ in run_parallel([lambda n=n: self.ensure_shard(n, verify=verify) for n in todo]):
            pass
        return len(todo)

    def rows_object(self, digest: str) -> bytes | None:
        return self.store.get_bytes(rows_key(digest))


@dataclass(frozen=True)
class RemoteLayout(Layout):
    """A mirror's layout: its shards are the store's listed ones, fetched or not."""

    mirror: RemoteMirror = field(default=None, compare=False)  # type: ignore[assignment]

    def shard_paths(self) -> list[Path]:
        return sorted(
            (self.mirror.shard_path(n) for n in self.mirror.listing), key=lambda p: p.name
        )


class RemoteLabels(Labels):
    """Labels of a remote pool: each ``set`` goes up as one new object, never appended to."""

    layout: RemoteLayout

    def set(
        self,
        targets: Iterable[str],
        fields: Mapping[str, Any],
        *,
        author: str,
        at: float | None = None,
    ) -> int:
        """Write the entries as Labels does, into a new file, and upload it under a fresh name."""
        with tempfile.TemporaryDirectory(prefix=".aw-label-", dir=self.layout.root) as tmp:
            stage = Labels(Layout(Path(tmp)))
            written = stage.set(targets, fields, author=author, at=at)
            for path in stage.files():
                data = path.read_bytes()
                rel = upload_label_bytes(
                    self.layout.mirror.store, path.parent.name, path.stem, data
                )
                dest = self.layout.root / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.replace(path, dest)
        return written


def upload_label_bytes(store: RemoteStore, author_dir: str, day: str, data: bytes) -> str:
    """Upload label lines as a new object named by their hash; returns its key."""
    import hashlib

    key = f"labels/{author_dir}/{day}.{hashlib.sha256(data).hexdigest()[:16]}.jsonl"
    store.put_if_absent(key, data)
    return key


class RemotePool(Pool):
    """A pool whose sealed shards and labels live in an object store."""

    layout: RemoteLayout
    labels: RemoteLabels

    def __init__(self, layout: RemoteLayout) -> None:
        super().__init__(layout)
        self.labels = RemoteLabels(layout)
        self.url = layout.mirror.store.url

    @classmethod
    def open_url(cls, url: str, *, cache_root: Path | None = None) -> RemotePool:
        """Open ``url`` (its POOL.toml must be there and of a known version), listing it once."""
        store = RemoteStore(url)
        meta = store.get_bytes("POOL.toml")
        if meta is None:
            raise PoolError(
                f"{store.name}: not a pool (no POOL.toml object); "
                f"upload one with `aw pool push {store.name}`"
            )
        root = (cache_root or default_cache_root()) / url_key(url)
        for d in ("objects", "labels", ".cache"):
            (root / d).mkdir(parents=True, exist_ok=True)
        _write_atomic(root / "POOL.toml", meta)
        mirror = RemoteMirror(store, root)
        layout = RemoteLayout(root, mirror)
        check_version(layout)
        mirror.sync(max_age_s=0)
        return cls(layout)

    def index(self, *, refresh: bool = True) -> Any:
        with self._index_lock:
            if self._index is None:
                self._index = RemoteIndex(self.layout, self.labels)
        return super().index(refresh=refresh)

    def writer(self, **kw: Any) -> Any:
        raise PoolError(
            f"{self.url}: a remote pool is written by sealing shards locally: run the writer "
            "on a local pool with --remote URL (or `aw pool push`)"
        )

    def recover(self) -> list[Any]:
        return []  # no journals in a mirror: writers keep theirs on their own disk

    def fetch_all(self, *, verify: bool = True) -> int:
        """Download every listed shard the cache lacks; ``verify=False`` keeps bad ones for fsck."""
        self.layout.mirror.sync()
        return self.layout.mirror.fetch(self.layout.mirror.listing, verify=verify)

    def shard_bytes(self) -> int:
        return sum(self.layout.mirror.listing.values())

    def iter_records(self, *, journals: bool = True, strict: bool = False) -> Iterator[Any]:
        self.fetch_all()
        return super().iter_records(journals=journals, strict=strict)

    def iter_trajectories(
        self, selection: Selection | None = None, *, journals: bool = True
    ) -> Iterator[Trajectory]:
        self.fetch_all()
        return super().iter_trajectories(selection, journals=journals)

    def _fetch(self, row: dict[str, Any]) -> dict[str, Any]:
        source = Path(row["source"])
        if source.name.endswith(SHARD_SUFFIX) and len(shard_digest(source)) == 64:
            self.layout.mirror.ensure_shard(source.name)
        return super()._fetch(row)


def _write_atomic(path: Path, data: bytes) -> None:
    if path.is_file() and path.read_bytes() == data:
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
