"""Sealed shards: immutable zstd JSONL files named by the sha256 of their bytes."""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import zstandard

from agentworld.errors import CorruptDataError
from agentworld.pool.layout import Layout, fsync_dir, shard_digest

# Long-distance matching with a 128 MiB window lets the compressor find the
# previous turn of a conversation even when 64 other trajectories were written
# in between: multi-turn prompts are stored (almost) once without any
# reference bookkeeping. 2^27 is also what `zstd -d` accepts without flags.
WINDOW_LOG = 27
LEVEL = 3


def _compressor() -> zstandard.ZstdCompressor:
    params = zstandard.ZstdCompressionParameters.from_level(
        LEVEL, window_log=WINDOW_LOG, enable_ldm=True, write_checksum=True
    )
    return zstandard.ZstdCompressor(compression_params=params)


def decompressor() -> zstandard.ZstdDecompressor:
    return zstandard.ZstdDecompressor(max_window_size=2**WINDOW_LOG)


def write_shard(layout: Layout, lines: Sequence[bytes]) -> Path:
    """Compress records (canonical JSON, no newlines) into a new shard; return its path.

    Sealing is deterministic: the same records give the same bytes and hence the
    same name, so sealing a journal twice (crash between rename and unlink)
    never duplicates data.
    """
    payload = b"".join(line + b"\n" for line in lines)
    data = _compressor().compress(payload)
    digest = hashlib.sha256(data).hexdigest()
    final = layout.shard_path(digest)
    if final.exists():
        return final
    layout.tmp.mkdir(parents=True, exist_ok=True)
    tmp = layout.tmp / f"{digest}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    final.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, final)
    fsync_dir(final.parent)
    return final


def read_shard_bytes(path: Path) -> bytes:
    """Decompressed content of a shard (raises CorruptDataError naming the file)."""
    try:
        with open(path, "rb") as f:
            return decompressor().stream_reader(f, read_across_frames=True).read()
    except zstandard.ZstdError as exc:
        raise CorruptDataError(str(path), f"zstd: {exc}") from None


def iter_shard_lines(path: Path) -> Iterator[bytes]:
    """Stream a shard's JSON lines without holding it all in memory."""
    try:
        with open(path, "rb") as f:
            reader = decompressor().stream_reader(f, read_across_frames=True)
            buffered = io.BufferedReader(reader, buffer_size=1 << 20)  # type: ignore[arg-type]
            for line in buffered:
                if not line.endswith(b"\n"):
                    raise CorruptDataError(str(path), "last line has no newline (truncated)")
                yield line[:-1]
    except zstandard.ZstdError as exc:
        raise CorruptDataError(str(path), f"zstd: {exc}") from None


def verify_shard(path: Path) -> str | None:
    """Re-hash a shard; return a problem description, or None when it matches its name."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    if h.hexdigest() != shard_digest(path):
        return f"content hash {h.hexdigest()[:16]}… does not match its name"
    return None
