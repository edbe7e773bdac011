"""A step as a readable transcript and its metadata, built as rich Text (never markup)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from rich.table import Table
from rich.text import Text

from agentworld.literal import clean, literal
from agentworld.pool.labels import label_text

ROLE_STYLES = {
    "system": "bold magenta",
    "developer": "bold magenta",
    "user": "bold cyan",
    "assistant": "bold green",
    "tool": "bold yellow",
}


@dataclass(frozen=True)
class Clip:
    """How much of a long text a transcript shows: a text over ``max_lines`` or
    ``max_chars`` shows its first and last lines, each end within a character budget,
    around a line saying what is left out.

    A coding agent's tool results are often whole files (hundreds of kilobytes): laid out
    in full, one step takes seconds on every key. ``note`` ends the line that counts
    what is left out (the inspector names the key that shows it all).
    """

    max_lines: int = 100
    max_chars: int = 10_000
    head_lines: int = 40
    tail_lines: int = 10
    head_chars: int = 4_000
    tail_chars: int = 1_000
    note: str = ""

    def cut(self, s: str) -> tuple[int, int] | None:
        """Where the left-out middle of ``s`` starts and ends; None when all of it shows."""
        if len(s) <= self.max_chars and s.count("\n") < self.max_lines:
            return None
        head_end = _after_lines(s, self.head_lines, self.head_chars)
        tail_start = max(len(s) - self.tail_chars, _before_lines(s, self.tail_lines))
        return (head_end, tail_start) if tail_start > head_end else None

    def line(self, left_out: str) -> str:
        """The line standing for ``left_out``: how many lines and characters, and the note."""
        lines = left_out.count("\n")
        size = f"{len(left_out):,} characters"
        what = f"{lines:,} lines ({size})" if lines else size
        return f"… {what} not shown{self.note}"


def _after_lines(s: str, lines: int, chars: int) -> int:
    """The end of the first ``lines`` lines of ``s``, at most ``chars`` in."""
    at = 0
    for _ in range(lines):
        nl = s.find("\n", at, chars)
        if nl < 0:
            return min(chars, len(s))
        at = nl + 1
    return at


def _before_lines(s: str, lines: int) -> int:
    """The start of the last ``lines`` lines of ``s`` (a final newline ends the last)."""
    at = len(s) - 1 if s.endswith("\n") else len(s)
    for _ in range(lines):
        nl = s.rfind("\n", 0, at)
        if nl < 0:
            return 0
        at = nl
    return at + 1


def clipped(value: Any, clip: Clip | None, style: str = "") -> Text:
    """``value`` as literal Text; with ``clip``, a long one as its head and tail only."""
    s = value if isinstance(value, str) else ("" if value is None else str(value))
    cut = clip.cut(s) if clip is not None else None
    if clip is None or cut is None:
        return literal(s, style=style)
    head, tail = s[: cut[0]], s[cut[1] :]
    out = literal(head, style=style)
    out.append("" if head.endswith("\n") else "\n")
    out.append(clip.line(s[cut[0] : cut[1]]) + "\n", style="bold reverse")
    out.append(literal(tail, style=style))
    return out


def content_text(content: Any) -> str:
    """A message's content as text: parts' text joined, other parts as ``<type>``."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for p in content if isinstance(content, list) else [content]:
        if isinstance(p, dict) and isinstance(p.get("text"), str):
            parts.append(p["text"])
        elif isinstance(p, dict):
            parts.append(f"<{p.get('type', 'part')}>")
        else:
            parts.append(str(p))
    return "\n".join(parts)


def message_text(m: dict[str, Any], out: Text | None = None, clip: Clip | None = None) -> Text:
    """One normalised message: role header, reasoning, content, tool calls (long ones
    clipped by ``clip``, when given)."""
    out = out if out is not None else Text()
    role = m.get("role", "?")
    header = f"── {role}"
    if m.get("name"):
        header += f" ({clean(m['name'])})"
    if m.get("tool_call_id"):
        header += f" ← {clean(m['tool_call_id'])}"
    out.append(header + "\n", style=ROLE_STYLES.get(role, "bold"))
    if m.get("reasoning"):
        out.append("reasoning: ", style="italic dim")
        out.append(clipped(m["reasoning"], clip, style="italic dim"))
        out.append("\n")
    content = content_text(m.get("content"))
    if content:
        out.append(clipped(content, clip))
        out.append("\n")
    for call in m.get("tool_calls") or ():
        out.append("→ tool call ", style="bold yellow")
        out.append(literal(call.get("name"), style="yellow"))
        if call.get("id"):
            out.append(f" [{clean(call['id'])}]", style="dim")
        out.append("\n  ")
        out.append(clipped(call.get("arguments", ""), clip))
        out.append("\n")
    return out


