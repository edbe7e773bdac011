"""Hand curated pool data to other tools: OpenAI JSONL, Parquet / HF datasets, ATIF and verl.

``export(pool, fmt, out, selection)`` streams the selected trajectories (the
same selection and label rules as training) into ``out`` and writes
``<out>.manifest.json`` beside it saying what made it.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson

from agentworld.errors import ConfigError
from agentworld.export.manifest import manifest_path
from agentworld.pool import Pool, Selection, Trajectory

FORMATS = ("openai-jsonl", "trl", "parquet", "hf", "atif", "verl")


@dataclass(frozen=True)
class ExportOptions:
    """Format-specific choices (each ignored by formats it does not apply to)."""

    rows: str = "step"  # parquet/hf: one row per "step" or per "trajectory"
    variant: str = (
        "chat"  # openai-jsonl, trl: "chat" (SFT), "preference" (DPO); trl: "prompt" (GRPO)
    )
    ability: str | None = None  # verl: the ability column (default: the agent name)
    data_source: str | None = None  # verl: the data_source column (default: the dataset name)
    datasets: str | None = None  # verl: datasets.toml whose scorers a custom reward function uses

    def __post_init__(self) -> None:
        if self.rows not in ("step", "trajectory"):
            raise ConfigError(f"--rows: expected step or trajectory, got {self.rows!r}")
        if self.variant not in ("chat", "preference", "prompt"):
            raise ConfigError(
                f"--variant: expected chat, preference or prompt, got {self.variant!r}"
            )


# The formats each format-specific option applies to (the flag, and who takes it).
APPLIES = {
    "rows": ("parquet", "hf"),
    "variant": ("openai-jsonl", "trl"),
    "ability": ("verl",),
    "data_source": ("verl",),
}


# Formats whose messages keep only the text of content parts (what chat templates and
# their consumers take): images, audio and files are left out, and counted.
TEXT_ONLY = ("trl", "hf", "verl", "atif")


def _count_non_text(trajs: Iterable[Trajectory], counts: Counter[str]) -> Iterable[Trajectory]:
    """``trajectories_with_non_text_content``: those with a content part that is not text."""
    for t in trajs:
        if any(_non_text(s) for s in t.steps):
            counts["trajectories_with_non_text_content"] += 1
        yield t


def _non_text(step: dict[str, Any]) -> bool:
    messages = list((step.get("request") or {}).get("messages") or ())
    messages.append((step.get("response") or {}).get("message") or {})
    return any(  # what conversation.content_text cannot keep: a part without text
        isinstance(part, dict) and not isinstance(part.get("text"), str)
        for m in messages
        if isinstance(m.get("content"), list)
        for part in m["content"]
    )


def options_for(fmt: str, **given: Any) -> ExportOptions:
    """The options of ``fmt`` from those a person gave (None: not given), refusing one
    that ``fmt`` does not take rather than writing the output as if it were not there."""
    for name, value in given.items():
        takers = APPLIES.get(name)
        if value is not None and takers is not None and fmt in FORMATS and fmt not in takers:
            flag = "--" + name.replace("_", "-")
            raise ConfigError(
                f"{flag}: -f {fmt} does not take it (only -f {' and -f '.join(takers)})"
            )
    return ExportOptions(**{k: v for k, v in given.items() if v is not None})


def _writes_folder(fmt: str, out: Path) -> bool:
    """Whether ``fmt`` writes a folder at ``out`` (hf; atif unless ``.jsonl``), not one file."""
    return fmt in ("hf", "trl") or (fmt == "atif" and not out.name.endswith(".jsonl"))


def _check_out(fmt: str, out: Path) -> None:
    """Refuse an ``--out`` the format cannot write, before anything is read or written.

    A file replaces a file and a saved dataset replaces a saved dataset; a file
    never replaces a folder nor a folder a file, and hf never replaces a folder
    that ``datasets`` did not write, since replacing it deletes what it holds.
    """
    if str(out) == "-":
        raise ConfigError(
            f"--out: - (standard output) is not a place -f {fmt} writes to; give a path, "
            "and read it from there"
        )
    if not _writes_folder(fmt, out):
        if out.is_dir():
            raise ConfigError(f"--out: {out} is a folder; -f {fmt} writes one file")
        if _foreign_file(out):
            raise ConfigError(
                f"--out: {out} exists and is no export (no {manifest_path(out).name} beside "
                f"it); -f {fmt} would replace it: give a new path, or remove it first"
            )
    elif out.exists() and not out.is_dir():
        raise ConfigError(f"--out: {out} is a file; -f {fmt} writes a folder")
    elif (
        fmt in ("hf", "trl")
        and out.suffix.lower() in _FILE_SUFFIXES
        and not (out / "state.json").is_file()
    ):
        raise ConfigError(
            f"--out: {out} names a file, but -f {fmt} writes a dataset folder (save_to_disk; "
            f"datasets.load_from_disk reads it): give a folder such as -o {out.with_suffix('')}/"
            + ("; -f openai-jsonl writes one JSONL file" if out.suffix.lower() == ".jsonl" else "")
        )
    elif fmt in ("hf", "trl") and _foreign_folder(out):
        raise ConfigError(
            f"--out: {out} is a folder but not a saved dataset; -f {fmt} replaces its output "
            "folder, so give a new path or a dataset folder it wrote"
        )
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--out: cannot create the folder {out.parent}: {exc.strerror}") from None


# Names of data files: a dataset folder called so is a mistake (a user who wanted JSONL).
_FILE_SUFFIXES = frozenset({".jsonl", ".json", ".parquet", ".csv", ".arrow", ".txt"})


def _foreign_file(out: Path) -> bool:
    """A non-empty file that no export wrote (none left its manifest beside it): a config, a
    dataset of another tool, what a mistyped ``-o`` names."""
    try:
        return out.stat().st_size > 0 and not manifest_path(out).is_file()
    except OSError:
        return False


def _foreign_folder(out: Path) -> bool:
    """A non-empty folder without the ``state.json`` that ``save_to_disk`` writes."""
    return out.is_dir() and any(out.iterdir()) and not (out / "state.json").is_file()


def _atomic_lines(out: Path, write: Callable[[Any], None]) -> None:
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            write(f)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)


def _write_atif(trajs: Iterable[Trajectory], out: Path, counts: Counter[str]) -> None:
    from agentworld.export.atif import to_atif

    def objects() -> Iterable[dict[str, Any]]:
        for t in trajs:
            counts["trajectories"] += 1
            obj = to_atif(t, counts)
            if obj is None:
                counts["skipped_no_chat_steps"] += 1
                continue
            counts["files" if not out.name.endswith(".jsonl") else "lines"] += 1
            yield obj

    if out.name.endswith(".jsonl"):
        _atomic_lines(out, lambda f: [f.write(orjson.dumps(o) + b"\n") for o in objects()])
        return
    out.mkdir(parents=True, exist_ok=True)
    for obj in objects():
        (out / f"{obj['session_id']}.json").write_bytes(
            orjson.dumps(obj, option=orjson.OPT_INDENT_2)
        )


def export(
    pool: Pool,
    fmt: str,
    out: str | os.PathLike[str],
    selection: Selection = Selection(trainable_only=True),
    options: ExportOptions = ExportOptions(),
    *,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Write the selected trajectories as ``fmt`` to ``out``; return the manifest written beside it."""
    from agentworld.export.manifest import Tally, pool_inputs, write_manifest
    from agentworld.export.select import iter_selected
    from agentworld.pool.explain import selection_dict

    if fmt not in FORMATS:
        raise ConfigError(f"--format: unknown export format {fmt!r}; known: {', '.join(FORMATS)}")
    if fmt != "trl" and options.variant == "prompt":
        raise ConfigError("--variant prompt: only -f trl writes prompt-only (GRPO) rows")
    out = Path(out)
    _check_out(fmt, out)
    counts = Tally()
    extra: dict[str, Any] = {}  # format-specific manifest sections
    inputs = pool_inputs(pool)  # before reading, so the manifest never claims later shards
    trajs = iter_selected(pool, selection, progress=progress)
    if fmt in TEXT_ONLY:
        trajs = _count_non_text(trajs, counts)
    if fmt == "openai-jsonl":
        from agentworld.export import openai

        writer = openai.write_preference if options.variant == "preference" else openai.write_chat
        _atomic_lines(out, lambda f: writer(trajs, f, counts))
    elif fmt == "trl":
        from agentworld.export import tabular, trl_rows

        rows = trl_rows.encoded(trl_rows.ROWS[options.variant](trajs, counts), options.variant)
        schema = trl_rows.arrow_schema(options.variant)
        counts["rows"] = tabular.write_hf(rows, out, schema, trl_rows.features(options.variant))
    elif fmt in ("parquet", "hf"):
        from agentworld.export import tabular

        rows = tabular.iter_rows(trajs, options.rows, counts)
        if fmt == "parquet":
            rows = tabular.struct_messages(rows)
            counts["rows"] = tabular.write_parquet(rows, out, tabular.schema(options.rows))
        else:
            schema = tabular.schema(options.rows, json_messages=True)
            rows = tabular.json_messages(rows)
            counts["rows"] = tabular.write_hf(rows, out, schema, tabular.hf_features(schema))
    elif fmt == "verl":
        from agentworld.export import tabular, verl

        rows = verl.rows(trajs, counts, ability=options.ability, data_source=options.data_source)
        plain = verl.plain_prompts(rows)
        arrow_schema = verl.schema(verl.tool_names(rows), json_prompt=not plain)
        counts["rows"] = tabular.write_parquet(
            rows if plain else verl.json_prompts(rows), out, arrow_schema
        )
        datasets = Path(options.datasets) if options.datasets else None
        extra["reward"] = verl.route_rewards(rows, out, datasets)
    else:
        _write_atif(trajs, out, counts)
    used = asdict(options)
    keep = {
        "openai-jsonl": ("variant",),
        "trl": ("variant",),
        "parquet": ("rows",),
        "hf": ("rows",),
    }.get(fmt, ())
    if fmt == "verl":
        keep = ("ability", "data_source", "datasets")
    return write_manifest(
        pool=pool,
        fmt=fmt,
        out=out,
        filters=selection_dict(selection),
        options={k: used[k] for k in keep},
        counts=counts,
        inputs=inputs,
        extra=extra,
    )
