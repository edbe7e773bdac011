"""What changed between two pools (or two git revisions of one): trajectories, steps, shards, labels."""

from __future__ import annotations

import io
import subprocess
import tarfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentworld.errors import ConfigError
from agentworld.pool.labels import Labels
from agentworld.pool.layout import Layout, check_version, shard_digest
from agentworld.pool.reader import iter_records, source_paths


@dataclass
class PoolDiff:
    added_trajectories: list[str] = field(default_factory=list)
    removed_trajectories: list[str] = field(default_factory=list)
    added_steps: int = 0
    removed_steps: int = 0
    shards_added: list[str] = field(default_factory=list)
    shards_removed: list[str] = field(default_factory=list)
    label_changes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not any(
            (self.added_trajectories, self.removed_trajectories, self.added_steps,
             self.removed_steps, self.label_changes)
        )  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _contents(layout: Layout) -> tuple[set[str], set[str], set[str]]:
    """(trajectory ids, step ids, shard digests) of a pool, journals included."""
    trajectories, steps = set(), set()
    for rec in iter_records(layout):
        trajectories.add(rec["trajectory"])
        if rec.get("kind") == "step":
            steps.add(rec["id"])
    shards = {shard_digest(p) for kind, p in source_paths(layout) if kind == "shard"}
    return trajectories, steps, shards


def diff_pools(a_root: Path, b_root: Path) -> PoolDiff:
    """Changes that take pool A to pool B."""
    a, b = Layout(Path(a_root)), Layout(Path(b_root))
    check_version(a)
    check_version(b)
    ta, sa, ha = _contents(a)
    tb, sb, hb = _contents(b)
    out = PoolDiff(
        added_trajectories=sorted(tb - ta),
        removed_trajectories=sorted(ta - tb),
        added_steps=len(sb - sa),
        removed_steps=len(sa - sb),
        shards_added=sorted(hb - ha),
        shards_removed=sorted(ha - hb),
    )
    la, lb = Labels(a).effective(), Labels(b).effective()
    for target in sorted(la.keys() | lb.keys()):
        fa, fb = la.get(target, {}), lb.get(target, {})
        for f in sorted(fa.keys() | fb.keys()):
            old = fa[f].value if f in fa else None
            new = fb[f].value if f in fb else None
            if old != new:
                author = fb[f].author if f in fb else None
                out.label_changes.append(
                    {"target": target, "field": f, "old": old, "new": new, "author": author}
                )
    return out


def _git(cwd: Path, *args: str, text: bool = True) -> Any:
    res = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=text)
    if res.returncode != 0:
        err = res.stderr if text else res.stderr.decode(errors="replace")
        raise ConfigError(f"git {' '.join(args)}: {err.strip()[:400]}")
    return res.stdout


def pool_at_revision(pool_root: Path, rev: str, dest: Path) -> Path:
    """Materialise the pool as it was at git revision ``rev`` under ``dest``; returns its root.

    With the manifest route (objects/ not in git), shards listed in that
    revision's MANIFEST are taken from the working pool when present here.
    """
    pool_root = Path(pool_root).resolve()
    top = Path(_git(pool_root, "rev-parse", "--show-toplevel").strip())
    rel = pool_root.relative_to(top).as_posix() or "."
    data = _git(top, "archive", "--format=tar", rev, "--", rel, text=False)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(dest, filter="data")
    root = dest / rel
    manifest = root / "MANIFEST"
    if manifest.exists():
        from agentworld.pool.manifest import read_manifest
        from agentworld.pool.shards import copy_shard

        here = Layout(pool_root)
        for digest in read_manifest(Layout(root)):
            src = here.shard_path(digest)
            if src.exists():
                copy_shard(src, Layout(root))
    return root
