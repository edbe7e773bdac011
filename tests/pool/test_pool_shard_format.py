"""Spec 4.1-4.2, pinned: what a sealed shard's zstd frame looks like and what readers take.

A reader in another language relies on these: one frame whose window ``zstd -d`` decodes
without flags, with its content checksum, and its content size when sealing knew it;
several frames read as one; bytes after the last frame that are not a frame, or a
window past 2^27, make the shard corrupt, never shorter.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import zstandard

from agentworld import records
from agentworld.errors import CorruptDataError
from agentworld.pool import Pool
from agentworld.pool.fsck import fsck
from agentworld.pool.reader import iter_records
from agentworld.pool.shards import write_shard

from .conftest import small_step, write_trajectories


def _lines(n: int) -> list[bytes]:
    return [records.encode(small_step("tr_s", i)) for i in range(n)]


def _install(pool: Pool, data: bytes) -> Path:
    """``data`` as a shard named by its hash, as if a writer had sealed it."""
    path = pool.layout.shard_path(hashlib.sha256(data).hexdigest())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("how", ["one-shot", "streamed"])
def test_a_sealed_shard_is_one_frame_zstd_reads_without_flags(pool: Pool, how: str) -> None:
    if how == "one-shot":  # recovery and compaction
        shard = write_shard(pool.layout, _lines(3))
    else:  # a writer closing its own journal
        write_trajectories(pool, 1, 3)
        (shard,) = pool.layout.shard_paths()
    data = shard.read_bytes()
    params = zstandard.get_frame_parameters(data)
    assert params.window_size <= 2**27 and params.has_checksum
    if how == "one-shot":
        assert params.content_size == len(zstandard.ZstdDecompressor().decompress(data))
    else:
        assert params.content_size == zstandard.CONTENTSIZE_UNKNOWN
    dobj = zstandard.ZstdDecompressor(max_window_size=2**27).decompressobj()
    content = dobj.decompress(data)
    assert dobj.eof and dobj.unused_data == b""  # exactly one frame
    assert content.endswith(b"\n") and b"\n\n" not in content


def test_concatenated_frames_read_as_one_shard(pool: Pool) -> None:
    lines = _lines(4)
    cctx = zstandard.ZstdCompressor()
    data = cctx.compress(b"\n".join(lines[:2]) + b"\n") + cctx.compress(
        b"\n".join(lines[2:]) + b"\n"
    )
    _install(pool, data)
    assert [r["index"] for r in iter_records(pool.layout)] == [0, 1, 2, 3]
    assert fsck(pool).ok


@pytest.mark.parametrize(
    "damage",
    ["trailing bytes", "window over 2^27", "no final newline"],
)
def test_what_makes_a_shard_whose_hash_matches_corrupt(pool: Pool, damage: str) -> None:
    payload = b"\n".join(_lines(2)) + b"\n"
    if damage == "trailing bytes":
        data = zstandard.ZstdCompressor().compress(payload) + b"not a frame"
    elif damage == "window over 2^27":
        params = zstandard.ZstdCompressionParameters(window_log=28)
        cobj = zstandard.ZstdCompressor(compression_params=params).compressobj()
        data = cobj.compress(payload) + cobj.flush()  # size unknown: the window stays
        assert zstandard.get_frame_parameters(data).window_size == 2**28
    else:
        data = zstandard.ZstdCompressor().compress(payload[:-1])
    shard = _install(pool, data)
    with pytest.raises(CorruptDataError) as err:
        list(iter_records(pool.layout, strict=True))
    assert err.value.path == str(shard)
    (problem,) = fsck(pool).problems
    assert problem.path == str(shard.relative_to(pool.root))
