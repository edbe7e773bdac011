"""Where things live inside a pool directory, and the format version that guards it."""

from __future__ import annotations

import os
import threading
import tomllib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from agentworld.errors import PoolError, PoolFormatError

FORMAT_NAME = "agentworld-pool"
FORMAT_VERSION = 1
SHARD_SUFFIX = ".jsonl.zst"
JOURNAL_SUFFIX = ".journal"

_GITIGNORE = """\
# Derived or live state: rebuildable, never versioned.
.cache/
journals/
objects/tmp/
state/locks/
# What a proxy on this machine stamps (another clone's engine is on other weights).
state/policy/
"""

FILTERS_FILE = "filters.toml"

_GITATTRIBUTES = """\
# Sealed shards are immutable compressed blobs; never diff or merge them.
objects/** binary
# Labels and supersession lists are append-only text: a union merge never conflicts.
labels/** merge=union
superseded.txt merge=union
# `aw tui`'s saved filters, one `name = "line"` each: two clones' new names merge too.
filters.toml merge=union
"""


@dataclass(frozen=True)
class Layout:
    """Paths of one pool directory."""

    root: Path

    @property
    def meta(self) -> Path:
        return self.root / "POOL.toml"

    @property
    def objects(self) -> Path:
        return self.root / "objects"

    @property
    def tmp(self) -> Path:
        return self.root / "objects" / "tmp"

    @property
    def journals(self) -> Path:
        return self.root / "journals"

    @property
    def labels(self) -> Path:
        return self.root / "labels"

    @property
    def cache(self) -> Path:
        return self.root / ".cache"

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def damaged(self) -> Path:
        """Journals recovery found damaged mid-way, kept whole (``journal.seal_journal``)."""
        return self.root / "damaged"

    @property
    def superseded(self) -> Path:
        return self.root / "superseded.txt"

    @property
    def filters(self) -> Path:
        """`aw tui`'s saved filters (``tui.saved_filters``); pool readers ignore the file."""
        return self.root / FILTERS_FILE

    def shard_path(self, hexdigest: str) -> Path:
        return self.objects / hexdigest[:2] / f"{hexdigest}{SHARD_SUFFIX}"

    def shard_paths(self) -> list[Path]:
        """Every sealed shard, sorted by name (the pool's stable order)."""
        if not self.objects.is_dir():
            return []
        out = []
        for fan in sorted(self.objects.iterdir()):
            if len(fan.name) != 2 or not fan.is_dir():
                continue
            out.extend(p for p in fan.iterdir() if p.name.endswith(SHARD_SUFFIX))
        return sorted(out, key=lambda p: p.name)

    def journal_paths(self) -> list[Path]:
        """Journals of live or crashed writers (names starting with '.' are being created)."""
        if not self.journals.is_dir():
            return []
        return sorted(
            p
            for p in self.journals.iterdir()
            if p.name.endswith(JOURNAL_SUFFIX) and not p.name.startswith(".")
        )


def read_superseded(layout: Layout) -> dict[str, str]:
    """``superseded.txt`` as old shard file name -> the file name of the shard that replaced it.

    Each line is ``<old> <new>`` (``#`` starts a comment). Lines without a
    replacement are ignored: a shard is only hidden when we know what holds its
    records instead.
    """
    try:
        text = layout.superseded.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return {}
    out: dict[str, str] = {}
    for line in text.splitlines():
        tokens = line.split("#", 1)[0].split()
        if len(tokens) >= 2 and tokens[0] != tokens[1]:
            out[tokens[0]] = tokens[1]
    return out


def final_replacement(superseded: dict[str, str], name: str) -> str:
    """Follow a chain of compactions (a -> b, b -> c) to the shard that holds the records now."""
    seen = {name}
    while name in superseded:
        name = superseded[name]
        if name in seen:  # a cycle (hand-edited file): stop rather than loop
            break
        seen.add(name)
    return name


