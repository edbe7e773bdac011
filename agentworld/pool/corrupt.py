"""What readers skip: shards the index left out as corrupt, said once per command, and
whether an id the user asked for is in one of them.

A corrupt shard is never read as data (spec 4.3); the rest of the pool stays
readable, so reading commands go on and exit 0. Without a word in their output
the shard's records would just be missing: counts lower, an open trajectory
"not found". These helpers let every command say the same thing.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence

import zstandard

from agentworld.pool.index_queries import MIN_SUFFIX
from agentworld.pool.layout import Layout
from agentworld.pool.shards import decompressor

_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_CHECKSUM_FLAG = 0x04  # Frame_Header_Descriptor bit 2: a 4-byte checksum ends the frame
_ID_FIELD = re.compile(rb'"(id|trajectory)":\s*"([^"\\]*)"')


def corrupt_note(shards: Sequence[str], *, names: bool = True) -> str | None:
    """``N corrupt shard(s) skipped (run `aw pool fsck`)``, then (``names``) which:
    the first and how many more; None when none is."""
    if not shards:
        return None
    noun = "shard" if len(shards) == 1 else "shards"
    note = f"{len(shards)} corrupt {noun} skipped (run `aw pool fsck`)"
    if names:
        note += f": {shards[0]}" + (f" and {len(shards) - 1} more" if len(shards) > 1 else "")
    return note


def shard_holding(layout: Layout, shards: Sequence[str], ident: str) -> tuple[str, bool] | None:
    """(pool-relative path, sure) of a corrupt shard where ``ident`` is: ``sure`` when a
    record's id or trajectory there is it (a prefix, or an end of ``MIN_SUFFIX``+
    characters), else the shard merely mentions it (its bytes too damaged to tell).

    Best effort, for the error of a lookup that found nothing: what of the shard
    still decompresses is searched, never used as data.
    """
    needle = ident.encode()
    mentioned = None
    for rel in shards:
        try:
            text = _salvage((layout.root / rel).read_bytes())
        except OSError:
            continue
        for _, value in _ID_FIELD.findall(text):
            if value.startswith(needle) or (len(needle) >= MIN_SUFFIX and value.endswith(needle)):
                return rel, True
        if mentioned is None and len(needle) >= MIN_SUFFIX and needle in text:
            mentioned = rel
    return (mentioned, False) if mentioned else None


def _salvage(data: bytes) -> bytes:
    """As much of a damaged shard as decompresses. zstd checks a frame's checksum before
    it hands out a small frame's content, so a flipped byte would hide all of it: the
    flag is cleared (and the checksum cut) on a copy to read past it."""
    if data[:4] == _ZSTD_MAGIC and len(data) > 9 and data[4] & _CHECKSUM_FLAG:
        data = data[:4] + bytes([data[4] & ~_CHECKSUM_FLAG]) + data[5:-4]
    out = bytearray()
    reader = decompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
    try:
        while chunk := reader.read(1 << 16):
            out += chunk
    except zstandard.ZstdError:
        pass
    return bytes(out)
