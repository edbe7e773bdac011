"""OpenAI fine-tuning JSONL: chat SFT lines and DPO preference pairs, out of and into the pool.

Chat (SFT) line: ``{"messages": [...], "tools": [...], "parallel_tool_calls": false}``
with ``"weight": 0|1`` on assistant messages (1 on what the policy sampled and
may be trained on); a conversation with a tool result that answers no call
is left out. Preference (DPO) line: ``{"input": {"messages", "tools"},
"preferred_output": [assistant], "non_preferred_output": [assistant]}``, kept
to the guide's one-turn, text-only pairs. Both are checked against the
fine-tuning input schema in ``tests/export/openai_schema.py``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import IO, Any

import orjson

from agentworld.export.conversation import (
    Segment,
    content_text,
    openai_tools,
    orphan_tool_results,
    segments,
)
from agentworld.export.manifest import left_out
from agentworld.export.pairs import preference_pairs
from agentworld.export.select import step_trainable
from agentworld.pool import Trajectory

# -- export -------------------------------------------------------------------------


def to_openai_message(m: dict[str, Any], weight: int | None = None) -> dict[str, Any]:
    """One normalised message in OpenAI chat shape (developer becomes system; no reasoning)."""
    role = "system" if m["role"] == "developer" else m["role"]
    out: dict[str, Any] = {"role": role, "content": m.get("content")}
    if out["content"] is None and not (role == "assistant" and m.get("tool_calls")):
        # The schema takes a null content only beside tool_calls: a response cut off in
        # its reasoning (no text, no calls) is an empty one.
        out["content"] = ""
    if m.get("name") and role != "tool":  # the schema's tool message has no name
        out["name"] = m["name"]
    if m.get("tool_calls"):
        out["tool_calls"] = [
            {
                "id": c.get("id") or f"call_{i}",
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for i, c in enumerate(m["tool_calls"])
        ]
    if m.get("tool_call_id"):
        out["tool_call_id"] = m["tool_call_id"]
    if weight is not None and role == "assistant":
        out["weight"] = weight
    return out


def chat_line(seg: Segment) -> dict[str, Any]:
    """An SFT line: weight 1 on trainable sampled responses, 0 on every other assistant turn."""
    msgs = []
    for i, m in enumerate(seg.messages):
        step = seg.sampled.get(i)
        weight = 1 if step is not None and step_trainable(step) else 0
        msgs.append(to_openai_message(m, weight if m["role"] == "assistant" else None))
    line: dict[str, Any] = {"messages": msgs}
    tools = openai_tools(seg.tools)
    if tools:
        line["tools"] = tools
        line["parallel_tool_calls"] = any(
            len(m.get("tool_calls") or ()) > 1 for m in seg.messages if m["role"] == "assistant"
        )
    return line


def write_chat(trajs: Iterable[Trajectory], f: IO[bytes], counts: Counter[str]) -> None:
    """One line per linear conversation of each trajectory."""
    for t in trajs:
        counts["trajectories"] += 1
        segs = segments(t.steps)
        if not segs:
            counts["skipped_no_chat_steps"] += 1
        for seg in segs:
            if orphan_tool_results(seg.messages):
                # The schema needs every tool result to answer a call before it; dropping
                # only the result would train on a reply to something no longer shown.
                left_out(counts, "lines_orphan_tool_result", t.id)
                continue
            line = chat_line(seg)
            if not any(m.get("weight") for m in line["messages"]):
                counts["lines_without_trainable_turns"] += 1
            f.write(orjson.dumps(line) + b"\n")
            counts["lines"] += 1
            counts["steps"] += len(seg.sampled)


def write_preference(trajs: Iterable[Trajectory], f: IO[bytes], counts: Counter[str]) -> None:
    """DPO lines from the pairs of each group, kept to what OpenAI's guide accepts.

    The guide trains on one-turn conversations with text-only outputs: a pair
    whose prompt already holds assistant or tool turns, whose outputs call
    tools, or whose two trajectories offered different tools is left out and
    counted (``-f trl --variant preference`` keeps them all).
    """
    for pair in preference_pairs(trajs, counts):
        tools = openai_tools(pair.chosen_tools)
        name = f"{pair.chosen_trajectory}/{pair.rejected_trajectory}"
        if any(m["role"] not in ("system", "developer", "user") for m in pair.prompt):
            left_out(counts, "pairs_multi_turn_input", name)
            continue
        if pair.chosen.get("tool_calls") or pair.rejected.get("tool_calls"):
            left_out(counts, "pairs_with_tool_calls", name)
            continue
        if tools != openai_tools(pair.rejected_tools):
            left_out(counts, "pairs_tools_differ", name)
            continue
        line: dict[str, Any] = {"input": {"messages": [to_openai_message(m) for m in pair.prompt]}}
        if tools:
            line["input"]["tools"] = tools
        line["preferred_output"] = [_text_output(pair.chosen)]
        line["non_preferred_output"] = [_text_output(pair.rejected)]
        f.write(orjson.dumps(line) + b"\n")
        counts["lines"] += 1


def _text_output(m: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": content_text(m.get("content"))}


# -- import -------------------------------------------------------------------------


class RowError(ValueError):
    """A row of an imported file is malformed; ``field`` says where inside the row."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        super().__init__(f"{field}: {problem}" if field else problem)


