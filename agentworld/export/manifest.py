"""The manifest written beside every export: which shards, label files and filters made it."""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from agentworld import __version__
from agentworld.pool import Pool
from agentworld.pool.layout import shard_digest
from agentworld.pool.reader import source_paths

NAMES_KEPT = 5  # names kept per left-out reason: enough to find them, never the whole pool


class Tally(Counter[str]):
    """An export's counts, plus the first few names of what each left-out count left out."""

    def __init__(self) -> None:
        super().__init__()
        self.names: dict[str, list[str]] = {}


def left_out(counts: Counter[str], reason: str, name: str) -> None:
    """Count something an export left out, keeping its name when ``counts`` is a Tally."""
    counts[reason] += 1
    if isinstance(counts, Tally):
        names = counts.names.setdefault(reason, [])
        if len(names) < NAMES_KEPT:
            names.append(name)


def manifest_path(out: Path) -> Path:
    """``<out>.manifest.json``: beside the output, never inside a dataset folder."""
    return out.with_name(out.name + ".manifest.json")


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def _output_files(out: Path) -> list[dict[str, Any]]:
    paths = sorted(p for p in out.rglob("*") if p.is_file()) if out.is_dir() else [out]
    base = out if out.is_dir() else out.parent
    return [
        {"path": str(p.relative_to(base)), "bytes": p.stat().st_size, "sha256": _file_sha256(p)}
        for p in paths
        if p.exists()
    ]


def pool_inputs(pool: Pool) -> dict[str, Any]:
    """The pool's shards, live journals and label files as they are now (what an export reads)."""
    shards, journals = [], []
    for kind, path in source_paths(pool.layout):
        if kind == "shard":
            shards.append("sha256:" + shard_digest(path))
        else:
            journals.append(str(path.relative_to(pool.root)))
    labels = [
        {
            "path": str(p.relative_to(pool.root)),
            "bytes": p.stat().st_size,
            "sha256": _file_sha256(p),
        }
        for p in pool.labels.files()
    ]
    return {"shards": shards, "journals": journals, "label_files": labels}


def write_manifest(
    *,
    pool: Pool,
    fmt: str,
    out: Path,
    filters: dict[str, Any],
    options: dict[str, Any],
    counts: Counter[str],
    inputs: dict[str, Any],
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write ``<out>.manifest.json`` and return its content."""
    manifest = {
        "kind": "agentworld-export",
        "version": 1,
        "agentworld": __version__,
        "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "format": fmt,
        "options": options,
        "output": str(out.resolve()),
        "files": _output_files(out),
        "pool": getattr(pool, "url", None) or str(pool.root.resolve()),  # a remote: its URL
        "filters": filters,
        **inputs,
        "counts": dict(sorted(counts.items())),
        "left_out": {
            reason: {"count": counts[reason], "examples": names}
            for reason, names in sorted(getattr(counts, "names", {}).items())
        },
        **(extra or {}),
    }
    path = manifest_path(out)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_bytes(orjson.dumps(manifest, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    os.replace(tmp, path)
    return manifest
