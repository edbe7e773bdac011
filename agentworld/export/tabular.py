"""Parquet and Hugging Face ``datasets`` rows: one per step or per trajectory, with token ids and masks.

Token ids are the engine's when the record has them (``prompt_ids`` +
``completion_ids``); rows without ids have empty lists and say so in
``token_source``. The loss mask is named ``assistant_masks`` (1 on what the
policy sampled and may be trained on): TRL takes any dataset with
``input_ids`` as already tokenized, and of the masks it reads there, that is
the one it always folds into its labels (``completion_mask`` only counts with
``completion_only_loss=True``; ``trl/trainer/sft_trainer.py``, ``build_labels``). Per-trajectory rows carry the steps as one
sequence (``input_ids``/``assistant_masks``/``logprobs``) as long as each
step's prompt ids continue the previous prompt + completion exactly, the
same rule the trainer uses; where that chain breaks, the trajectory gives one
row per chain (``sequence`` 0, 1, ...; ``sequence_breaks`` counts the breaks).

Rows are built with the pool's messages as recorded, and each writer shapes
them from those. Parquet rows are a raw dump: ``messages`` and ``response``
keep the pool's own message form (``struct_messages``: one struct for all,
null where absent; tool calls flat ``{id, name, arguments}``, arguments the
model's JSON text; content parts as their JSON text), which analysis reads
as recorded. ``-f hf`` rows turn them into the shape chat templates take
(``json_messages``, content parts joined into text as ``-f trl`` does), which
an Arrow struct cannot hold. ``tools`` likewise: as recorded in Parquet, in
OpenAI's function shape for ``-f hf``.
"""

from __future__ import annotations

import shutil
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from agentworld.errors import MissingExtraError
from agentworld.export.conversation import openai_tools, trl_messages, usable
from agentworld.export.select import step_reward, step_trainable
from agentworld.pool import Trajectory

ROWS = ("step", "trajectory")
BATCH_ROWS = 1000


def import_pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise MissingExtraError("pyarrow", "export") from None
    return pyarrow


def _message_type(pa: Any) -> Any:
    call = pa.struct([("id", pa.string()), ("name", pa.string()), ("arguments", pa.string())])
    return pa.struct(
        [
            ("role", pa.string()),
            ("content", pa.string()),
            ("name", pa.string()),
            ("tool_calls", pa.list_(call)),
            ("tool_call_id", pa.string()),
            ("reasoning", pa.string()),
        ]
    )


def _common_fields(pa: Any) -> list[tuple[str, Any]]:
    return [
        ("trajectory", pa.string()),
        ("group", pa.string()),
        ("agent", pa.string()),
        ("dataset", pa.string()),
        ("split", pa.string()),
        ("task", pa.string()),
        ("trajectory_status", pa.string()),
        ("trajectory_reward", pa.float64()),
        ("quality", pa.string()),
        ("tags", pa.list_(pa.string())),
        ("token_source", pa.string()),
        ("tools", pa.string()),
    ]


def schema(rows: str, *, json_messages: bool = False) -> Any:
    """The Arrow schema of step or trajectory rows (``json_messages``: each message a JSON text)."""
    pa = import_pyarrow()
    msg = pa.string() if json_messages else _message_type(pa)
    ids, floats = pa.list_(pa.int32()), pa.list_(pa.float64())
    if rows == "step":
        fields = [
            ("step", pa.string()),
            ("index", pa.int64()),
            ("policy_version", pa.int64()),
            ("status", pa.string()),
            ("reward", pa.float64()),
            *_common_fields(pa),
            ("messages", pa.list_(msg)),
            ("response", msg),
            ("finish_reason", pa.string()),
            ("prompt_ids", ids),
            ("completion_ids", ids),
            ("completion_logprobs", floats),
            ("input_ids", ids),
            ("assistant_masks", pa.list_(pa.int8())),
        ]
    else:
        fields = [
            *_common_fields(pa),
            ("sequence", pa.int64()),
            ("policy_min", pa.int64()),
            ("policy_max", pa.int64()),
            ("n_steps", pa.int64()),
            ("messages", pa.list_(msg)),
            ("step_ids", pa.list_(pa.string())),
            ("step_rewards", floats),
            ("step_trainable", pa.list_(pa.bool_())),
            ("prompt_ids", pa.list_(ids)),
            ("completion_ids", pa.list_(ids)),
            ("completion_logprobs", pa.list_(floats)),
            ("input_ids", ids),
            ("assistant_masks", pa.list_(pa.int8())),
            ("logprobs", floats),
            ("sequence_breaks", pa.int64()),
        ]
    return pa.schema(fields)


def _message(m: dict[str, Any] | None) -> dict[str, Any] | None:
    if m is None:
        return None
    content = m.get("content")
    if content is not None and not isinstance(content, str):
        content = orjson.dumps(content).decode()
    return {
        "role": m.get("role"),
        "content": content,
        "name": m.get("name"),
        "tool_calls": [
            {"id": c.get("id"), "name": c.get("name"), "arguments": c.get("arguments")}
            for c in m.get("tool_calls") or ()
        ],
        "tool_call_id": m.get("tool_call_id"),
        "reasoning": m.get("reasoning"),
    }


