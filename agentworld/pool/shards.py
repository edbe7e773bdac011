"""Sealed shards: immutable zstd JSONL files named by the sha256 of their bytes."""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import zstandard

from agentworld import records
from agentworld.errors import CorruptDataError, RecordError
from agentworld.pool.layout import Layout, fsync_dir, shard_digest

# Long-distance matching with a 128 MiB window lets the compressor find the
# previous turn of a conversation even when 64 other trajectories were written
# in between: multi-turn prompts are stored (almost) once without any
# reference bookkeeping. 2^27 is also what `zstd -d` accepts without flags.
# With LDM finding the long repeats, level 1 is both faster and smaller than
# level 3 on agent records (bench/pool_storage.py, bench/pool_write.py).
WINDOW_LOG = 27
LEVEL = 1


def _compressor(*, streaming: bool = False) -> zstandard.ZstdCompressor:
    """The compressor of sealed shards.

    One-shot sealing keeps its parameters fixed so re-sealing a journal gives
    the same shard. Streamed shards are not reproducible anyway, so they use
    LDM buckets of 4 instead of 8 entries: about 20% faster, and the same size
    on agent records (bench/pool_write.py, bench/pool_storage.py).
    """
    params = zstandard.ZstdCompressionParameters.from_level(
        LEVEL,
        window_log=WINDOW_LOG,
        enable_ldm=True,
        write_checksum=True,
        **({"ldm_bucket_size_log": 2} if streaming else {}),
    )
    return zstandard.ZstdCompressor(compression_params=params)


# Idle compressors for shard builders. A fresh one costs more than the compressing
# itself on a journal of a few MB: its 2^27 window and LDM tables are allocated and
# page-faulted in anew (freed memory goes back to the kernel), so builders reuse them.
_IDLE_MAX = 1
_idle: list[zstandard.ZstdCompressor] = []
_idle_lock = threading.Lock()


def _take_compressor() -> zstandard.ZstdCompressor:
    with _idle_lock:
        if _idle:
            return _idle.pop()
    return _compressor(streaming=True)


def _give_back(cctx: zstandard.ZstdCompressor) -> None:
    with _idle_lock:
        if len(_idle) < _IDLE_MAX:
            _idle.append(cctx)


def decompressor() -> zstandard.ZstdDecompressor:
    return zstandard.ZstdDecompressor(max_window_size=2**WINDOW_LOG)


def write_shard(layout: Layout, lines: Sequence[bytes]) -> Path:
    """Compress records (canonical JSON, no newlines) into a new shard; return its path.

    Sealing is deterministic: the same records give the same bytes and hence the
    same name, so sealing a journal twice (crash between rename and unlink)
    never duplicates data. A file already there under that name is trusted only
    when it matches its hash; a damaged one is replaced (the caller is about to
    delete the journal these records came from).
    """
    payload = b"\n".join([*lines, b""])  # one copy; every line ends with a newline
    data = _compressor().compress(payload)
    digest = hashlib.sha256(data).hexdigest()
    final = layout.shard_path(digest)
    if final.exists() and verify_shard(final) is None:
        return final
    return install_shard(layout, stage_shard(layout, digest, [data]), digest)


def stage_shard(layout: Layout, digest: str, chunks: Sequence[bytes]) -> Path:
    """Write a shard's compressed bytes to a fsynced temporary file; return its path."""
    layout.tmp.mkdir(parents=True, exist_ok=True)
    tmp = layout.tmp / f"{digest}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    with open(tmp, "wb") as f:
        for chunk in chunks:
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
    return tmp


def install_shard(layout: Layout, tmp: Path, digest: str) -> Path:
    """Rename a staged shard to its content name, durably; return the final path."""
    final = layout.shard_path(digest)
    final.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, final)
    fsync_dir(final.parent)
    return final


# Output buffer of a shard builder: big enough that compressing a commit's batch
# (a few MB of JSON) returns in one piece, so the compressing thread gives up and
# retakes the GIL once a batch; each retake waits out the appender's switch interval.
_BUILD_OUTPUT_BYTES = 8 << 20


class _Chunks:
    """Where a builder's compressed bytes go: kept in order and hashed as they arrive."""

    def __init__(self) -> None:
        self.hash = hashlib.sha256()
        self.chunks: list[bytes] = []

    def write(self, data: bytes) -> int:
        self.hash.update(data)
        self.chunks.append(data)
        return len(data)


class ShardBuilder:
    """A shard compressed while its records are committed, instead of all at once on seal.

    zstd releases the GIL, so a writer's compressor thread compresses each
    batch on another core while appenders validate and encode the next. The
    streamed frame differs from ``write_shard``'s one-shot frame of the same
    records (chunked input, no content size, faster LDM parameters), so the
    result is not deterministic: the journal's sealed trailer (journal.py)
    keeps a crash from sealing the records twice.
    """

    def __init__(self) -> None:
        self._cctx = _take_compressor()
        self._out = _Chunks()
        self._writer = self._cctx.stream_writer(
            self._out, write_size=_BUILD_OUTPUT_BYTES, closefd=False
        )
        self._digest: str | None = None
        self.records = 0

    @property
    def chunks(self) -> list[bytes]:
        """The compressed bytes so far (the whole shard once finished)."""
        return self._out.chunks

    def add(self, lines: Sequence[bytes]) -> None:
        """Compress more records (canonical JSON, no newlines) into the frame."""
        self._writer.write(b"\n".join([*lines, b""]))
        self.records += len(lines)

    def finish(self) -> str:
        """End the frame; return the shard's sha256 (its name). Nothing may be added after.

        Calling it again returns the same name.
        """
        if self._digest is None:
            self._writer.flush(zstandard.FLUSH_FRAME)
            self._digest = self._out.hash.hexdigest()
            _give_back(self._cctx)  # only once the frame ended cleanly
        return self._digest