def message_gist(m: Any) -> Any:
    """What must match for a message resent by the agent to count as the one it had sent
    (agents drop reasoning, or re-serialise tool arguments, when they send it back)."""
    if not isinstance(m, dict):
        return m
    calls = tuple(c.get("name") if isinstance(c, dict) else c for c in m.get("tool_calls") or ())
    return m.get("role"), content_text(m.get("content")).strip(), m.get("tool_call_id"), calls


def new_from(step: dict[str, Any], prev: dict[str, Any] | None) -> int:
    """Where ``step``'s conversation stops repeating ``prev``'s request: the index of the
    first message ``prev`` did not send (its reply, as the agent sent it back), or 0 when
    ``step`` does not go on from it (another conversation, or one the agent compacted)."""
    if prev is None:
        return 0
    msgs = (step.get("request") or {}).get("messages")
    before = (prev.get("request") or {}).get("messages")
    if not isinstance(msgs, list) or not isinstance(before, list):
        return 0
    n = len(before)
    if not n or len(msgs) <= n:
        return 0
    if msgs[:n] == before or [message_gist(m) for m in msgs[:n]] == [
        message_gist(m) for m in before
    ]:
        return n
    return 0


def step_transcript(
    step: dict[str, Any],
    *,
    only_new_from: int = 0,
    earlier_note: str = "",
    clip: Clip | None = None,
) -> Text:
    """The conversation a step saw (from message ``only_new_from`` on) and its response;
    with ``clip``, each long text as its head and tail."""
    out = Text()
    req = step.get("request") or {}
    msgs = req.get("messages")
    if msgs is not None:
        if only_new_from:
            out.append(f"… {only_new_from} earlier messages{earlier_note}\n", style="dim")
        for m in msgs[only_new_from:]:
            message_text(m, out, clip)
    elif req.get("prompt") is not None:
        out.append("── prompt\n", style="bold cyan")
        out.append(clipped(req["prompt"], clip))
        out.append("\n")
    resp = step.get("response") or {}
    if resp.get("message"):
        message_text(resp["message"], out, clip)
    elif resp.get("text") is not None:
        out.append("── completion\n", style="bold green")
        out.append(clipped(resp["text"], clip))
        out.append("\n")
    if step.get("error"):
        err = step["error"]
        out.append("── error ", style="bold red")
        out.append(literal(f"{err.get('type')}: {err.get('message')}", style="red"))
        out.append("\n")
    return out


def _ts(t: Any) -> str:
    if not isinstance(t, int | float):
        return "-"
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def usage_text(usage: Any) -> str:
    """``usage`` as ``key=value`` pairs, leaving out what the upstream sent empty
    (OpenAI's ``prompt_tokens_details=None`` says nothing)."""
    if not isinstance(usage, dict):
        return ""
    return " ".join(f"{k}={v}" for k, v in _flat(usage) if v not in (None, {}, []))


