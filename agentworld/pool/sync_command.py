"""`aw pool merge / diff / manifest / fetch`: pools that travel between machines and git clones.

Registered into ``pool_app`` by the CLI; only typer and the standard library
are imported at import time.
"""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

import typer

from agentworld.cli_options import POOL_OPTION
from agentworld.plural import plural


def merge(
    other: Path = typer.Argument(..., help="The pool folder to merge into this one."),
    pool_path: Path = POOL_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Union another pool's sealed shards and label lines into this pool (safe while writing)."""
    from agentworld.pool.merge import merge_pools
    from agentworld.pool.opener import open_pool

    pool = open_pool(pool_path)
    report = merge_pools(pool.layout, other, index=pool.index(refresh=False))
    if as_json:
        sys.stdout.write(json.dumps(asdict(report), indent=2) + "\n")
    typer.echo(
        f"merged {other}: {plural(report.shards_copied, 'shard')} copied "
        f"({report.bytes_copied:,} bytes), "
        f"{report.shards_present} already here, "
        + (
            f"{plural(report.shards_rewritten, 'shard')} written anew without records "
            "already here, "
            if report.shards_rewritten
            else ""
        )
        + f"{report.label_lines_added} label lines added"
        + (
            f", {plural(report.filters_added, 'saved filter')} added"
            if report.filters_added
            else ""
        ),
        err=True,
    )
    if report.trajectories_already_here:
        n = report.trajectories_already_here
        named = ", ".join(report.already_here) + (", …" if n > len(report.already_here) else "")
        typer.echo(
            f"{plural(n, 'trajectory')} there {'is' if n == 1 else 'are'} already here, one "
            f"pool holding {'it' if n == 1 else 'them'} as an `aw pool import` of the other's "
            f"({named}): this pool's copy kept, their "
            f"{plural(report.records_left_out, 'record')} not merged",
            err=True,
        )
    if report.shards_unfetched:
        from agentworld.pool.manifest import manifest_file

        n = plural(report.shards_unfetched, "shard")
        if manifest_file(pool.layout).exists():
            typer.echo(
                f"{n} its MANIFEST lists {'was' if report.shards_unfetched == 1 else 'were'} "
                "not there (never fetched): this pool's MANIFEST lists them now, and "
                "`aw pool fetch --from SOURCE` brings them from where they are kept",
                err=True,
            )
        else:
            typer.echo(
                f"{n} its MANIFEST lists {'was' if report.shards_unfetched == 1 else 'were'} "
                f"not there (never fetched) and not merged: run `aw pool fetch --from SOURCE --pool "
                f"{other}`, then merge again",
                err=True,
            )
    for line in report.label_lines_refused:
        typer.echo(f"not merged: {other}/{line}", err=True)
    for line in report.shards_refused:
        typer.echo(f"not merged: {line}", err=True)
    if report.journals_skipped:
        typer.echo(
            f"{plural(len(report.journals_skipped), 'unsealed journal')} there "
            f"{'was' if len(report.journals_skipped) == 1 else 'were'} not merged: "
            "run `aw pool seal` on that pool (once its writers stop), then merge again",
            err=True,
        )
    if report.shards_refused:  # the rest came; a script must still see that some did not
        from agentworld.errors import CorruptDataError

        raise typer.Exit(CorruptDataError.exit_code)


def diff(
    a: str = typer.Argument(..., help="Old pool folder (or, with --git, a revision)."),
    b: str | None = typer.Argument(
        None, help="New pool folder or revision (default: --pool as it is now)."
    ),
    pool_path: Path = POOL_OPTION,
    git: bool = typer.Option(False, "--git", help="A and B are git revisions of --pool's repo."),
    as_json: bool = typer.Option(False, "--json", help="Print the diff as JSON."),
    limit: int = typer.Option(20, help="List at most this many ids per section."),
) -> None:
    """Summarise added trajectories and changed labels between two pools or two revisions."""
    from agentworld.pool.diff import diff_pools, pool_at_revision

    with tempfile.TemporaryDirectory(prefix="aw-diff-") as tmp:
        if git:
            old = pool_at_revision(pool_path, a, Path(tmp) / "a")
            new = pool_at_revision(pool_path, b, Path(tmp) / "b") if b else pool_path
        else:
            old, new = _local(a), _local(b) if b else _local(pool_path)
        d = diff_pools(old, new)
    if as_json:
        sys.stdout.write(json.dumps(d.to_dict(), indent=2, default=str) + "\n")
        return
    out = [
        f"trajectories: +{len(d.added_trajectories)} -{len(d.removed_trajectories)}",
        f"steps: +{d.added_steps} -{d.removed_steps}",
        f"shards: +{len(d.shards_added)} -{len(d.shards_removed)}",
        f"label changes: {len(d.label_changes)}",
    ]
    out += [f"  + {t}" for t in d.added_trajectories[:limit]]
    out += [f"  - {t}" for t in d.removed_trajectories[:limit]]
    for c in d.label_changes[:limit]:
        old, new = json.dumps(c["old"]), json.dumps(c["new"])  # false, "good": not Python's
        by = f" ({c['author']})" if c["author"] is not None else ""  # unset in B: no author
        out.append(f"  {c['target']} {c['field']}: {old} -> {new}{by}")
    sys.stdout.write("\n".join(out) + "\n")


def _local(path: str | Path) -> Path:
    """A folder to diff: the pool itself, or a remote pool's mirror with every shard fetched."""
    from agentworld.pool.opener import open_pool
    from agentworld.pool.remote_store import remote_url

    if remote_url(path) is None:
        return Path(path)
    pool = open_pool(path)
    pool.fetch_all()
    return pool.root


def manifest(
    pool_path: Path = POOL_OPTION,
    ignore_objects: bool = typer.Option(
        False,
        "--ignore-objects",
        help="Also keep objects/ out of git (.gitignore) and union-merge MANIFEST.",
    ),
    check: bool = typer.Option(
        False, "--check", help="Only verify that every listed shard is present and intact."
    ),
) -> None:
    """Write MANIFEST (shard hashes and sizes) for committing a pool without its shards."""
    from agentworld.errors import CorruptDataError
    from agentworld.pool.layout import Layout, check_version
    from agentworld.pool.manifest import (
        check_manifest,
        objects_ignored,
        objects_tracked_by_git,
        write_manifest,
    )

    layout = Layout(pool_path)
    check_version(layout)
    if check:
        report = check_manifest(layout)
        typer.echo(
            f"{report.listed} listed, {len(report.missing)} missing, "
            f"{len(report.corrupt)} corrupt, {len(report.unlisted)} present but unlisted",
            err=True,
        )
        if not report.ok:
            first = (report.missing + report.corrupt)[0]
            raise CorruptDataError(
                str(layout.shard_path(first)),
                "listed in MANIFEST but missing or corrupt: fetch with `aw pool fetch --from`",
            )
        return
    corrupt: list[str] = []
    n = write_manifest(layout, ignore_objects=ignore_objects, corrupt=corrupt)
    typer.echo(f"MANIFEST lists {plural(n, 'shard')}", err=True)
    for problem in corrupt:  # listed (the name is right), but no clone can fetch it from here
        typer.echo(
            f"warning: {problem}: listed, but corrupt here (`aw pool fsck`; "
            "a good copy comes with `aw pool fetch --from`)",
            err=True,
        )
    tracked = objects_tracked_by_git(layout) if objects_ignored(layout) else 0
    if tracked:
        typer.echo(
            f"warning: git still tracks {tracked} shards under {layout.objects}: .gitignore "
            f"keeps out only new ones; `git -C {layout.root} rm -r -q --cached objects` "
            "stops versioning them (and commit; history keeps them)",
            err=True,
        )


def fetch(
    source: str = typer.Option(
        ..., "--from", help="Another copy of the pool: a folder, or rsync's host:path."
    ),
    pool_path: Path = POOL_OPTION,
) -> None:
    """Copy shards listed in MANIFEST but missing here, verifying every hash."""
    from agentworld.errors import CorruptDataError
    from agentworld.pool.layout import Layout, check_version
    from agentworld.pool.manifest import fetch_shards

    layout = Layout(pool_path)
    check_version(layout)
    copied, report = fetch_shards(layout, source)
    typer.echo(f"fetched {plural(copied, 'shard')}; {report.listed} listed", err=True)
    if not report.ok:
        first = (report.missing + report.corrupt)[0]
        raise CorruptDataError(
            str(layout.shard_path(first)),
            f"{len(report.missing)} listed shards not found at {source}, "
            f"{len(report.corrupt)} corrupt",
        )
