"""A pool versioned with git on two hosts: what `aw init` sets up must merge without conflicts."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from agentworld.errors import ConfigError
from agentworld.pool import Pool
from agentworld.pool.fsck import fsck
from agentworld.pool.maintenance import compact, gc
from agentworld.tui.saved_filters import SavedFilters
from tests.export.trajectories import fill
from tests.pool.conftest import run_pool_command

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def git(cwd: Path, *args: str, check: bool = True) -> str:
    res = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    if check:
        assert res.returncode == 0, f"git {args}: {res.stdout}{res.stderr}"
    return res.stdout + res.stderr


def two_hosts(tmp_path: Path) -> tuple[Path, Path]:
    """Host A's repo holding an `aw init` pool, committed, and host B's clone of it."""
    a = tmp_path / "a"
    a.mkdir()
    git(a, "init", "-q", "-b", "main")
    Pool.create(a / "pool").close()
    git(a, "add", "-A")
    git(a, "-c", "user.name=A", "-c", "user.email=a@x", "commit", "-qm", "pool")
    b = tmp_path / "b"
    git(tmp_path, "clone", "-q", str(a), str(b))
    return a, b


def commit(repo: Path, message: str) -> None:
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=H", "-c", "user.email=h@x", "commit", "-qm", message)


def pull(repo: Path, other: Path) -> str:
    return git(
        repo, "-c", "user.name=H", "-c", "user.email=h@x",
        "pull", "--no-rebase", "--no-edit", str(other), "main", check=False,
    )  # fmt: skip


def test_saved_filters_of_two_hosts_merge_without_a_conflict(tmp_path: Path) -> None:
    """Each host saved a filter of its own in `aw tui`: git's pull stopped on an add/add
    conflict in filters.toml, though the README says they travel with the pool."""
    a, b = two_hosts(tmp_path)
    SavedFilters(a / "pool").save("good", "label:good")
    commit(a, "A saves a filter")
    SavedFilters(b / "pool").save("failed", "status:failed")
    commit(b, "B saves a filter")
    out = pull(a, b)
    assert "CONFLICT" not in out
    assert git(a, "status", "--porcelain") == ""
    assert SavedFilters(a / "pool").load() == {"failed": "status:failed", "good": "label:good"}


def test_a_filter_both_hosts_saved_differently_is_named(tmp_path: Path) -> None:
    """The union merge keeps both lines of one name; the file then does not parse, and
    the error says which filter and which lines, not only TOML's 'cannot overwrite'."""
    a, b = two_hosts(tmp_path)
    SavedFilters(a / "pool").save("mine", "label:good")
    commit(a, "A")
    SavedFilters(b / "pool").save("mine", "status:failed")
    commit(b, "B")
    pull(a, b)
    with pytest.raises(ConfigError, match=r"filters\.toml:\d+: filter 'mine' is saved twice"):
        SavedFilters(a / "pool").load()


def test_two_hosts_that_each_compacted_merge_to_a_pool_fsck_passes(tmp_path: Path) -> None:
    """A compacts its shards, B adds one and compacts all: after the pull both compacted
    shards are live and hold the same records. fsck exited 6 with one 'duplicate record
    id' per record; now it passes with one warning saying how to fold them, and doing
    that leaves every record once."""
    a, b = two_hosts(tmp_path)
    for repo in (a, b):
        pool = Pool.open(repo / "pool")
        fill(pool, [{"tid": f"tr_{repo.name}1", "answer": "6", "reward": 1.0}])
        fill(pool, [{"tid": f"tr_{repo.name}2", "answer": "7", "reward": 0.0}])
        commit(repo, f"collect on {repo.name}")
    pull(b, a)
    pa, pb = Pool.open(a / "pool"), Pool.open(b / "pool")
    fill(pb, [{"tid": "tr_b3", "answer": "5", "reward": 0.0}])
    assert compact(pa).output != compact(pb).output
    commit(a, "compact on a")
    commit(b, "compact on b")
    assert "CONFLICT" not in pull(a, b)
    merged = Pool.open(a / "pool")
    every = sorted(r["id"] for r in merged.iter_records())
    assert len(every) == len(set(every))  # readers keep one copy
    assert len({t.id for t in merged.iter_trajectories()}) == 5
    report = fsck(merged)
    assert report.ok, report.problems
    (warning,) = report.warnings
    assert "byte for byte" in warning.problem and "aw pool compact" in warning.problem
    compact(merged)
    gc(merged)
    after = fsck(merged)
    assert after.ok and after.warnings == []
    assert sorted(r["id"] for r in merged.iter_records()) == every


