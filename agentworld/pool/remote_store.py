"""An object store holding a pool (``s3://``, ``gs://``, ``az://``, ``file://``), through obstore.

obstore (Rust's ``object_store`` crate, the one Delta Lake, Arrow and
DataFusion use) was picked over fsspec/s3fs for what a content-addressed pool
needs: a conditional put-if-absent (``mode="create"``, S3's ``If-None-Match``)
so two writers uploading the same shard never overwrite each other, streamed
gets that release the GIL, prefix listing, one URL scheme for S3, GCS, Azure
and local folders, and each cloud's standard credential chain read from the
environment (AWS_*, GOOGLE_*, AZURE_*; ``AWS_ENDPOINT_URL`` for MinIO or moto).
Credentials stay in the library: nothing here reads, stores or prints them,
and URLs are shown with any ``user:password@`` part removed.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from agentworld.errors import CorruptDataError, MissingExtraError, PoolError

SCHEMES = ("s3", "gs", "az", "abfs", "file")
_URL_RE = re.compile(r"^(?P<scheme>[a-z0-9]+):/(?P<slash>/?)(?P<rest>.*)$")
_USERINFO_RE = re.compile(r"^([a-z0-9]+://)[^/@]*@")
_CHUNK_BYTES = 8 << 20
# Downloads and uploads run this many at once: object stores reward parallel
# requests (per-request latency dominates small shards), and obstore releases
# the GIL while it waits.
PARALLEL = 8


def remote_url(path: str | os.PathLike[str]) -> str | None:
    """The object-store URL ``path`` names, or None for a local folder.

    Accepts ``Path("s3://b/p")`` too: pathlib folds ``//`` to ``/``, so a URL
    that went through a ``Path``-typed CLI option arrives as ``s3:/b/p``.
    """
    text = os.fspath(path)
    m = _URL_RE.match(text)
    if m is None or m["scheme"] not in SCHEMES:
        return None
    rest = m["rest"]
    if m["scheme"] == "file" and not m["slash"]:
        rest = "/" + rest  # file:/tmp/x (folded file:///tmp/x)
    if m["scheme"] == "file" and m["slash"] and not rest.startswith("/"):
        rest = "/" + rest  # file://tmp/x is taken as the absolute /tmp/x
    return f"{m['scheme']}://{rest.rstrip('/')}"


def shown(url: str) -> str:
    """The URL as it may be printed or logged: never with a user or password in it."""
    return _USERINFO_RE.sub(r"\1", url)


def url_key(url: str) -> str:
    """A short stable folder name for one remote (its local mirror and push state)."""
    return hashlib.sha256(url.encode()).hexdigest()[:16]


class RemoteStore:
    """One pool's prefix in an object store: list, get, put-if-absent, streamed downloads."""

    def __init__(self, url: str) -> None:
        try:
            from obstore.store import from_url
        except ImportError:
            raise MissingExtraError("obstore", "remote") from None
        self.url = url
        self.name = shown(url)
        kwargs: dict[str, Any] = {}
        if url.startswith("file://"):
            kwargs["mkdir"] = True
        try:
            self._store = from_url(url, **kwargs)
        except Exception as exc:  # obstore raises its own classes (and ValueError) on bad URLs
            raise PoolError(f"{self.name}: cannot open this object store: {_why(exc)}") from None

    def list(self, prefix: str) -> dict[str, int]:
        """key -> size of every object under ``prefix`` (keys relative to the pool's prefix)."""
        import obstore

        out: dict[str, int] = {}
        try:
            for chunk in obstore.list(self._store, prefix=prefix, chunk_size=1000):
                for meta in chunk:
                    out[meta["path"]] = meta["size"]
        except FileNotFoundError:
            return {}  # file:// with no such folder yet: nothing listed
        except Exception as exc:
            raise self._error("list", prefix, exc) from None
        return out

    def get_bytes(self, key: str) -> bytes | None:
        """A small object's bytes, or None when there is no such object."""
        import obstore

        try:
            return bytes(obstore.get(self._store, key).bytes())
        except FileNotFoundError:
            return None
        except Exception as exc:
            raise self._error("get", key, exc) from None

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create ``key`` unless it exists (never overwritten); True when this call created it."""
        import obstore
        from obstore.exceptions import AlreadyExistsError

        try:
            obstore.put(self._store, key, data, mode="create")
        except AlreadyExistsError:
            return False
        except Exception as exc:
            raise self._error("put", key, exc) from None
        return True

    def download(self, key: str, dest: Path, sha256: str | None = None) -> int:
        """Stream ``key`` into ``dest`` (atomically: a temp file renamed); returns its size.

        With ``sha256`` the bytes must hash to it, or CorruptDataError and no
        ``dest``: a cache named by hash never holds anything else.
        """
        import obstore

        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.{os.getpid()}.{id(dest):x}.part")
        h = hashlib.sha256()
        size = 0
        try:
            result = obstore.get(self._store, key)
            with open(tmp, "wb") as f:
                for chunk in result.stream(min_chunk_size=_CHUNK_BYTES):
                    h.update(chunk)
                    f.write(chunk)
                    size += len(chunk)
        except FileNotFoundError:
            tmp.unlink(missing_ok=True)
            raise PoolError(
                f"{self.name}/{key}: no such object (deleted since it was listed?)"
            ) from None
        except Exception as exc:
            tmp.unlink(missing_ok=True)
            raise self._error("get", key, exc) from None
        if sha256 is not None and h.hexdigest() != sha256:
            tmp.unlink(missing_ok=True)
            raise CorruptDataError(
                f"{self.name}/{key}", f"content hash {h.hexdigest()[:16]}… does not match its name"
            )
        os.replace(tmp, dest)
        return size

    def upload_file(self, key: str, path: Path) -> bool:
        """Create ``key`` from a local file unless it exists; True when this call created it."""
        return self.put_if_absent(key, path.read_bytes())

    def _error(self, op: str, key: str, exc: BaseException) -> PoolError:
        return PoolError(f"{self.name}/{key}: {op} failed: {_why(exc)}")


def _why(exc: BaseException) -> str:
    """The first line of an obstore error (its full text is a multi-line debug dump)."""
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]


def run_parallel(jobs: list[Callable[[], Any]], workers: int = PARALLEL) -> Iterator[Any]:
    """Run blocking store calls ``workers`` at a time; yields their results in order.

    The first failure is raised once the calls already started have finished.
    """
    if not jobs:
        return
    with ThreadPoolExecutor(max_workers=min(workers, len(jobs))) as pool:
        for fut in [pool.submit(job) for job in jobs]:
            yield fut.result()