def _common(t: Trajectory, tools: Any) -> dict[str, Any]:
    sources = {(s.get("tokens") or {}).get("source", "none") for s in t.steps}
    return {
        "trajectory": t.id,
        "group": t.first("group"),
        "agent": t.first("agent"),
        "dataset": t.first("dataset"),
        "split": t.first("split"),
        "task": t.first("task"),
        "trajectory_status": t.status,
        "trajectory_reward": t.reward,
        "quality": t.labels.get("quality"),
        "tags": list(t.labels.get("tags") or ()),
        "token_source": sources.pop() if len(sources) == 1 else "mixed",
        "tools": tools or None,  # as recorded; each writer renders it
    }


def _ids(step: dict[str, Any]) -> tuple[list[int], list[int], list[float]]:
    tok = step.get("tokens") or {}
    if tok.get("source") == "none":
        return [], [], []
    return (
        list(tok.get("prompt_ids") or ()),
        list(tok.get("completion_ids") or ()),
        list(tok.get("completion_logprobs") or ()),
    )


def step_rows(t: Trajectory, counts: Counter[str]) -> Iterator[dict[str, Any]]:
    """One row per trainable step of a trajectory."""
    for s in t.steps:
        if not step_trainable(s):
            counts["steps_untrainable"] += 1
            continue
        p, c, lp = _ids(s)
        req, resp = s.get("request") or {}, s.get("response") or {}
        row = _common(t, req.get("tools"))
        row["token_source"] = (s.get("tokens") or {}).get("source", "none")
        row.update(
            step=s["id"],
            index=s["index"],
            policy_version=s["policy_version"],
            status=s["status"],
            reward=step_reward(s),
            messages=list(req.get("messages") or ()),
            response=resp.get("message"),
            finish_reason=resp.get("finish_reason"),
            prompt_ids=p,
            completion_ids=c,
            completion_logprobs=lp,
            input_ids=p + c,
            assistant_masks=[0] * len(p) + [1] * len(c),
        )
        counts["steps"] += 1
        yield row


