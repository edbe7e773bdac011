"""Tasks of a dataset split: read from JSONL, Parquet, reasoning-gym or a Python function."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentworld.config import DatasetConfig, SplitConfig, resolve_callable
from agentworld.errors import ConfigError, CorruptDataError, MissingExtraError

_DEFAULT_PROMPT_FIELDS = ("prompt", "question", "problem", "input")
_DEFAULT_ANSWER_FIELDS = ("answer", "solution", "target", "output")


@dataclass(frozen=True)
class Task:
    """One task: what the agent is asked and what a scorer compares against.

    ``answer`` and ``entry`` are for scorers; command agents never see them.
    """

    id: str
    prompt: str
    answer: Any = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    dataset: str = ""
    split: str = ""
    entry: Any = None  # the source's own row (reasoning-gym's verifier needs it)
    verify: Callable[[str | None, Any], float] | None = field(
        default=None, compare=False, repr=False
    )

    def __getitem__(self, key: object) -> Any:
        # task["prompt"] is what a newcomer writes (a command agent reads a dict): say what
        # to write instead of Python's bare "'Task' object is not subscriptable".
        fields = ("id", "prompt", "answer", "metadata", "dataset", "split")
        if key in fields:
            hint = f"use task.{key}"
        elif isinstance(key, str) and key in self.metadata:
            hint = f"use task.metadata[{key!r}] (the row's other columns)"
        else:
            hint = (
                "it has task.id, task.prompt, task.answer, task.metadata (the row's other "
                "columns), task.dataset, task.split"
            )
        raise TypeError(f"a Task is not a dict: {hint}")

    def public(self) -> dict[str, Any]:
        """What a black-box agent receives: no answer, no metadata (both can leak it)."""
        return {"id": self.id, "prompt": self.prompt, "dataset": self.dataset, "split": self.split}


def load_tasks(
    dataset: DatasetConfig, split: str | None = None, limit: int | None = None
) -> list[Task]:
    """The tasks of one split, in source order, at most ``limit``."""
    sp = dataset.split(split)
    src = dataset.source
    if src.type == "reasoning-gym":
        tasks = _reasoning_gym(dataset, sp, limit)
    else:
        if src.type == "jsonl":
            rows: Iterable[Any] = _jsonl(sp)
        elif src.type == "parquet":
            rows = _parquet(sp)
        else:
            fn = resolve_callable(src.function or "", dataset.where, "source.function")
            try:
                rows = fn(split=sp.name, **sp.kwargs)
            except Exception as exc:
                raise dataset.where.error(
                    "source.function", f"{src.function} failed for split {sp.name!r}: {exc!r}"
                ) from exc
        tasks = []
        for i, row in enumerate(rows):
            if limit is not None and len(tasks) >= limit:
                break
            tasks.append(_task_of_row(dataset, sp, i, row))
    if not tasks:  # else `aw run` runs "0 x n" episodes and exits 0 without a word
        raise dataset.where.error(
            f"splits.{sp.name}", f"no tasks in {sp.path or f'split {sp.name!r}'}"
        )
    seen: set[str] = set()
    for t in tasks:
        if t.id in seen:
            raise dataset.where.error(
                "source.fields.id", f"task id {t.id!r} appears twice in split {sp.name!r}"
            )
        seen.add(t.id)
    return tasks


def _jsonl(sp: SplitConfig) -> Iterable[Any]:
    assert sp.path is not None
    with open(sp.path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                raise CorruptDataError(f"{sp.path}:{n}", f"not JSON: {exc}") from None


def _parquet(sp: SplitConfig) -> Iterable[Any]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise MissingExtraError("pyarrow", "export") from None
    assert sp.path is not None
    try:
        table = pq.read_table(sp.path)
    except Exception as exc:
        raise CorruptDataError(str(sp.path), f"not a readable Parquet file: {exc}") from None
    return table.to_pylist()


def _pick(
    dataset: DatasetConfig,
    row: Mapping[str, Any],
    key: str,
    defaults: tuple[str, ...],
    where_row: str,
) -> Any:
    column = dataset.source.fields.get(key)
    if column is not None:
        if column not in row:
            raise dataset.where.error(
                f"source.fields.{key}", f"column {column!r} missing in {where_row}"
            )
        return row[column]
    for c in defaults:
        if c in row:
            return row[c]
    return None


def _task_of_row(dataset: DatasetConfig, sp: SplitConfig, i: int, row: Any) -> Task:
    where_row = f"{sp.path or sp.name} row {i + 1}"
    if not isinstance(row, Mapping):
        raise ConfigError(
            f"{dataset.where.path}: dataset {dataset.name!r}: {where_row} is not an object"
        )
    prompt = _pick(dataset, row, "prompt", _DEFAULT_PROMPT_FIELDS, where_row)
    if not isinstance(prompt, str) or not prompt:
        raise dataset.where.error(
            "source.fields.prompt",
            f"no prompt text in {where_row} (columns: {', '.join(map(str, row))})",
        )
    answer = _pick(dataset, row, "answer", _DEFAULT_ANSWER_FIELDS, where_row)
    tid = _pick(dataset, row, "id", ("id", "task_id"), where_row)
    used = {dataset.source.fields.get(k) for k in ("id", "prompt", "answer")}
    metadata = {k: json_safe(v) for k, v in row.items() if k not in used}
    return Task(
        id=str(tid) if tid is not None else f"{sp.name}-{i}",
        prompt=prompt,
        answer=answer,
        metadata=metadata,
        dataset=dataset.name,
        split=sp.name,
        entry=row,
    )


def _reasoning_gym(dataset: DatasetConfig, sp: SplitConfig, limit: int | None) -> list[Task]:
    try:
        import reasoning_gym
    except ImportError:
        raise MissingExtraError("reasoning-gym", "run") from None
    src = dataset.source
    size = sp.size if limit is None else min(sp.size or 0, limit)
    try:
        rg = reasoning_gym.create_dataset(src.task, size=size, seed=sp.seed, **src.config)
    except (
        Exception
    ) as exc:  # reasoning-gym raises ValueError/TypeError/AssertionError for bad configs
        raise dataset.where.error(
            "source", f"reasoning-gym rejected task {src.task!r}: {exc}"
        ) from None
    tasks = []
    for i in range(len(rg)):
        entry = rg[i]
        tasks.append(
            Task(
                id=f"{src.task}-{sp.seed}-{i}",
                prompt=entry["question"],
                answer=entry["answer"],
                metadata=json_safe(entry.get("metadata") or {}),
                dataset=dataset.name,
                split=sp.name,
                entry=entry,
                # The generating dataset's own score_answer: its config can change scoring.
                verify=rg.score_answer,
            )
        )
    return tasks


def json_safe(value: Any) -> Any:
    """A copy made only of JSON types (tuples become lists, NaN and objects become strings)."""
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [json_safe(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)
