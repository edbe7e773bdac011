"""`aw pool …`: inspect, verify, label and maintain a pool from the shell.

Data goes to stdout (tables for people, ``--json`` for scripts); progress and
messages go to stderr.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

from agentworld.cli_options import (
    AGENT_FILTER,
    AUTHOR_OPTION,
    DATASET_FILTER,
    GROUP_FILTER,
    MAX_POLICY_FILTER,
    MAX_REWARD_FILTER,
    MIN_POLICY_FILTER,
    MIN_REWARD_FILTER,
    POOL_OPTION,
    QUALITY_FILTER,
    SPLIT_FILTER,
    TAG_FILTER,
    TASK_FILTER,
    resolve_author,
    status_filter,
)
from agentworld.plural import plural

pool_app = typer.Typer(help="Inspect, verify, label and maintain a pool.", no_args_is_help=True)


def _console(stderr: bool = False) -> Any:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


def _open(path: Path) -> Any:
    from agentworld.pool.opener import open_pool

    pool = open_pool(path, log_cuts=False)  # each recovery is said here, once
    for r in pool.recovered:
        msg = f"recovered journal {r.journal}: {plural(r.records, 'record')}"
        if r.kept:
            msg += f"; damaged after them ({r.problem}): kept whole as {r.kept}"
        elif r.torn_bytes:
            msg += f", cut {r.torn_bytes} torn bytes ({r.problem})"
        typer.echo(msg, err=True)
    return pool


def _progress() -> Any:
    """A transient progress bar on stderr, shown only on a terminal.

    Elsewhere (a pipe, a log file, a test) Rich would still end its live display
    with a newline, so every command's stderr would open with a blank line and an
    error would not be the one line scripts expect.
    """
    from rich.progress import Progress

    console = _console(stderr=True)
    return Progress(console=console, transient=True, disable=not console.is_terminal)


def _index(pool: Any, *, warn: bool = True) -> Any:
    """The index, refreshed with a progress bar when there is much to read; ``warn``: say
    on stderr, once, that corrupt shards were skipped (reading goes on, exit 0)."""
    from agentworld.pool.corrupt import corrupt_note

    idx = pool.index(refresh=False)
    with _progress() as bar:
        task = bar.add_task("indexing shards", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        idx.refresh(progress, log_corrupt=False)  # said below, once
    note = corrupt_note(idx.corrupt_shards())
    if warn and note:
        typer.echo(f"warning: {note}", err=True)
    return idx


def _emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def _fmt_reward(r: float | None) -> str:
    return "-" if r is None else f"{r:.3g}"


@pool_app.command()
def stats(
    pool_path: Path = POOL_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Counts, tokens, rewards, per-agent tables and disk use."""
    pool = _open(pool_path)
    idx = _index(pool, warn=False)  # said in the table (and --json) instead
    s = idx.stats()
    disk = pool.shard_bytes()
    s["shard_bytes"] = disk
    s["journal_bytes"] = sum(p.stat().st_size for p in pool.layout.journal_paths())
    from agentworld.pool.manifest import unfetched

    s["manifest_missing"] = unfetched(pool.layout)
    if as_json:
        _emit_json(s)
        return
    from rich.table import Table
    from rich.text import Text

    from agentworld.literal import clean
    from agentworld.pool.corrupt import corrupt_note

    console = _console()
    by = s["trajectories_by_status"]
    head = Table.grid(padding=(0, 2))
    head.add_row("pool", getattr(pool, "url", None) or str(pool.root))  # a remote: its URL
    head.add_row("steps", f"{s['steps']:,} ({s['step_errors']:,} failed)")
    head.add_row(
        "trajectories",
        f"{s['trajectories']:,}  " + "  ".join(f"{k} {v:,}" for k, v in sorted(by.items())),
    )
    head.add_row(
        "tokens",
        f"prompt {s['prompt_tokens']:,}  completion {s['completion_tokens']:,}  "
        f"engine ids on {s['engine_token_steps']:,} steps",
    )
    r = s["reward"]
    if r["count"]:
        head.add_row(
            "reward",
            f"mean {r['mean']:.3f}  min {r['min']:.3g}  max {r['max']:.3g}  n {r['count']}",
        )
    head.add_row(
        "policy versions",
        "  ".join(f"v{k}: {v:,}" for k, v in sorted(s["policy_versions"].items())),
    )
    head.add_row(
        "disk",
        f"{plural(s['shards'], 'shard')} {disk / 1e6:.1f} MB, {plural(s['journals'], 'journal')} "
        f"{s['journal_bytes'] / 1e6:.1f} MB",
    )
    head.add_row("labelled", plural(s["labelled_trajectories"], "trajectory"))
    if s["manifest_missing"]:
        head.add_row(
            "not fetched",
            f"{plural(s['manifest_missing'], 'shard')} MANIFEST lists not here and not "
            "counted: `aw pool fetch --from POOL` brings them",
        )
    note = corrupt_note(s["corrupt_shards"], names=False)  # a table cell: --json names them
    if note:
        head.add_row("corrupt", Text(note))
    console.print(head)
    if s["per_agent"]:
        t = Table(title="per agent and dataset")
        for col in (
            "agent",
            "dataset",
            "trajectories",
            "steps",
            "open",
            "done",
            "failed",
            "reward",
        ):
            t.add_column(col, justify="right" if col not in ("agent", "dataset") else "left")
        for row in s["per_agent"]:
            t.add_row(
                Text(clean(row["agent"] or "-")),  # names from records: never markup
                Text(clean(row["dataset"] or "-")),
                f"{row['trajectories']:,}",
                f"{row['steps']:,}",
                f"{row['open']:,}",
                f"{row['done']:,}",
                f"{row['failed']:,}",
                _fmt_reward(row["reward_mean"]),
            )
        console.print(t)