_READ_BYTES = 1 << 20


def read_verified(path: Path) -> bytes:
    """A shard's compressed bytes, checked against the sha256 in its name."""
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != shard_digest(path):
        raise CorruptDataError(str(path), f"content hash {digest[:16]}… does not match its name")
    return data


def iter_decompressed(path: Path, data: bytes) -> Iterator[bytes]:
    """Decompressed pieces of a shard's bytes.

    zstandard's ``stream_reader`` returns what it has at EOF without complaint,
    so a truncated shard would silently read as a shorter one; a decompression
    object says whether the frame really ended. Concatenated frames are valid.
    """
    dctx = decompressor()
    dobj = dctx.decompressobj()
    in_frame = False
    view = memoryview(data)
    try:
        for start in range(0, len(data), _READ_BYTES):
            chunk: bytes | memoryview = view[start : start + _READ_BYTES]
            while chunk:
                in_frame = True
                out = dobj.decompress(chunk)
                if out:
                    yield out
                if not dobj.eof:
                    break
                chunk = dobj.unused_data
                dobj = dctx.decompressobj()
                in_frame = False
    except zstandard.ZstdError as exc:
        raise CorruptDataError(str(path), f"zstd: {exc}") from None
    if in_frame:
        raise CorruptDataError(str(path), "truncated: the last zstd frame does not end")
    if not data:
        raise CorruptDataError(str(path), "empty file: a shard holds at least one zstd frame")


def read_shard_bytes(path: Path, data: bytes | None = None) -> bytes:
    """Decompressed content of a shard, hash-checked (CorruptDataError names the file)."""
    return b"".join(iter_decompressed(path, read_verified(path) if data is None else data))


def iter_shard_lines(path: Path, data: bytes | None = None) -> Iterator[bytes]:
    """A shard's JSON lines (without newline), hash-checked before the first one is yielded.

    Checking the hash first costs little (compressed bytes are small) and means
    a flipped byte is never read as data, even before zstd's checksum at the
    frame's end would catch it. ``data``: the shard's bytes if already checked.
    """
    rest = b""
    for piece in iter_decompressed(path, read_verified(path) if data is None else data):
        lines = piece.split(b"\n")
        if rest:  # only the line cut at the piece boundary is glued, not the whole piece
            lines[0] = rest + lines[0]
        rest = lines.pop()
        yield from lines
    if rest:
        raise CorruptDataError(str(path), "last line has no newline (truncated)")


def invalid_line(path: Path, line: int, exc: RecordError) -> CorruptDataError:
    """The error for a stored line that is not a valid record, naming the file and 1-based line."""
    return CorruptDataError(str(path), f"line {line} is not a valid record: {exc}")


def shard_records(path: Path, data: bytes | None = None) -> Iterator[tuple[bytes, dict[str, Any]]]:
    """(line, record) of each line of a shard, every line checked as ``fsck`` checks it.

    For operations that must not carry a bad record further (merge, compaction,
    gc): the first line that is not a valid record raises CorruptDataError
    naming the shard and the line. Readers skip such lines instead (reader.py).
    """
    for n, line in enumerate(iter_shard_lines(path, data), 1):
        try:
            record = records.parse(line)
        except RecordError as exc:
            raise invalid_line(path, n, exc) from None
        yield line, record


def verify_shard(path: Path) -> str | None:
    """Re-hash a shard; return a problem description, or None when it matches its name."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    if h.hexdigest() != shard_digest(path):
        return f"content hash {h.hexdigest()[:16]}… does not match its name"
    return None


def copy_shard(
    src: Path, dst_layout: Layout, *, replace: bool = False, lines_checked: bool = False
) -> int:
    """Copy one shard into a pool once it passes what ``fsck`` checks; returns bytes copied
    (0 when present).

    Its hash must match its name and every line must be a valid record: a shard
    readers would have to skip is refused (CorruptDataError names it and the
    first bad line), never spread to another pool. ``replace``: copy even over a
    file of that name (a damaged one), which is swapped only once the copy passed.
    ``lines_checked``: the caller read every line through ``shard_records`` already
    (merge's check of ids); the hash, checked again, proves these are those bytes.
    """
    digest = shard_digest(src)
    final = dst_layout.shard_path(digest)
    if final.exists() and not replace:
        return 0
    try:
        data = read_verified(src)
        if not lines_checked:
            for _ in shard_records(src, data):
                pass
    except CorruptDataError as exc:
        raise CorruptDataError(
            exc.path, f"{exc.problem}; not copied (`aw pool fsck` there lists every problem)"
        ) from None
    tmp = stage_shard(dst_layout, digest, [data])
    try:
        install_shard(dst_layout, tmp, digest)
    finally:
        tmp.unlink(missing_ok=True)
    return len(data)
