"""Pools bigger than git likes: commit a MANIFEST of shard hashes and sizes, keep objects/ out of git.

``MANIFEST`` lists one sealed shard per line (``<sha256 hex> <size_bytes>``),
sorted. It merges as a union of lines, so two machines that each added
shards merge it without conflicts. A clone then has labels and the
manifest but no shards; ``fetch_shards`` copies the listed ones from another
pool folder (or through ``rsync`` from ``host:path``) and verifies each hash;
``check_manifest`` tells which listed shards are missing or corrupt.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from agentworld.errors import ConfigError, CorruptDataError
from agentworld.pool.layout import (
    SHARD_SUFFIX,
    Layout,
    final_replacement,
    read_superseded,
    shard_digest,
)
from agentworld.pool.shards import copy_shard, verify_shard

HEADER = "# agentworld pool manifest v1: <sha256> <size_bytes> per sealed shard\n"
GITIGNORE_LINES = ("objects/",)
GITATTRIBUTES_LINES = ("MANIFEST merge=union",)


def manifest_file(layout: Layout) -> Path:
    return layout.root / "MANIFEST"


def read_manifest(layout: Layout) -> dict[str, int]:
    """hex digest -> size of every listed shard (a bad line raises CorruptDataError)."""
    path = manifest_file(layout)
    if not path.exists():
        raise ConfigError(f"{path}: no MANIFEST; write one with `aw pool manifest`")
    out: dict[str, int] = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 2 or len(parts[0]) != 64 or not parts[1].isdigit():
            raise CorruptDataError(f"{path}:{n}", "expected '<sha256 hex> <size_bytes>'")
        out[parts[0]] = int(parts[1])
    return out


def write_manifest(
    layout: Layout, *, ignore_objects: bool = False, corrupt: list[str] | None = None
) -> int:
    """(Re)write MANIFEST from the shards present plus those already listed; returns the count.

    Listed shards that are absent here stay listed (a clone that has not
    fetched them still records them). With ``ignore_objects``, also set the
    pool's .gitignore and .gitattributes up for the manifest route. A shard
    listed for the first time is hashed: one that does not match its name is
    listed all the same (its name is what the pool should hold) and named in
    ``corrupt`` (``<path>: <problem>``), as nothing could fetch it from here.
    """
    listed: dict[str, int] = {}
    if manifest_file(layout).exists():
        listed = read_manifest(layout)
    for p in layout.shard_paths():
        digest = shard_digest(p)
        if digest not in listed and corrupt is not None:
            problem = verify_shard(p)
            if problem is not None:
                corrupt.append(f"{p.relative_to(layout.root)}: {problem}")
        listed[digest] = p.stat().st_size
    # A shard compaction replaced (superseded.txt) goes once its replacement is listed:
    # gc deletes it, and `--check` would call it missing forever.
    sup = read_superseded(layout)
    for digest in list(listed):
        holder = _holder(layout, digest, sup)
        if holder != digest and holder in listed:
            del listed[digest]
    body = HEADER + "".join(f"{h} {listed[h]}\n" for h in sorted(listed))
    tmp = layout.root / f".MANIFEST.{os.getpid()}.tmp"
    tmp.write_text(body)
    os.replace(tmp, manifest_file(layout))
    if ignore_objects:
        _ensure_lines(layout.root / ".gitignore", GITIGNORE_LINES)
        _ensure_lines(layout.root / ".gitattributes", GITATTRIBUTES_LINES)
    return len(listed)


def objects_ignored(layout: Layout) -> bool:
    """Whether the pool's .gitignore keeps objects/ out of git (the manifest route)."""
    path = layout.root / ".gitignore"
    return path.exists() and GITIGNORE_LINES[0] in path.read_text().splitlines()


