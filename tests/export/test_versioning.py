"""Pools that travel: merge as a union, git clone/commit/merge without conflicts, MANIFEST + fetch."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from agentworld.pool import Pool
from agentworld.pool.diff import diff_pools, pool_at_revision
from agentworld.pool.layout import shard_digest
from agentworld.pool.manifest import check_manifest, fetch_shards, write_manifest
from agentworld.pool.merge import merge_pools
from agentworld.pool.shards import verify_shard
from tests.export.trajectories import fill

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def git(cwd: Path, *args: str) -> str:
    res = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, f"git {args}: {res.stdout}{res.stderr}"
    return res.stdout


def init_repo(path: Path) -> None:
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.name", "Test")
    git(path, "config", "user.email", "test@example.com")


def snapshot(pool_root: Path) -> tuple[list[str], dict]:
    """Every record (sorted canonical JSON) and effective labels: what readers see."""
    import orjson

    pool = Pool.open(pool_root, recover=False)
    recs = sorted(
        orjson.dumps(r, option=orjson.OPT_SORT_KEYS).decode() for r in pool.iter_records()
    )
    labels = {t: {f: e.value for f, e in fs.items()} for t, fs in pool.labels.effective().items()}
    return recs, labels


def assert_clean(pool_root: Path) -> None:
    """fsck when the pool package has it; always: shards verify, labels parse, records read."""
    pool = Pool.open(pool_root)
    for p in pool.layout.shard_paths():
        assert verify_shard(p) is None, p
    pool.labels.effective()
    assert all(t.end is not None for t in pool.iter_trajectories())
    try:
        from agentworld.pool.fsck import fsck  # written on another branch
    except ImportError:
        return
    report = fsck(pool.layout)
    assert report.ok, report.problems


def test_merge_is_a_union_and_idempotent(tmp_path: Path) -> None:
    a, b = Pool.create(tmp_path / "a"), Pool.create(tmp_path / "b")
    fill(a, [{"tid": "tr_1", "answer": "6", "reward": 1.0}])
    fill(b, [{"tid": "tr_2", "answer": "7", "reward": 0.0}])
    a.labels.set(["trajectory:tr_1"], {"quality": "good"}, author="ann", at=100.0)
    b.labels.set(["trajectory:tr_2"], {"quality": "bad"}, author="ann", at=100.0)
    shutil.copytree(tmp_path / "a" / "objects", tmp_path / "b" / "objects", dirs_exist_ok=True)
    report = merge_pools(a.layout, tmp_path / "b")
    assert report.shards_copied == 1 and report.shards_present == 1
    assert report.label_lines_added == 1
    ids = sorted(t.id for t in a.iter_trajectories())
    assert ids == ["tr_1", "tr_2"]
    assert a.get_trajectory("tr_2").labels == {"quality": "bad"}
    again = merge_pools(a.layout, tmp_path / "b")
    assert again.shards_copied == 0 and again.label_lines_added == 0
    day_files = list((tmp_path / "a" / "labels" / "ann").glob("*.jsonl"))
    assert len(day_files) == 1 and len(day_files[0].read_text().splitlines()) == 2
    assert_clean(tmp_path / "a")


def test_merge_leaves_out_bad_label_lines_and_torn_tails_and_names_them(
    tmp_path: Path,
) -> None:
    """A garbage line or a torn last line of the other pool was copied in (a torn one with
    a newline added): every command on this pool then failed on a bad label line."""
    a, b = Pool.create(tmp_path / "a"), Pool.create(tmp_path / "b")
    fill(a, [{"tid": "tr_1", "answer": "6", "reward": 1.0}])
    a.labels.set(["trajectory:tr_1"], {"quality": "good"}, author="ann", at=100.0)
    b.labels.set(["trajectory:tr_1"], {"tags": ["x"]}, author="bob", at=200.0)
    (bobs,) = b.layout.labels.glob("bob/*.jsonl")
    with open(bobs, "ab") as f:
        f.write(b"this is garbage\n")
        f.write(b'{"target": "trajectory:tr_1", "author": "bob", "ti')  # torn: not data
    mine = a.layout.labels / "bob" / bobs.name  # this pool's copy, with a torn append
    mine.parent.mkdir()
    mine.write_bytes(b'{"target": "traj')  # cut before merging appends, not fused
    report = merge_pools(a.layout, tmp_path / "b")
    assert report.label_lines_added == 1
    (refused,) = report.label_lines_refused
    assert refused.startswith(f"labels/bob/{bobs.name}:2: bad label line: ")
    assert_clean(tmp_path / "a")  # every line in this pool parses
    assert a.labels.effective()["trajectory:tr_1"]["tags"].value == ["x"]


def test_merge_refuses_a_corrupt_shard_and_merges_the_rest(tmp_path: Path) -> None:
    """One bad shard there stopped the merge at it, the good ones and the labels not
    copied, while the message named only the bad one."""
    a, b = Pool.create(tmp_path / "a"), Pool.create(tmp_path / "b")
    fill(b, [{"tid": "tr_2", "answer": "7", "reward": 0.0}])
    shard = b.layout.shard_paths()[0]
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF
    shard.write_bytes(bytes(data))
    fill(b, [{"tid": "tr_3", "answer": "6", "reward": 1.0}])
    b.labels.set(["trajectory:tr_3"], {"quality": "good"}, author="ann", at=100.0)
    report = merge_pools(a.layout, tmp_path / "b")
    (refused,) = report.shards_refused
    assert shard.name in refused and "does not match" in refused
    assert report.shards_copied == 1 and report.label_lines_added == 1
    assert [t.id for t in a.iter_trajectories()] == ["tr_3"]
    assert_clean(tmp_path / "a")


def test_git_clone_reads_identically_and_two_machines_merge(tmp_path: Path) -> None:
    origin = tmp_path / "origin"
    origin.mkdir()
    init_repo(origin)
    pool = Pool.create(origin / "pool")
    fill(pool, [{"tid": "tr_base", "answer": "6", "reward": 1.0}])
    pool.labels.set(["trajectory:tr_base"], {"quality": "good"}, author="ann")
    pool.index()  # a cache in .cache/: must stay out of git
    pool.close()
    git(origin, "add", "-A")
    git(origin, "commit", "-qm", "pool")
    assert ".cache" not in git(origin, "ls-files")

    # Machine B clones and reads the same records and labels.
    b = tmp_path / "b"
    git(tmp_path, "clone", "-q", str(origin), str(b))
    git(b, "config", "user.name", "B")
    git(b, "config", "user.email", "b@example.com")
    assert snapshot(b / "pool") == snapshot(origin / "pool")

    # Both collect and label (same author, same day file) and commit.
    pa, pb = Pool.open(origin / "pool"), Pool.open(b / "pool")
    fill(pa, [{"tid": "tr_from_a", "answer": "6", "reward": 1.0, "task": "t9"}])
    fill(pb, [{"tid": "tr_from_b", "answer": "5", "reward": 0.0, "task": "t9"}])
    pa.labels.set(["trajectory:tr_base"], {"tags": ["from-a"]}, author="ann")
    pb.labels.set(["trajectory:tr_from_b"], {"trainable": False}, author="ann")
    git(origin, "add", "-A")
    git(origin, "commit", "-qm", "collect on a")
    git(b, "add", "-A")
    git(b, "commit", "-qm", "collect on b")

    # A pulls B: no conflicts (label files merge as a union of lines).
    git(origin, "pull", "-q", "--no-rebase", "--no-edit", str(b), "main")
    assert git(origin, "status", "--porcelain") == ""
    ids = sorted(t.id for t in Pool.open(origin / "pool").iter_trajectories())
    assert ids == ["tr_base", "tr_from_a", "tr_from_b"]
    merged = Pool.open(origin / "pool")
    merged.index()  # the cached index catches up with what git brought
    assert merged.get_trajectory("tr_base").labels == {"quality": "good", "tags": ["from-a"]}
    assert merged.get_trajectory("tr_from_b").labels == {"trainable": False}
    assert_clean(origin / "pool")

    # What the merge brought, between two revisions.
    d = diff_pools(pool_at_revision(origin / "pool", "HEAD~2", tmp_path / "rev"), origin / "pool")
    assert d.added_trajectories == ["tr_from_a", "tr_from_b"]
    changed = {(c["target"], c["field"]) for c in d.label_changes}
    assert changed == {("trajectory:tr_base", "tags"), ("trajectory:tr_from_b", "trainable")}


def test_manifest_route_keeps_shards_out_of_git(tmp_path: Path) -> None:
    origin = tmp_path / "origin"
    origin.mkdir()
    init_repo(origin)
    pool = Pool.create(origin / "pool")
    fill(pool, [{"tid": "tr_1", "answer": "6", "reward": 1.0}])
    assert write_manifest(pool.layout, ignore_objects=True) == 1
    git(origin, "add", "-A")
    git(origin, "commit", "-qm", "pool manifest")
    tracked = git(origin, "ls-files")
    assert "pool/MANIFEST" in tracked and "objects/" not in tracked

    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(origin), str(clone))
    layout = Pool.open(clone / "pool").layout
    check = check_manifest(layout)
    assert not check.ok and len(check.missing) == 1
    copied, after = fetch_shards(layout, str(origin / "pool"))
    assert copied == 1 and after.ok
    assert snapshot(clone / "pool") == snapshot(origin / "pool")

    # Two machines add shards; MANIFEST merges as a union of lines.
    git(clone, "config", "user.name", "C")
    git(clone, "config", "user.email", "c@example.com")
    fill(Pool.open(origin / "pool"), [{"tid": "tr_a", "answer": "6", "reward": 1.0}])
    fill(Pool.open(clone / "pool"), [{"tid": "tr_c", "answer": "6", "reward": 1.0}])
    for repo in (origin, clone):
        write_manifest(Pool.open(repo / "pool").layout)
        git(repo, "commit", "-qam", "more")
    git(origin, "pull", "-q", "--no-rebase", "--no-edit", str(clone), "main")
    layout = Pool.open(origin / "pool").layout
    check = check_manifest(layout)
    assert check.listed == 3 and len(check.missing) == 1
    copied, after = fetch_shards(layout, str(clone / "pool"))
    assert copied == 1 and after.ok and after.listed == 3
    assert sorted(t.id for t in Pool.open(origin / "pool").iter_trajectories()) == [
        "tr_1",
        "tr_a",
        "tr_c",
    ]


def test_the_manifest_follows_compaction_and_gc(tmp_path: Path) -> None:
    """After compact + gc, `--check` called every compacted shard missing (and rewriting the
    manifest kept them), and a clone with the manifest from before fetched nothing."""
    from agentworld.pool.maintenance import compact, gc

    pool = Pool.create(tmp_path / "pool")
    for i in range(3):
        fill(pool, [{"tid": f"tr_{i}", "answer": "6", "reward": 1.0}])
    assert write_manifest(pool.layout) == 3
    old_manifest = (tmp_path / "pool" / "MANIFEST").read_text()
    compact(pool)
    gc(pool)
    (shard,) = pool.layout.shard_paths()
    check = check_manifest(pool.layout)  # the old lines' records are in the new shard
    assert check.ok and check.missing == [] and check.unlisted == []
    assert write_manifest(pool.layout) == 1  # the replaced shards leave it
    assert check_manifest(pool.layout).ok

    clone = tmp_path / "clone"  # the manifest from before, superseded.txt from after
    Pool.create(clone)
    (clone / "MANIFEST").write_text(old_manifest)
    shutil.copy(tmp_path / "pool" / "superseded.txt", clone / "superseded.txt")
    layout = Pool.open(clone).layout
    assert check_manifest(layout).missing == [shard_digest(shard)]
    copied, after = fetch_shards(layout, str(tmp_path / "pool"))
    assert copied == 1 and after.ok
    assert snapshot(clone) == snapshot(tmp_path / "pool")
