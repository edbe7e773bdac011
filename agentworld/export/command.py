"""`aw export` and `aw pool import`: the pool's data out to other tools, and theirs in.

Only typer and the standard library are imported here; the formats load
(pyarrow, datasets) when a command runs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, TextIO

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


def export(
    fmt: str = typer.Option(
        ..., "--format", "-f", help="openai-jsonl, trl, parquet, hf, atif or verl."
    ),
    out: Path = typer.Option(..., "--out", "-o", help="Output file (or folder: hf, trl, atif)."),
    pool_path: Path = POOL_OPTION,
    agent: str | None = AGENT_FILTER,
    dataset: str | None = DATASET_FILTER,
    split: str | None = SPLIT_FILTER,
    task: str | None = TASK_FILTER,
    group: str | None = GROUP_FILTER,
    status: str = status_filter("done"),
    min_reward: float | None = MIN_REWARD_FILTER,
    max_reward: float | None = MAX_REWARD_FILTER,
    min_policy: int | None = MIN_POLICY_FILTER,
    max_policy: int | None = MAX_POLICY_FILTER,
    quality: str | None = QUALITY_FILTER,
    tag: str | None = TAG_FILTER,
    include_untrainable: bool = typer.Option(
        False, "--include-untrainable", help="Keep what is labelled not trainable."
    ),
    rows: str | None = typer.Option(
        None, help="parquet/hf: one row per step (default) or per trajectory."
    ),
    variant: str | None = typer.Option(
        None,
        help="openai-jsonl, trl: chat (SFT, default) or preference (DPO pairs within groups); "
        "trl: prompt (GRPO, one row per task).",
    ),
    ability: str | None = typer.Option(None, help="verl: ability column (default: agent)."),
    data_source: str | None = typer.Option(
        None, help="verl: data_source column (default: dataset)."
    ),
    datasets_path: Path = typer.Option(
        Path("datasets.toml"),
        "--datasets",
        envvar="AW_DATASETS",
        help="verl: datasets.toml whose scorers the custom reward function applies.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the manifest as JSON."),
) -> None:
    """Export curated trajectories for other trainers; a manifest is written beside the output.

    An empty selection writes the empty output, says on stderr what matched, and exits 7;
    so does a selection the format makes nothing of (preference pairs need groups whose
    rewards differ).
    """
    from agentworld.errors import NotFoundError
    from agentworld.export import export as run_export
    from agentworld.export import options_for
    from agentworld.export.manifest import manifest_path
    from agentworld.plural import plural
    from agentworld.pool import Selection
    from agentworld.pool.explain import explain_empty
    from agentworld.pool.opener import open_pool

    options = options_for(
        fmt,
        rows=rows,
        variant=variant,
        ability=ability,
        data_source=data_source,
        datasets=str(datasets_path) if fmt == "verl" and datasets_path.is_file() else None,
    )
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
        trainable_only=not include_untrainable,
    )
    pool = open_pool(pool_path)
    total = pool.index().count_trajectories(sel)
    empty = explain_empty(pool.index(), sel) if total == 0 else []
    with _progress(sys.stderr) as bar:
        task_id = bar.add_task(f"exporting {fmt}", total=total or None)
        manifest = run_export(
            pool, fmt, out, sel, options, progress=lambda n: bar.update(task_id, completed=n)
        )
    pool.close()
    if as_json:
        sys.stdout.write(json.dumps(manifest, indent=2) + "\n")
    counts = ", ".join(f"{k} {v}" for k, v in manifest["counts"].items()) or "empty"
    typer.echo(f"wrote {out} ({counts}); manifest {manifest_path(out)}", err=True)
    if (manifest.get("reward") or {}).get("warning"):
        typer.echo(f"warning: {manifest['reward']['warning']}", err=True)
    no_ids = manifest["counts"].get("rows_without_ids", 0)
    if fmt == "hf" and no_ids:
        typer.echo(
            f"warning: {no_ids} of {manifest['counts'].get('rows', 0)} rows have no engine token "
            "ids (empty input_ids): TRL reads -f hf as pre-tokenized, trains nothing on them and "
            "fails on a batch of only such rows; -f trl renders them with the model's chat "
            "template",
            err=True,
        )
    non_text = manifest["counts"].get("trajectories_with_non_text_content", 0)
    if non_text:
        typer.echo(
            f"warning: {plural(non_text, 'trajectory')} {'holds' if non_text == 1 else 'hold'} "
            f"content other than text (images, audio, files): -f {fmt} keeps only the text; "
            "-f openai-jsonl and -f parquet keep the parts",
            err=True,
        )
    for reason, left in manifest["left_out"].items():
        typer.echo(f"left out {left['count']} {reason}: {', '.join(left['examples'])}", err=True)
    written = sum(manifest["counts"].get(k, 0) for k in ("rows", "lines", "files"))
    if not empty and not written:  # trajectories matched, yet none made a row (no pairs, ...)
        shape = f"-f {fmt}" + (f" --variant {variant}" if variant else "")
        empty = [f"{shape} made nothing of the {total} trajectories selected; the counts say why"]
    if empty:
        # The empty output is written (a consumer finds the file it expects), but a script
        # must not go on as if it had data: exit as for a name that does not exist.
        for line in empty:
            typer.echo(line, err=True)
        raise typer.Exit(NotFoundError.exit_code)


def _progress(stream: TextIO) -> Any:
    """The trajectories read so far out of those selected, as a transient bar on a
    terminal; off one (a log, a pipe, a script's ``2>``), as for ``aw run``, no bar:
    Rich would still end it with a blank line, and stderr is the summary lines only."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("trajectories"),
        TimeElapsedColumn(),
        console=Console(file=stream),
        transient=True,
        disable=not stream.isatty(),
    )


def pool_import(
    path: Path = typer.Argument(..., help="File (or folder of .json/.jsonl files) to import."),
    fmt: str = typer.Option(..., "--format", "-f", help="openai-jsonl, atif or records."),
    pool_path: Path = POOL_OPTION,
    agent: str | None = typer.Option(None, help="Agent name (default: the file's, or 'import')."),
    dataset: str | None = typer.Option(None, help="Dataset name to stamp."),
    split: str | None = typer.Option(None, help="Split name to stamp."),
    skip_bad: bool = typer.Option(
        False, "--skip-bad", help="Import the good rows and report bad ones (default: refuse all)."
    ),
    author: str | None = AUTHOR_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Bring outside trajectories in as steps (protocol 'import'); bad rows are named by line."""
    from agentworld.export.ingest import ImportOptions, import_file
    from agentworld.pool.opener import open_pool

    pool = open_pool(pool_path)
    opts = ImportOptions(
        agent=agent,
        dataset=dataset,
        split=split,
        skip_bad=skip_bad,
        author=resolve_author(author),
    )
    try:
        report = import_file(pool, path, fmt, opts)
    finally:
        pool.close()
    if as_json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2, default=str) + "\n")
        return
    for bad in report.refusals():
        typer.echo(f"refused {bad}", err=True)
    typer.echo(report.summary(), err=True)