def objects_tracked_by_git(layout: Layout) -> int:
    """How many shard files git still tracks under objects/ (0 outside a git work tree).

    A .gitignore line only keeps untracked files out: shards committed before the pool
    took the manifest route stay versioned, and every clone still checks them out."""
    if shutil.which("git") is None:
        return 0
    try:
        res = subprocess.run(
            ["git", "-C", str(layout.root), "ls-files", "-z", "--", "objects"],
            capture_output=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return 0
    if res.returncode != 0:  # not a git work tree
        return 0
    return sum(1 for name in res.stdout.split(b"\0") if name.endswith(SHARD_SUFFIX.encode()))


def _ensure_lines(path: Path, lines: tuple[str, ...]) -> None:
    have = path.read_text().splitlines() if path.exists() else []
    missing = [line for line in lines if line not in have]
    if missing:
        text = path.read_text() if path.exists() else ""
        if text and not text.endswith("\n"):
            text += "\n"
        path.write_text(text + "".join(f"{line}\n" for line in missing))


@dataclass
class ManifestCheck:
    listed: int = 0
    missing: list[str] = field(default_factory=list)
    corrupt: list[str] = field(default_factory=list)
    unlisted: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.missing and not self.corrupt


def _holder(layout: Layout, digest: str, sup: dict[str, str] | None = None) -> str:
    """The digest of the shard that holds a listed shard's records now: itself, or the end
    of its chain of compactions in superseded.txt."""
    sup = read_superseded(layout) if sup is None else sup
    return final_replacement(sup, digest + SHARD_SUFFIX).removesuffix(SHARD_SUFFIX)


def check_manifest(layout: Layout, *, verify: bool = True) -> ManifestCheck:
    """Which listed shards are missing, the wrong size, or (with ``verify``) fail their hash.

    A listed shard that compaction replaced (superseded.txt) needs its replacement instead,
    listed or not: after ``gc`` only the replacement holds its records."""
    listed = read_manifest(layout)
    report = ManifestCheck(listed=len(listed))
    present = {shard_digest(p): p for p in layout.shard_paths()}
    sup = read_superseded(layout)
    needed: dict[str, int | None] = {}
    for digest, size in listed.items():
        holder = _holder(layout, digest, sup)
        needed.setdefault(holder, size if holder == digest else listed.get(holder))
    for digest, size in sorted(needed.items()):
        path = present.get(digest)
        if path is None:
            report.missing.append(digest)
        elif (size is not None and path.stat().st_size != size) or (
            verify and verify_shard(path) is not None
        ):
            report.corrupt.append(digest)
    report.unlisted = sorted(set(present) - set(listed) - set(needed))
    return report


def unfetched(layout: Layout) -> int:
    """How many shards MANIFEST lists that are not here (0 without a readable MANIFEST):
    a clone on the manifest route reads as an empty pool until it fetches them."""
    if not manifest_file(layout).exists():
        return 0
    try:
        return len(check_manifest(layout, verify=False).missing)
    except (CorruptDataError, OSError):
        return 0


def fetch_shards(layout: Layout, source: str) -> tuple[int, ManifestCheck]:
    """Copy listed shards that are missing here from ``source``; returns (copied, check after).

    ``source`` is a pool folder (or its ``objects/`` folder) on this machine,
    or an rsync source ``[user@]host:path`` naming the other pool.
    """
    before = check_manifest(layout, verify=False)
    # A shard here whose size is not the listed one is fetched again only if it fails its
    # hash, and replaced only once a verified copy arrived: one that matches its name
    # holds the right bytes (the MANIFEST line is what is wrong), and deleting a damaged
    # one first left nothing when the source lacked it (only gc deletes, spec 4.3).
    damaged = [d for d in before.corrupt if verify_shard(layout.shard_path(d)) is not None]
    wanted = before.missing + damaged
    copied = 0
    if wanted:
        local = Path(source)
        if ":" in source and not local.exists():
            with tempfile.TemporaryDirectory(prefix=".aw-fetch-", dir=layout.root) as tmp:
                _rsync(source, wanted, Path(tmp))
                copied = _copy_from(Path(tmp), wanted, layout)
        else:
            if not local.is_dir():
                raise ConfigError(f"--from: {source} is not a folder")
            copied = _copy_from(local, wanted, layout)
    return copied, check_manifest(layout)


def _shard_rel(digest: str) -> str:
    return f"objects/{digest[:2]}/{digest}{SHARD_SUFFIX}"


def _copy_from(root: Path, wanted: list[str], layout: Layout) -> int:
    copied = 0
    base = root.parent if root.name == "objects" else root
    for digest in wanted:
        src = base / _shard_rel(digest)
        if src.exists():
            copy_shard(src, layout, replace=True)  # wanted: missing here, or damaged
            copied += 1
    return copied


def _rsync(source: str, wanted: list[str], dest: Path) -> None:
    if shutil.which("rsync") is None:
        raise ConfigError("--from host:path needs rsync on this machine (or copy the pool first)")
    listing = dest / "files.txt"
    listing.write_text("".join(_shard_rel(d) + "\n" for d in wanted))
    cmd = ["rsync", "-a", f"--files-from={listing}", source.rstrip("/") + "/", str(dest)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode not in (0, 23):  # 23: some files missing there; the check reports them
        raise ConfigError(f"rsync from {source} failed: {res.stderr.strip()[:500]}")