def test_manifest_route_names_the_shards_git_still_tracks(tmp_path: Path) -> None:
    """`aw pool manifest --ignore-objects` on a pool whose shards were committed before:
    the .gitignore line left them versioned (every clone still checked them out) and the
    command said only 'MANIFEST lists N shards'."""
    a, _ = two_hosts(tmp_path)
    pool = Pool.open(a / "pool")
    fill(pool, [{"tid": "tr_1", "answer": "6", "reward": 1.0}])
    commit(a, "collect, shards in git")
    res = run_pool_command(pool, "manifest", "--ignore-objects")
    assert res.exit_code == 0, res.output
    assert "warning: git still tracks 1 shards under" in res.stderr
    assert "rm -r -q --cached objects" in res.stderr
    git(a / "pool", "rm", "-r", "-q", "--cached", "objects")
    commit(a, "manifest route")
    assert "objects/" not in git(a, "ls-files")
    again = run_pool_command(pool, "manifest")
    assert again.exit_code == 0 and "warning" not in again.stderr


def test_a_manifest_clone_before_fetch_says_what_it_lacks(tmp_path: Path) -> None:
    """A clone on the manifest route holds no shard until `aw pool fetch`: `aw pool stats`
    showed 0 trajectories and `aw pool fsck` said ok, with no word of the listed shards."""
    import orjson

    from agentworld.pool.manifest import write_manifest

    a = tmp_path / "a"
    a.mkdir()
    git(a, "init", "-q", "-b", "main")
    pool = Pool.create(a / "pool")
    fill(pool, [{"tid": "tr_1", "answer": "6", "reward": 1.0}])
    write_manifest(pool.layout, ignore_objects=True)
    commit(a, "manifest route")
    git(tmp_path, "clone", "-q", str(a), str(tmp_path / "b"))
    clone = Pool.open(tmp_path / "b" / "pool")
    stats = run_pool_command(clone, "stats", "--json")
    assert orjson.loads(stats.stdout)["manifest_missing"] == 1
    assert "not fetched" in run_pool_command(clone, "stats").stdout
    report = fsck(clone)
    assert report.ok  # a clone that has not fetched yet is not damaged
    (warning,) = report.warnings
    assert warning.path == "MANIFEST"
    assert warning.problem.startswith("1 listed shard is not here")
    assert "aw pool fetch --from" in warning.problem


def test_merge_brings_the_other_pools_saved_filters(tmp_path: Path) -> None:
    """`aw pool merge` copied shards and labels and left the other pool's saved filters
    behind, though merging by hand is to give what `git merge` gives."""
    here, there = Pool.create(tmp_path / "here"), Pool.create(tmp_path / "there")
    SavedFilters(here.root).save("good", "label:good")
    SavedFilters(there.root).save("failed", "status:failed")
    SavedFilters(there.root).save("good", "label:good")  # the same line: no second copy
    res = run_pool_command(here, "merge", str(there.root))
    assert res.exit_code == 0, res.output
    assert "1 saved filter added" in res.stderr
    assert SavedFilters(here.root).load() == {"failed": "status:failed", "good": "label:good"}
    fresh = Pool.create(tmp_path / "fresh")  # none saved yet: the file comes whole
    assert run_pool_command(fresh, "merge", str(there.root)).exit_code == 0
    assert SavedFilters(fresh.root).load() == SavedFilters(there.root).load()


def test_merge_from_a_clone_that_never_fetched_names_what_it_could_not_copy(
    tmp_path: Path,
) -> None:
    """A clone on the manifest route holds its MANIFEST and no shard: merging it said
    "0 shards copied" and nothing of the shards it lists. A pool that keeps a MANIFEST
    lists them too (as git's union merge of MANIFEST would), to fetch later."""
    from agentworld.pool.manifest import read_manifest, write_manifest

    origin = Pool.create(tmp_path / "origin")
    fill(origin, [{"tid": "tr_1", "answer": "6", "reward": 1.0}])
    write_manifest(origin.layout)
    clone = tmp_path / "clone"
    shutil.copytree(origin.root, clone, ignore=shutil.ignore_patterns("objects"))
    listed = read_manifest(origin.layout)

    plain = Pool.create(tmp_path / "plain")
    res = run_pool_command(plain, "merge", str(clone))
    assert res.exit_code == 0, res.output
    assert "1 shard its MANIFEST lists was not there (never fetched) and not merged" in res.stderr
    assert f"aw pool fetch --from SOURCE --pool {clone}" in res.stderr

    kept = Pool.create(tmp_path / "kept")
    write_manifest(kept.layout)
    res = run_pool_command(kept, "merge", str(clone))
    assert "this pool's MANIFEST lists them now" in res.stderr
    assert read_manifest(kept.layout) == listed
    fetch = run_pool_command(kept, "fetch", "--from", str(origin.root))
    assert fetch.exit_code == 0, fetch.output
    assert fsck(Pool.open(kept.root)).ok and kept.layout.shard_paths()


def test_a_proxys_kept_policy_version_stays_out_of_git(tmp_path: Path) -> None:
    """Another clone's proxy fronts an engine on other weights: it must not restore this
    host's version from a checkout."""
    from agentworld.proxy.policy_store import policy_path

    a, _ = two_hosts(tmp_path)
    for instance in (None, "w1"):
        path = policy_path(a / "pool", instance)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text('{"policy_version": 7}')
    assert "state/" not in git(a, "status", "--porcelain", "--untracked-files=all")