def _chains(steps: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Steps split where a prompt's ids stop continuing the previous prompt + completion.

    Steps without completion ids (no engine ids, failed calls) join the chain
    they fall in without extending it; a trajectory with no ids is one chain.
    """
    chains: list[list[dict[str, Any]]] = [[]]
    seq: list[int] = []
    for s in steps:
        p, c, _ = _ids(s)
        if c:
            if seq and p[: len(seq)] != seq:
                chains.append([])
            seq = p + c
        chains[-1].append(s)
    return chains


def trajectory_rows(t: Trajectory, counts: Counter[str]) -> Iterator[dict[str, Any]]:
    """One row per token sequence of a trajectory: the whole trajectory when its steps chain.

    Where a prompt does not continue the ids before it (the agent rewrote its
    history), the trajectory gives one row per chain, numbered by
    ``sequence``, so no row has empty ``input_ids`` because of a break.
    """
    chains = _chains(t.steps)
    if len(chains) > 1:
        counts["trajectories_with_sequence_breaks"] += 1
    for k, chain in enumerate(chains):
        yield _chain_row(t, chain, k, len(chains) - 1)
    counts["steps"] += len(t.steps)


def _chain_row(t: Trajectory, chain: list[dict[str, Any]], k: int, breaks: int) -> dict[str, Any]:
    last = next((s for s in reversed(chain) if usable(s)), None)
    messages = [*last["request"]["messages"], last["response"]["message"]] if last else []
    pv = [s["policy_version"] for s in chain]
    seq: list[int] = []
    mask: list[int] = []
    lps: list[float] = []
    per_p, per_c, per_lp = [], [], []
    for s in chain:
        p, c, lp = _ids(s)
        per_p.append(p)
        per_c.append(c)
        per_lp.append(lp)
        if not c:
            continue
        new_prompt = p[len(seq) :]
        trainable = 1 if step_trainable(s) else 0
        seq += new_prompt + c
        mask += [0] * len(new_prompt) + [trainable] * len(c)
        lps += [0.0] * len(new_prompt) + (lp if len(lp) == len(c) else [0.0] * len(c))
    row = _common(t, last["request"].get("tools") if last else None)
    row.update(
        sequence=k,
        policy_min=min(pv) if pv else None,
        policy_max=max(pv) if pv else None,
        n_steps=len(chain),
        messages=messages,
        step_ids=[s["id"] for s in chain],
        step_rewards=[step_reward(s) for s in chain],
        step_trainable=[step_trainable(s) for s in chain],
        prompt_ids=per_p,
        completion_ids=per_c,
        completion_logprobs=per_lp,
        input_ids=seq,
        assistant_masks=mask,
        logprobs=lps,
        sequence_breaks=breaks,
    )
    return row


def hf_features(arrow_schema: Any) -> Any:
    """``datasets`` features of rows whose messages are JSON texts: ``messages``/``response`` as Json.

    Json keeps each message to its own keys; an Arrow struct gives every
    message every field, None-filled, which chat templates then render.
    """
    try:
        import datasets
    except ImportError:
        raise MissingExtraError("datasets", "export") from None

    features = datasets.Features.from_arrow_schema(arrow_schema)
    features["messages"] = datasets.List(datasets.Json())
    if "response" in features:
        features["response"] = datasets.Json()
    return features


def struct_messages(rows: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Rows with ``messages`` and ``response`` as the Parquet message struct, and ``tools``
    as the JSON text of the definitions as recorded: the pool's own form."""
    for row in rows:
        row["tools"] = orjson.dumps(row["tools"]).decode() if row["tools"] else None
        row["messages"] = [_message(m) for m in row["messages"]]
        if "response" in row:
            row["response"] = _message(row["response"])
        yield row


def json_messages(rows: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Rows with ``messages`` and ``response`` as JSON texts in the shape chat templates
    take, as ``-f trl`` writes them (tool calls as ``{id, type, function: {name,
    arguments}}`` with arguments an object, reasoning as ``reasoning_content``), each
    message with only the keys it uses, and ``tools`` in OpenAI's function shape (an
    Anthropic agent's ``input_schema`` ones converted): what ``apply_chat_template``
    renders as is."""
    for row in rows:
        tools = openai_tools(row["tools"])
        row["tools"] = orjson.dumps(tools).decode() if tools else None
        row["messages"] = [orjson.dumps(m).decode() for m in trl_messages(row["messages"])]
        if "response" in row:
            resp = row["response"]
            row["response"] = (
                None if resp is None else orjson.dumps(trl_messages([resp])[0]).decode()
            )
        yield row


def iter_rows(trajs: Iterable[Trajectory], rows: str, counts: Counter[str]) -> Iterator[dict]:
    """Step or trajectory rows; ``rows_without_ids`` counts those with empty ``input_ids``
    (recorded without engine ids), which a pre-tokenized consumer cannot train on."""
    make = step_rows if rows == "step" else trajectory_rows
    for t in trajs:
        counts["trajectories"] += 1
        for row in make(t, counts):
            if not row["input_ids"]:
                counts["rows_without_ids"] += 1
            yield row


def write_parquet(rows_iter: Iterable[dict[str, Any]], out: Path, arrow_schema: Any) -> int:
    """Stream rows into one Parquet file in batches; returns the row count."""
    pa = import_pyarrow()
    import pyarrow.parquet as pq

    n = 0
    batch: list[dict[str, Any]] = []
    tmp = out.with_name(f".{out.name}.tmp")
    # pyarrow builds no extension type (JSON) from Python values: rows are built as
    # their storage (JSON text) and cast.
    storage = pa.schema([(f.name, _storage_type(pa, f.type)) for f in arrow_schema])

    def table(rows: list[dict[str, Any]]) -> Any:
        return pa.Table.from_pylist(rows, schema=storage).cast(arrow_schema)

    with pq.ParquetWriter(tmp, arrow_schema) as writer:
        for row in rows_iter:
            batch.append(row)
            if len(batch) >= BATCH_ROWS:
                writer.write_table(table(batch))
                n += len(batch)
                batch.clear()
        if batch or n == 0:
            writer.write_table(table(batch))
            n += len(batch)
    tmp.replace(out)
    return n


def _storage_type(pa: Any, t: Any) -> Any:
    """``t`` with every extension type replaced by its storage type (lists and structs walked)."""
    if isinstance(t, pa.BaseExtensionType):
        return t.storage_type
    if pa.types.is_list(t):
        return pa.list_(_storage_type(pa, t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([(f.name, _storage_type(pa, f.type)) for f in t])
    return t


def write_hf(
    rows_iter: Iterable[dict[str, Any]], out: Path, arrow_schema: Any, features: Any = None
) -> int:
    """A ``datasets`` folder (``save_to_disk``), built from a streamed Parquet file.

    ``features``, when given, is what the Parquet columns are cast to (e.g. JSON
    texts to ``Json``, which Parquet cannot stream).
    """
    try:
        import datasets
    except ImportError:
        raise MissingExtraError("datasets", "export") from None
    datasets.disable_progress_bars()  # the export command shows its own progress
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".aw-hf-", dir=out.parent) as tmp:
        parquet = Path(tmp) / "rows.parquet"
        n = write_parquet(rows_iter, parquet, arrow_schema)
        if n:
            ds = datasets.Dataset.from_parquet(str(parquet), cache_dir=str(Path(tmp) / "cache"))
            if features is not None:
                ds = ds.cast(features)
        else:
            ds = _empty_dataset(datasets, arrow_schema, features)
        if out.exists():
            shutil.rmtree(out)
        # An empty dataset would be saved as no shard at all, which load_from_disk refuses.
        ds.save_to_disk(str(out), num_shards=None if n else 1)
        del ds
    return n


def _empty_dataset(datasets: Any, arrow_schema: Any, features: Any = None) -> Any:
    """A dataset of no rows with the export's columns (``from_parquet`` fails on zero rows)."""
    features = features or datasets.Features.from_arrow_schema(arrow_schema)
    return datasets.Dataset.from_dict({name: [] for name in arrow_schema.names}, features=features)