@pool_app.command("ls")
def ls(
    pool_path: Path = POOL_OPTION,
    agent: str | None = AGENT_FILTER,
    dataset: str | None = DATASET_FILTER,
    split: str | None = SPLIT_FILTER,
    task: str | None = TASK_FILTER,
    group: str | None = GROUP_FILTER,
    trajectory: str | None = typer.Option(
        None, help="List every step of this trajectory, in order (takes no filter or sort)."
    ),
    status: str | None = status_filter(),
    min_reward: float | None = MIN_REWARD_FILTER,
    max_reward: float | None = MAX_REWARD_FILTER,
    min_policy: int | None = MIN_POLICY_FILTER,
    max_policy: int | None = MAX_POLICY_FILTER,
    quality: str | None = QUALITY_FILTER,
    tag: str | None = TAG_FILTER,
    text: str | None = typer.Option(None, help="Text search in messages."),
    sort: str = typer.Option("time", help="time, started, reward, steps, tokens, agent, status."),
    asc: bool = typer.Option(False, "--asc", help="Ascending order."),
    limit: int = typer.Option(50, help="At most this many rows (0 = all)."),
    offset: int = typer.Option(0, help="Skip this many rows."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """List trajectories (or the steps of one with --trajectory), filtered and sorted."""
    from agentworld.errors import ConfigError
    from agentworld.pool import Selection
    from agentworld.pool.index_queries import TRAJECTORY_SORTS

    if sort not in TRAJECTORY_SORTS:
        raise ConfigError(f"--sort: unknown key {sort!r}; known: {', '.join(TRAJECTORY_SORTS)}")
    if trajectory is not None:
        given = {
            "--agent": agent,
            "--dataset": dataset,
            "--split": split,
            "--task": task,
            "--group": group,
            "--status": status,
            "--min-reward": min_reward,
            "--max-reward": max_reward,
            "--min-policy": min_policy,
            "--max-policy": max_policy,
            "--quality": quality,
            "--tag": tag,
            "--text": text,
            "--sort": None if sort == "time" else sort,
            "--asc": asc or None,
            "--limit": None if limit == 50 else limit,
            "--offset": offset or None,
        }
        _refuse_with_trajectory([flag for flag, v in given.items() if v is not None])
    pool = _open(pool_path)
    idx = _index(pool)
    if trajectory is not None:
        _ls_steps(idx, trajectory, as_json)
        return
    sel = Selection.from_flags(
        agent=agent,
        dataset=dataset,
        split=split,
        task=task,
        group=group,
        status=status,
        min_reward=min_reward,
        max_reward=max_reward,
        min_policy=min_policy,
        max_policy=max_policy,
        quality=quality,
        tag=tag,
        text=text,
    )
    rows = idx.trajectories(sel, sort=sort, descending=not asc, limit=limit or None, offset=offset)
    if as_json:
        _emit_json(rows)
        return
    total = idx.count_trajectories(sel)
    if not rows:
        _say_nothing_listed(idx, sel, total, offset)
        return
    from agentworld.pool import listing

    cells = []
    for r in rows:
        labels = " ".join(
            x
            for x in (
                r.get("label_quality"),
                "untrainable" if r.get("label_trainable") is False else None,
                ",".join(r.get("label_tags") or ()) or None,
            )
            if x
        )
        cells.append(
            (
                r["id"],
                r["agent"] or "-",
                r["dataset"] or "-",
                r["task"] or "-",
                r["status"],
                str(r["n_steps"]),
                _fmt_reward(r["effective_reward"]),
                labels,
                listing.short_time(r["last_at"]),
            )
        )
    out = listing.console()
    caption = f"{len(rows)} of {total:,} trajectories"
    out.print(listing.fit_table(listing.TRAJECTORIES, cells, out.width, caption=caption))


def _refuse_with_trajectory(flags: list[str]) -> None:
    """--trajectory lists one trajectory's steps: a filter or sort beside it would be
    ignored (it was, silently), so it is refused."""
    from agentworld.errors import ConfigError

    if flags:
        raise ConfigError(
            f"--trajectory lists every step of one trajectory and takes no filter or sort: "
            f"drop {', '.join(flags)} (or --trajectory, to list trajectories)"
        )


def _say_nothing_listed(idx: Any, sel: Any, total: int, offset: int) -> None:
    """An empty listing: no table, but why, on stderr (as `aw export` says it); exit 0."""
    from agentworld.pool.explain import explain_empty

    if total:
        lines = [f"nothing past --offset {offset}: {total:,} trajectories match"]
    else:
        lines = explain_empty(idx, sel)
    for line in lines:
        typer.echo(line, err=True)


def _ls_steps(idx: Any, trajectory: str, as_json: bool) -> None:
    from agentworld.errors import NotFoundError
    from agentworld.pool.index_queries import step_summary

    rows = idx.steps(trajectory)
    if not rows:
        raise NotFoundError(f"no steps for trajectory {trajectory!r}")
    if as_json:
        _emit_json([step_summary(r) for r in rows])
        return
    from agentworld.pool import listing

    cells = [
        (
            str(r["idx"]) + (f".{r['choice']}" if r["choice"] else ""),
            r["id"],
            r["status"],
            str(r["policy_version"]),
            f"{r['prompt_tokens'] or 0}+{r['completion_tokens'] or 0}",
            r["token_source"] or "-",
            " ".join((r["text"] or "").split())[:200],
        )
        for r in rows
    ]
    out = listing.console()
    title = f"trajectory {trajectory}"
    out.print(listing.fit_table(listing.STEPS, cells, out.width, title=title))


def _resolve(idx: Any, pool: Any, ident: str) -> tuple[str, str]:
    """``Index.resolve``; an id found nowhere but in a corrupt shard says where it is."""
    from agentworld.errors import NotFoundError
    from agentworld.pool.corrupt import shard_holding

    try:
        return idx.resolve(ident, pool.root)
    except NotFoundError as exc:
        found = None if idx.find(ident) else shard_holding(pool.layout, idx.corrupt_shards(), ident)
        if found is None:
            raise  # not anywhere, or ambiguous
        shard, sure = found
        where = "is in" if sure else "is mentioned in"
        raise NotFoundError(
            f"{exc}: {ident!r} {where} {shard}, a corrupt shard readers skip (run `aw pool fsck`)"
        ) from None


def _check_ids(idents: list[str]) -> None:
    """Refuse an empty id before opening the pool: as a prefix it would match every record."""
    from agentworld.errors import ConfigError

    if any(not i.strip() for i in idents):
        raise ConfigError(
            "an id is empty: give a step or trajectory id, a unique prefix of one, "
            "or the end `aw tui` shows (6+ characters)"
        )


@pool_app.command()
def show(
    ident: str = typer.Argument(
        ..., help="A step or trajectory id, a unique prefix, or the end `aw tui` shows (6+ chars)."
    ),
    pool_path: Path = POOL_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print the raw record(s) as JSON."),
) -> None:
    """Show one step or trajectory, readable (or as JSON)."""
    from agentworld.pool.render import render_trajectory

    _check_ids([ident])
    pool = _open(pool_path)
    idx = _index(pool)
    kind, full = _resolve(idx, pool, ident)
    if kind == "step":
        step = pool.get_step(full)
        if as_json:
            _emit_json(step)
            return
        traj = pool.get_trajectory(step["trajectory"])
        traj.steps = [s for s in traj.steps if s["id"] == full]
    else:
        traj = pool.get_trajectory(full)
        if as_json:
            _emit_json({"steps": traj.steps, "end": traj.end, "labels": traj.labels})
            return
    _console().print(render_trajectory(traj))


@pool_app.command()
def label(
    targets: list[str] = typer.Argument(
        None, help="Step or trajectory ids (default: every trajectory matching the filters)."
    ),
    pool_path: Path = POOL_OPTION,
    trainable: bool | None = typer.Option(None, "--trainable/--untrainable", help="Train on it?"),
    quality: str | None = typer.Option(None, help="good, bad or unsure."),
    tags: str | None = typer.Option(None, help="Comma list of tags (replaces the tags)."),
    note: str | None = typer.Option(None, help="A free-text note."),
    reward: float | None = typer.Option(None, help="Override the reward."),
    clear: str | None = typer.Option(None, help="Comma list of label fields to clear."),
    author: str | None = AUTHOR_OPTION,
    agent: str | None = AGENT_FILTER,
    dataset: str | None = DATASET_FILTER,
    group: str | None = GROUP_FILTER,
    status: str | None = status_filter(),
    min_reward: float | None = MIN_REWARD_FILTER,
    max_reward: float | None = MAX_REWARD_FILTER,
) -> None:
    """Set curation labels on steps or trajectories (append-only; last writer wins).

    Without ids, every trajectory the filters (--agent … --max-reward) select."""
    from agentworld.errors import ConfigError
    from agentworld.pool import Selection
    from agentworld.pool.labels import BadLabelLineError, check_value, label_text

    fields: dict[str, Any] = {}
    if trainable is not None:
        fields["trainable"] = trainable
    if quality is not None:
        fields["quality"] = quality
    if tags is not None:
        fields["tags"] = [t for t in tags.split(",") if t]
    if note is not None:
        fields["note"] = note
    if reward is not None:
        fields["reward"] = reward
    cleared = [f for f in (clear or "").split(",") if f]
    for f in cleared:
        _check_not_set(f, fields)
    fields.update(dict.fromkeys(cleared))
    if not fields:
        raise ConfigError("nothing to set: give --trainable/--untrainable, --quality, --tags, …")
    _check_ids(targets or [])
    pool = _open(pool_path)
    bad_labels = None
    try:
        idx = _index(pool)
    except BadLabelLineError as exc:
        if not targets:
            raise  # a filter reads labels (reward overrides): not on a guess
        # Ids resolve without labels, and an appended line cannot make the bad one
        # worse: curating goes on while someone fixes (or removes) that line.
        bad_labels = exc
        idx = pool.index(refresh=False)
    resolved: list[str] = []
    if targets:
        for ident in targets:
            kind, full = _resolve(idx, pool, ident)
            resolved.append(f"{kind}:{full}")
    else:
        sel = Selection.from_flags(
            agent=agent,
            dataset=dataset,
            group=group,
            status=status,
            min_reward=min_reward,
            max_reward=max_reward,
        )
        if sel == Selection():
            raise ConfigError("give ids or at least one filter (refusing to label the whole pool)")
        resolved = [f"trajectory:{t}" for t in idx.trajectory_ids(sel)]
    who = resolve_author(author)
    n = pool.labels.set(resolved, fields, author=who)
    what = "target" if n == 1 else "targets"
    stored = {f: check_value(f, v) for f, v in fields.items()}  # tags sorted, once each
    typer.echo(f"labelled {n} {what} as {who}: {label_text(stored)}", err=True)
    if bad_labels is not None:
        typer.echo(f"warning: {bad_labels}", err=True)


def _check_not_set(field: str, fields: dict[str, Any]) -> None:
    """Refuse ``--clear FIELD`` beside the flag that sets FIELD: which one wins is anyone's guess."""
    from agentworld.errors import ConfigError

    if field in fields:
        flag = "--trainable/--untrainable" if field == "trainable" else f"--{field}"
        raise ConfigError(f"--clear {field} conflicts with {flag}: set the field or clear it")


@pool_app.command()
def reindex(pool_path: Path = POOL_OPTION) -> None:
    """Rebuild the index from shards and labels (it is a cache; this is always safe)."""
    from agentworld.pool.corrupt import corrupt_note

    pool = _open(pool_path)
    idx = pool.index(refresh=False)
    report = idx.rebuild(log_corrupt=False)  # said below, once
    typer.echo(
        f"indexed {plural(report.records, 'record')} from {plural(report.shards, 'shard')} and "
        f"{plural(report.journals, 'journal')} in {report.seconds:.1f}s",
        err=True,
    )
    note = corrupt_note(idx.corrupt_shards())
    if note:
        typer.echo(f"warning: {note}", err=True)


@pool_app.command()
def seal(
    pool_path: Path = POOL_OPTION,
    proxy: str | None = typer.Option(
        None,
        "--proxy",
        help="A running `aw proxy` (its URL) to seal its journal into a shard now, without "
        "stopping it (before `git add pool`).",
    ),
    proxy_token: str | None = typer.Option(
        None, "--proxy-token", envvar="AW_PROXY_TOKEN", help="Bearer token the proxy requires."
    ),
) -> None:
    """Seal journals left by writers that are gone (also done whenever a pool is opened);
    with --proxy, also the journal a running proxy writes."""
    from agentworld.pool.maintenance import seal_idle
    from agentworld.pool.opener import open_pool

    if proxy is not None:
        typer.echo(_seal_live(proxy, proxy_token), err=True)
    pool = open_pool(pool_path, recover=False)
    for r in seal_idle(pool, log_cuts=False):  # each is said here, once
        msg = f"sealed {r.journal}: {plural(r.records, 'record')} -> {r.shard or 'nothing to keep'}"
        if r.kept:
            msg += f"; damaged after them ({r.problem}): kept whole as {r.kept}"
        elif r.torn_bytes:
            msg += f"; cut {r.torn_bytes} torn bytes ({r.problem})"
        typer.echo(msg, err=True)
    typer.echo(f"{plural(len(pool.layout.journal_paths()), 'live writer journal')} left", err=True)


def _seal_live(url: str, token: str | None) -> str:
    """POST /aw/seal to the proxy at ``url``: what it did, in a line."""
    import json
    import urllib.error
    import urllib.request

    from agentworld.errors import PoolError
    from agentworld.server_url import server_base

    base = server_base(url, "--proxy")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    req = urllib.request.Request(base + "/aw/seal", data=b"{}", headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=150) as resp:
            answer = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        said = exc.read().decode("utf-8", "replace")[:300]
        raise PoolError(f"--proxy {base}: POST /aw/seal answered {exc.code}: {said}") from None
    except (OSError, ValueError) as exc:
        raise PoolError(f"--proxy {base}: cannot ask it to seal: {exc}") from None
    if not answer.get("sealed"):
        return f"aw proxy at {base}: nothing to seal (no record since its last shard)"
    return f"aw proxy at {base}: sealed its journal into a shard; it goes on in a new one"


@pool_app.command()
def fsck(
    pool_path: Path = POOL_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Machine-readable report."),
) -> None:
    """Verify every shard's hash, every record, journal and label file, and the index.

    Exit 6 when anything is damaged. A torn last line (a dead writer's journal, a label
    file), which a crash leaves and readers ignore, is a warning: exit 0."""
    from agentworld.errors import CorruptDataError
    from agentworld.pool.fsck import fsck as run_fsck
    from agentworld.pool.opener import open_pool

    # Opened without recovery so that torn journal tails are reported, not cut.
    pool = open_pool(pool_path, recover=False)
    pool.fetch_all(verify=False)  # a remote pool's shards, bad ones too: fsck names them
    with _progress() as bar:
        task = bar.add_task("checking", total=None)
        report = run_fsck(pool, progress=lambda d, t: bar.update(task, completed=d, total=t))
    if as_json:
        _emit_json(report.to_dict())
    else:
        for p in report.problems:
            where = f"{p.path}:{p.line}" if p.line else p.path
            typer.echo(f"{where}: {p.problem}")
        for p in report.warnings:
            where = f"{p.path}:{p.line}" if p.line else p.path
            typer.echo(f"{where}: warning: {p.problem}")
        verdict = "ok" if report.ok else f"{len(report.problems)} problem(s)"
        if report.warnings:
            verdict += f", {len(report.warnings)} warning(s)"
        typer.echo(
            f"{report.shards} shards, {report.journals} journals, {report.records:,} records, "
            f"{report.label_files} label files"
            + (", index checked" if report.index_checked else "")
            + (" (stale: refreshes on next use)" if report.index_stale else "")
            + f": {verdict}",
            err=True,
        )
    if not report.ok:
        raise typer.Exit(CorruptDataError.exit_code)


@pool_app.command()
def compact(
    pool_path: Path = POOL_OPTION,
    max_shards: int = typer.Option(64, min=2, help="Merge at most this many shards at once."),
    small_mb: float = typer.Option(16.0, help="Only shards smaller than this (MB)."),
) -> None:
    """Merge small shards into one; the old ones stay until `aw pool gc`."""
    from agentworld.pool.maintenance import compact as run_compact

    pool = _open(pool_path)
    r = run_compact(pool, max_shards=max_shards, small_bytes=int(small_mb * 1024 * 1024))
    if r.output is None:
        typer.echo("nothing to compact", err=True)
        return
    typer.echo(
        f"merged {len(r.inputs)} shards ({r.bytes_before / 1e6:.1f} MB) into {r.output} "
        f"({r.bytes_after / 1e6:.1f} MB, {r.records:,} records, "
        f"{r.duplicates_dropped} duplicates dropped); run `aw pool gc` to free the old ones",
        err=True,
    )


@pool_app.command()
def gc(
    pool_path: Path = POOL_OPTION,
    dry_run: bool = typer.Option(False, "--dry-run", help="Only say what would be deleted."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable report."),
) -> None:
    """Delete what no reader needs (superseded shards, stale temp files); safe with writers."""
    from agentworld.pool.maintenance import gc as run_gc

    pool = _open(pool_path)
    r = run_gc(pool, dry_run=dry_run)
    if as_json:
        _emit_json(r.to_dict())
        return
    verb = "would delete" if dry_run else "deleted"
    for item in r.deleted:
        typer.echo(f"{verb} {item.path} ({item.bytes:,} bytes): {item.reason}")
    for item in r.kept:
        typer.echo(f"kept {item.path}: {item.reason}", err=True)
    typer.echo(f"{verb} {len(r.deleted)} file(s), {r.bytes_freed / 1e6:.1f} MB", err=True)
