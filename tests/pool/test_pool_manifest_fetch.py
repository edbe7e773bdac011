"""`aw pool fetch` (manifest.fetch_shards) never deletes a shard it cannot replace: only gc
deletes (spec 4.3), and a damaged shard is swapped only for a verified copy."""

from __future__ import annotations

from pathlib import Path

from agentworld.pool import Pool
from agentworld.pool.manifest import fetch_shards, manifest_file, write_manifest
from agentworld.pool.shards import verify_shard

from .conftest import write_trajectories


def _list_size(pool: Pool, size: int) -> Path:
    """Write the MANIFEST, then make its one line list ``size`` bytes; the shard's path."""
    (shard,) = pool.layout.shard_paths()
    write_manifest(pool.layout)
    path = manifest_file(pool.layout)
    digest = shard.name.split(".")[0]
    path.write_text(
        path.read_text().replace(f"{digest} {shard.stat().st_size}", f"{digest} {size}")
    )
    return shard


def test_a_good_shard_listed_with_another_size_is_kept(pool: Pool, tmp_path: Path) -> None:
    write_trajectories(pool, 1, 2)
    shard = _list_size(pool, 999_999)
    data = shard.read_bytes()
    (tmp_path / "empty").mkdir()
    copied, _ = fetch_shards(pool.layout, str(tmp_path / "empty"))
    assert copied == 0
    assert shard.read_bytes() == data  # it matches its name: the MANIFEST line is wrong


def test_a_damaged_shard_stays_until_a_verified_copy_replaces_it(
    pool: Pool, tmp_path: Path
) -> None:
    write_trajectories(pool, 1, 2)
    shard = _list_size(pool, 1)
    good = shard.read_bytes()
    shard.write_bytes(good[:-3])  # truncated: fails its hash, and its size is not listed
    (tmp_path / "empty").mkdir()
    copied, after = fetch_shards(pool.layout, str(tmp_path / "empty"))  # nothing to fetch
    assert copied == 0 and not after.ok and shard.read_bytes() == good[:-3]

    other = Pool.create(tmp_path / "other")
    copy = other.layout.shard_path(shard.name.split(".")[0])
    copy.parent.mkdir(parents=True)
    copy.write_bytes(good)
    copied, _ = fetch_shards(pool.layout, str(other.root))
    assert copied == 1 and shard.read_bytes() == good and verify_shard(shard) is None
