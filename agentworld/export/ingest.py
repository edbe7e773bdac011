"""`aw pool import`: outside trajectories (OpenAI JSONL, ATIF) into the pool as ordinary steps.

Every row becomes a trajectory of ``protocol = "import"`` steps, one per
assistant turn, with ``tokens.source = "none"`` unless the file carries token
ids. Ids are derived from the row's content (or its ATIF ``session_id``), so
importing a file twice adds nothing the second time. A bad row is refused
with its line number; by default nothing is written when any row is bad.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from agentworld import records
from agentworld.errors import ConfigError, RecordError
from agentworld.export import atif
from agentworld.export.openai import RowError, parse_chat, parse_preference
from agentworld.plural import plural
from agentworld.pool import Pool
from agentworld.pool.importer import ImportReport as RecordsReport
from agentworld.pool.importer import import_records, refusal_error
from agentworld.pool.labels import FIELDS, check_value

FORMATS = ("openai-jsonl", "atif", "records")


@dataclass(frozen=True)
class ImportOptions:
    """How imported rows are stamped."""

    agent: str | None = None  # default: the file's agent name (ATIF) or "import"
    dataset: str | None = None
    split: str | None = None
    skip_bad: bool = False
    author: str = "import"


@dataclass
class ImportReport:
    """What an import of outside trajectories added, found already there and refused."""

    trajectories: int = 0
    steps: int = 0
    already_present: int = 0
    labels: int = 0
    bad_rows: list[str] = field(default_factory=list)

    def refusals(self) -> list[str]:
        """The refused rows, each as ``path:line: problem``."""
        return list(self.bad_rows)

    def summary(self) -> str:
        """One line for people: what was added, what was already there, what was refused."""
        return (
            f"imported {plural(self.trajectories, 'trajectory')} ({plural(self.steps, 'step')}), "
            f"{self.already_present} already present, {plural(len(self.bad_rows), 'bad row')} "
            "refused"
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Row:
    location: str
    records: list[dict[str, Any]]
    labels: list[tuple[str, dict[str, Any]]]


def _digest(*parts: Any) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else str(p).encode())
        h.update(b"\0")
    return h.hexdigest()


def _valid_id(v: Any) -> bool:
    try:
        records._check_id(v, "id")
    except RecordError:
        return False
    return True


def _steps_and_end(
    tid: str,
    calls: list[dict[str, Any]],
    common: dict[str, Any],
    *,
    reward: float | None,
    status: str = "done",
    meta: dict[str, Any],
) -> list[dict[str, Any]]:
    now = time.time()
    out = []
    for i, call in enumerate(calls):
        sid = call.get("id") if _valid_id(call.get("id")) else "st_" + _digest(tid, i)[:26]
        out.append(
            records.make_step(
                id=sid,
                trajectory=tid,
                index=i,
                request={k: v for k, v in call["request"].items() if v is not None},
                response=call["response"],
                tokens=call.get("tokens"),
                protocol="import",
                started_at=call.get("started_at") or now,
                reward=call.get("reward"),
                policy_version=call.get("policy_version", 0),
                metadata=meta,
                **common,
            )
        )
    out.append(
        records.make_end(
            id="en_" + _digest(tid, "end")[:26],
            trajectory=tid,
            status=status,
            steps=len(calls),
            reward=reward,
            policy_version=max((c.get("policy_version", 0) for c in calls), default=0),
            **common,
        )
    )
    return out


def _openai_row(obj: Any, location: str, raw: bytes, opts: ImportOptions) -> list[_Row]:
    if not isinstance(obj, dict):
        raise RowError("", "a line is a JSON object")
    common = {"agent": opts.agent or "import", "dataset": opts.dataset, "split": opts.split}
    meta = {"import": {"format": "openai-jsonl", "row": location}}
    base = _digest("openai-jsonl", raw)
    if "input" in obj:
        prompt, tools, good, bad = parse_preference(obj)
        group = "grp_imp_" + base[:24]
        rows = []
        for k, (msg, reward) in enumerate(((good, 1.0), (bad, 0.0))):
            tid = f"tr_imp_{base[:22]}_{k}"
            call = {"request": {"messages": prompt, "tools": tools}, "response": {"message": msg}}
            recs = _steps_and_end(tid, [call], {**common, "group": group}, reward=reward, meta=meta)
            rows.append(_Row(location, recs, []))
        return rows
    msgs, weights, tools = parse_chat(obj)
    tid = "tr_imp_" + base[:24]
    calls = [
        {"request": {"messages": msgs[:i], "tools": tools}, "response": {"message": m}}
        for i, m in enumerate(msgs)
        if m["role"] == "assistant"
    ]
    recs = _steps_and_end(tid, calls, common, reward=None, meta=meta)
    asst = [w for m, w in zip(msgs, weights, strict=True) if m["role"] == "assistant"]
    labels = [
        (f"step:{rec['id']}", {"trainable": False})
        for rec, w in zip(recs, asst, strict=False)
        if w == 0
    ]
    return [_Row(location, recs, labels)]


def _parse_time(ts: Any) -> float | None:
    if not isinstance(ts, str):
        return None
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _atif_row(obj: Any, location: str, raw: bytes, opts: ImportOptions) -> list[_Row]:
    parsed = atif.parse_atif(obj)
    extra = parsed["extra"]
    session = parsed["session_id"]
    tid = session if _valid_id(session) else "tr_imp_" + _digest("atif", session, raw)[:24]

    def pick(key: str, override: str | None) -> str | None:
        v = override if override is not None else extra.get(key)
        return v if isinstance(v, str) and v else None

    common = {
        "agent": opts.agent or parsed["agent"],
        "dataset": pick("dataset", opts.dataset),
        "split": pick("split", opts.split),
        "task": pick("task", None),
        "group": pick("group", None),
    }
    calls, labels = [], []
    for c in parsed["calls"]:
        m, cx = c["metrics"], c["extra"]
        usage = {k: m[k] for k in ("prompt_tokens", "completion_tokens") if k in m}
        tokens = None
        if m.get("completion_token_ids") is not None:
            tokens = {"source": "engine", "completion_ids": m["completion_token_ids"]}
            if m.get("prompt_token_ids") is not None:
                tokens["prompt_ids"] = m["prompt_token_ids"]
            if m.get("logprobs") is not None:
                tokens["completion_logprobs"] = m["logprobs"]
        response = {"message": c["message"], **({"usage": usage} if usage else {})}
        reward = cx.get("reward")
        version = cx.get("policy_version")
        calls.append(
            {
                "id": cx.get("step"),
                "request": {
                    "model": c["model"],
                    "messages": c["messages"],
                    "tools": parsed["tools"],
                },
                "response": response,
                "tokens": tokens,
                "started_at": _parse_time(c["timestamp"]),
                "reward": reward if isinstance(reward, int | float) else None,
                # ATIF extra written by `aw export`: which policy sampled the step.
                "policy_version": version if isinstance(version, int) and version >= 0 else 0,
            }
        )
    reward = extra.get("reward")
    status = extra.get("status") if extra.get("status") in records.END_STATUSES else "done"
    meta = {"import": {"format": "atif", "row": location, "session_id": session}}
    recs = _steps_and_end(
        tid,
        calls,
        common,
        reward=reward if isinstance(reward, int | float) else None,
        status=status,
        meta=meta,
    )
    for rec, c in zip(recs, parsed["calls"], strict=False):
        if c["extra"].get("trainable") is False:
            labels.append((f"step:{rec['id']}", {"trainable": False}))
    tlabels = extra.get("labels")
    if isinstance(tlabels, dict):
        kept = {}
        for f, v in tlabels.items():
            if f in FIELDS and f != "reward":
                try:
                    kept[f] = check_value(f, v)
                except RecordError as exc:
                    raise RowError(f"extra.labels.{f}", exc.problem) from None
        if kept:
            labels.append((f"trajectory:{tid}", kept))
    return [_Row(location, recs, labels)]


def _sources(path: Path, fmt: str) -> Iterator[tuple[str, bytes]]:
    """(location, raw JSON) of each row: JSONL lines, one JSON file, or a folder of them."""
    if path.is_dir():
        files = sorted(path.glob("*.json")) + sorted(path.glob("*.jsonl"))
        if not files:
            raise ConfigError(f"{path}: no .json or .jsonl files to import")
        for f in files:
            yield from _sources(f, fmt)
        return
    if not path.exists():
        raise ConfigError(f"{path}: no such file")
    refuse_binary(path, fmt)
    if fmt == "atif" and path.suffix == ".json":
        yield str(path), path.read_bytes()
        return
    with open(path, "rb") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                yield f"{path}:{n}", line


# What a file's first bytes say it is, when it is no JSON a format here reads.
_MAGIC = (
    (b"PAR1", "a Parquet file"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed"),
    (b"\x1f\x8b", "gzip-compressed"),
    (b"PK\x03\x04", "a zip archive"),
    (b"ARROW1", "an Arrow file"),
)


def refuse_binary(path: Path, fmt: str) -> None:
    """ConfigError naming what ``path`` is when its first bytes say it is Parquet, an
    archive or compressed (``-f records`` reads zstd itself): each of its "lines" was
    refused as not JSON, twenty of them, naming nothing of the cause."""
    with open(path, "rb") as f:
        head = f.read(8)
    what = next((said for magic, said in _MAGIC if head.startswith(magic)), None)
    if what is None or (fmt == "records" and what == "zstd-compressed"):
        return
    if what == "zstd-compressed":
        hint = "decompress it (zstd -d), or import a pool's own records with -f records"
    elif what == "gzip-compressed":
        hint = "decompress it (gunzip) first"
    else:
        hint = "write its rows as JSONL first"
    raise ConfigError(
        f"{path}: {what}, not JSON lines; aw pool import reads JSONL (-f openai-jsonl, "
        f"atif, records; records also zstd-compressed): {hint}"
    )


def import_file(
    pool: Pool, path: str | Path, fmt: str, opts: ImportOptions = ImportOptions()
) -> ImportReport | RecordsReport:
    """Import a file (or folder) of ``fmt`` rows; returns what was added and what was refused.

    Any bad row raises RecordError naming every bad row by file and line, and
    nothing is written, unless ``opts.skip_bad``.
    """
    if fmt not in FORMATS:
        raise ConfigError(f"--format: unknown import format {fmt!r}; known: {', '.join(FORMATS)}")
    path = Path(path)
    if fmt == "records":
        # The project's own record JSONL is imported by the pool package itself.
        if not path.exists():
            raise ConfigError(f"{path}: no such file")
        refuse_binary(path, fmt)
        return import_records(pool, path, skip_bad=opts.skip_bad)
    build = _atif_row if fmt == "atif" else _openai_row
    report = ImportReport()
    rows: list[_Row] = []
    copies: Counter[bytes] = Counter()
    for location, raw in _sources(path, fmt):
        try:
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                raise RowError("", f"not JSON: {exc}") from None
            # A row's id comes from its bytes, so importing a file again adds nothing; the
            # same row twice in what is imported (identical samples of one prompt, common
            # in GRPO data) is two samples: the later copies' ids count them.
            k = copies[raw]
            copies[raw] += 1
            built = build(obj, location, raw if k == 0 else raw + b"\0copy %d" % k, opts)
            for row in built:
                for rec in row.records:
                    records.validate(rec)
            rows.extend(built)
        except (RowError, RecordError) as exc:
            report.bad_rows.append(f"{location}: {exc}")
    if report.bad_rows and not opts.skip_bad:
        raise refusal_error(report.bad_rows, len(report.bad_rows))
    idx = pool.index()
    seen: set[str] = set()
    to_write: list[dict[str, Any]] = []
    labels: list[tuple[str, dict[str, Any]]] = []
    for row in rows:
        tid = row.records[0]["trajectory"]
        if tid in seen or idx.trajectory(tid) is not None:
            report.already_present += 1
            continue
        seen.add(tid)
        to_write.extend(row.records)
        labels.extend(row.labels)
        report.trajectories += 1
        report.steps += len(row.records) - 1
    if to_write:
        with pool.writer(name="import") as w:
            for rec in to_write:
                w.append(rec)
    for target, fields in labels:
        report.labels += pool.labels.set([target], fields, author=opts.author)
    return report