def hidden_shards(layout: Layout) -> set[str]:
    """Shard file names readers skip: superseded, and their replacement is present."""
    sup = read_superseded(layout)
    out = set()
    for old in sup:
        final = final_replacement(sup, old)
        if final != old and final not in sup and shard_file(layout, final).exists():
            out.add(old)
    return out


def shard_file(layout: Layout, name: str) -> Path:
    """The path of a shard given its file name (``<sha256 hex>.jsonl.zst``)."""
    return layout.objects / name[:2] / name


def shard_digest(path: Path) -> str:
    """The hex sha256 a shard file is named by."""
    return path.name[: -len(SHARD_SUFFIX)]


def init_pool(root: Path) -> Layout:
    """Create a pool directory (idempotent: an existing pool is checked, not overwritten)."""
    layout = Layout(root)
    if layout.meta.exists():
        check_version(layout)
        return layout
    if root.exists() and any(root.iterdir()):
        raise PoolError(f"{root}: exists, is not empty and has no POOL.toml; refusing to init")
    for d in (layout.objects, layout.tmp, layout.journals, layout.labels, layout.cache):
        d.mkdir(parents=True, exist_ok=True)
    (root / ".gitignore").write_text(_GITIGNORE)
    (root / ".gitattributes").write_text(_GITATTRIBUTES)
    (layout.labels / ".keep").touch()
    created = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    tmp = layout.meta.with_suffix(".tmp")
    tmp.write_text(
        "# AgentWorld pool. Spec: docs/pool-format.md in the agentworld project.\n"
        f'format = "{FORMAT_NAME}"\nversion = {FORMAT_VERSION}\ncreated = "{created}"\n'
    )
    os.replace(tmp, layout.meta)
    return layout


def check_version(layout: Layout) -> dict[str, object]:
    """Read POOL.toml and refuse pools this build cannot read.

    A POOL.toml that is unreadable or lacks a well-typed ``format`` or
    ``version`` is a broken pool (PoolError); only a well-formed version this
    build does not know is a format mismatch (PoolFormatError).
    """
    meta = _read_meta(layout)
    fmt = meta.get("format")
    if fmt is None:
        raise PoolError(f'{layout.meta}: no `format` key; expected format = "{FORMAT_NAME}"')
    if fmt != FORMAT_NAME:
        raise PoolFormatError(f"{layout.meta}: format is {fmt!r}, not {FORMAT_NAME!r}")
    version = meta.get("version")
    if version is None:
        raise PoolError(f"{layout.meta}: no `version` key; expected version = {FORMAT_VERSION}")
    # bool is an int in Python, and 1.0 == 1: the spec says an integer, so check the type.
    if type(version) is not int:
        raise PoolError(
            f"{layout.meta}: `version` must be an integer such as {FORMAT_VERSION}, got {version!r}"
        )
    if version != FORMAT_VERSION:
        hint = "; upgrade agentworld" if version > FORMAT_VERSION else ""
        raise PoolFormatError(
            f"{layout.meta}: pool format version {version} is not supported by this build "
            f"(it reads version {FORMAT_VERSION}){hint}"
        )
    return meta


def _read_meta(layout: Layout) -> dict[str, object]:
    """POOL.toml parsed; PoolError says why it cannot be (missing, not a file, not TOML)."""
    path = layout.meta
    if not path.exists():
        raise PoolError(f"{layout.root}: not a pool (no POOL.toml); create one with `aw init`")
    if not path.is_file():
        raise PoolError(f"{path}: is not a file; a pool's POOL.toml holds its format and version")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PoolError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise PoolError(f"{path}: not valid TOML: {exc}") from None


def fsync_dir(path: Path) -> None:
    """Make a rename or unlink in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so a reader (a restart after a crash) sees the old
    file or the new one, whole, and the new one once this returns (data and rename fsynced).
    The temporary name is unique per process and thread: writers may share ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