def from_openai_message(m: Any, where: str) -> dict[str, Any]:
    """A normalised message from OpenAI chat shape; RowError names the bad field."""
    if not isinstance(m, dict):
        raise RowError(where, "a message is a JSON object")
    role = m.get("role")
    if role not in ("system", "developer", "user", "assistant", "tool"):
        raise RowError(f"{where}.role", f"unknown role {role!r}")
    content = m.get("content")
    if content is not None and not isinstance(content, str | list):
        raise RowError(f"{where}.content", "expected a string, a list of parts or null")
    out: dict[str, Any] = {"role": role, "content": content}
    for key in ("name", "tool_call_id"):
        if m.get(key) is not None:
            if not isinstance(m[key], str):
                raise RowError(f"{where}.{key}", "expected a string")
            out[key] = m[key]
    calls = m.get("tool_calls")
    if calls:
        if not isinstance(calls, list):
            raise RowError(f"{where}.tool_calls", "expected a list")
        out["tool_calls"] = []
        for i, c in enumerate(calls):
            fn = c.get("function") if isinstance(c, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                raise RowError(f"{where}.tool_calls[{i}].function.name", "required string")
            args = fn.get("arguments", "{}")
            if not isinstance(args, str):
                args = json.dumps(args)
            call_id = str(c.get("id") or f"call_{i}")
            out["tool_calls"].append({"id": call_id, "name": fn["name"], "arguments": args})
    return out


def _conversation(line: dict[str, Any]) -> Iterator[tuple[dict[str, Any], int | None]]:
    msgs = line.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise RowError("messages", "required non-empty list")
    for i, m in enumerate(msgs):
        msg = from_openai_message(m, f"messages[{i}]")
        weight = m.get("weight") if msg["role"] == "assistant" else None
        if weight not in (None, 0, 1) or isinstance(weight, bool):
            raise RowError(f"messages[{i}].weight", "must be 0 or 1")
        yield msg, weight


def parse_chat(line: dict[str, Any]) -> tuple[list[dict[str, Any]], list[int | None], Any]:
    """(messages, weights per message, tools) of an SFT line."""
    msgs, weights = [], []
    for m, w in _conversation(line):
        msgs.append(m)
        weights.append(w)
    if not any(m["role"] == "assistant" for m in msgs):
        raise RowError("messages", "no assistant message to import as a step")
    tools = line.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise RowError("tools", "expected a list")
    return msgs, weights, tools


def parse_preference(line: dict[str, Any]) -> tuple[list[dict[str, Any]], Any, dict, dict]:
    """(prompt messages, tools, preferred, non-preferred) of a DPO line."""
    inp = line.get("input")
    if not isinstance(inp, dict):
        raise RowError("input", "required object")
    prompt = [m for m, _ in _conversation(inp)]
    outs = []
    for key in ("preferred_output", "non_preferred_output"):
        val = line.get(key)
        if not isinstance(val, list) or len(val) != 1:
            raise RowError(key, "expected a list with one assistant message")
        msg = from_openai_message(val[0], f"{key}[0]")
        if msg["role"] != "assistant":
            raise RowError(f"{key}[0].role", "must be assistant")
        outs.append(msg)
    return prompt, inp.get("tools"), outs[0], outs[1]