def _flat(d: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """Nested usage (``prompt_tokens_details``) as dotted keys, not a Python dict's repr."""
    out: list[tuple[str, Any]] = []
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.extend(_flat(v, f"{prefix}{k}."))
        else:
            out.append((f"{prefix}{k}", v))
    return out


def _problems(step: dict[str, Any]) -> list[tuple[str, Any]]:
    """The rows a reader must see even with the metadata folded: the step's error,
    what the proxy left out of it, and the trajectory it branched off."""
    rows: list[tuple[str, Any]] = []
    if step.get("error"):
        e = step["error"]
        rows.append(("error", f"{e.get('type')}: {e.get('message')}"))
    meta = step.get("metadata") if isinstance(step.get("metadata"), dict) else {}
    invalid = meta.get("upstream_invalid")
    if isinstance(invalid, dict) and invalid:  # what the proxy left out of the step, and why
        rows.append(("left out", "; ".join(f"{k}: {v}" for k, v in invalid.items())))
    return rows


def step_summary(step: dict[str, Any], mark: str = "") -> Text:
    """The step's metadata folded to one line (status, finish, tokens, time, policy,
    labels), plus its error and fork lines when it has them; ``mark`` starts the line."""
    t = step.get("timings") or {}
    resp = step.get("response") or {}
    usage = resp.get("usage") if isinstance(resp.get("usage"), dict) else {}
    tokens = step.get("tokens") or {}
    started, ended = t.get("started_at"), t.get("ended_at")
    prompt_n = usage.get("prompt_tokens") or len(tokens.get("prompt_ids") or ())
    completion_n = usage.get("completion_tokens") or len(tokens.get("completion_ids") or ())
    parts = [
        f"step {step.get('index')}",
        str(step.get("status")),
        f"finish {resp.get('finish_reason') or '-'}",
        f"{prompt_n}+{completion_n} tok ({tokens.get('source', 'no ids')})",
    ]
    if isinstance(ended, int | float) and isinstance(started, int | float):
        parts.append(f"{ended - started:.2f} s")
    parts.append(f"pv {step.get('policy_version')}")
    if step.get("_labels"):
        parts.append("labels " + label_text(step["_labels"]))
    out = Text(mark)
    out.append(literal(" · ".join(parts), style="bold" if step.get("status") != "ok" else ""))
    meta = step.get("metadata") if isinstance(step.get("metadata"), dict) else {}
    fork = meta.get("forked_from")
    rows = _problems(step)
    if isinstance(fork, dict):
        rows.append(("forked from", f"{fork.get('trajectory')} step {fork.get('step')} (f: open)"))
    for k, v in rows:
        out.append(f"\n{k} ", style="bold")
        out.append(literal(v, style="red" if k != "forked from" else ""))
    return out


def step_metadata(step: dict[str, Any]) -> Table:
    """Timings, usage, finish reason, policy version, token source, error and labels: a
    key column and a value column, a long value wrapping within its own column (as one
    Text it went on at the pane's left edge, under the keys)."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(justify="right", style="bold", no_wrap=True, min_width=12)
    grid.add_column(overflow="fold")  # an id or a path longer than the line is cut up
    for key, value in metadata_rows(step):
        grid.add_row(key, value)
    return grid


def metadata_rows(step: dict[str, Any]) -> list[tuple[str, Text]]:
    """The rows of ``step_metadata``: each key with its value as literal text."""
    t = step.get("timings") or {}
    resp = step.get("response") or {}
    tokens = step.get("tokens") or {}
    started, ended = t.get("started_at"), t.get("ended_at")
    rows: list[tuple[str, Any]] = [
        ("step", step.get("id")),
        (
            "index",
            step.get("index")
            if step.get("choice") is None
            else f"{step['index']}.{step['choice']}",
        ),
        ("status", step.get("status")),
        ("protocol", step.get("protocol")),
        ("model", (step.get("request") or {}).get("model")),
        ("policy", step.get("policy_version")),
        ("started", _ts(started)),
        (
            "duration",
            f"{ended - started:.3f} s"
            if isinstance(ended, int | float) and isinstance(started, int | float)
            else "-",
        ),
        (
            "first token",
            f"{t['first_token_s']:.3f} s" if t.get("first_token_s") is not None else "-",
        ),
        ("upstream", f"{t['upstream_s']:.3f} s" if t.get("upstream_s") is not None else "-"),
        ("finish", resp.get("finish_reason")),
        ("usage", usage_text(resp.get("usage")) or "-"),
        (
            "tokens",
            f"{tokens.get('source', 'none')}: {len(tokens.get('prompt_ids') or ())} prompt + {len(tokens.get('completion_ids') or ())} completion",
        ),
    ]
    rows.extend(_problems(step))
    meta = step.get("metadata") if isinstance(step.get("metadata"), dict) else {}
    rest = [(k, v) for k, v in meta.items() if k != "upstream_invalid"]
    if rest:
        rows.append(
            (
                "metadata",
                " ".join(f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in rest),
            )
        )
    if step.get("_labels"):
        rows.append(("labels", label_text(step["_labels"])))
    return [
        (k, literal("-" if v is None else v, style="red" if k in ("error", "left out") else ""))
        for k, v in rows
    ]
