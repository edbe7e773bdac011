"""ATIF, Harbor's Agent Trajectory Interchange Format: trajectories out of and into the pool.

Written as ``ATIF-v1.5`` (root ``schema_version``, ``session_id``, ``agent``
with ``tool_definitions``, ``steps``, ``final_metrics``, ``extra``): system
and user messages become ``system``/``user`` steps, each sampled response an
``agent`` step with ``tool_calls``, its tool results as ``observation`` and
``metrics`` carrying token counts, engine ``prompt_token_ids`` /
``completion_token_ids`` and ``logprobs``. Versions v1.0 to v1.7 are read.
AgentWorld's own fields (reward, group, task, labels) go in ``extra``.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from agentworld.export.conversation import content_text, openai_tools, segments
from agentworld.export.openai import RowError
from agentworld.export.select import step_reward, step_trainable
from agentworld.pool import Trajectory

SCHEMA_VERSION = "ATIF-v1.5"
READ_VERSIONS = tuple(f"ATIF-v1.{n}" for n in range(8))
RESET_KEY = "agentworld_context_reset"  # step.extra: the agent rewrote its history here
ORPHAN_KEY = "agentworld_orphan_call_ids"  # step.extra: result index -> id of a call not made


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _arguments(raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError:
        return {"_raw": raw}
    return value if isinstance(value, dict) else {"_raw": raw}


def _metrics(step: dict[str, Any]) -> dict[str, Any]:
    usage = (step.get("response") or {}).get("usage") or {}
    tok = step.get("tokens") or {}
    out: dict[str, Any] = {}
    for key in ("prompt_tokens", "completion_tokens"):
        if isinstance(usage.get(key), int):
            out[key] = usage[key]
    if tok.get("source") == "engine":
        if tok.get("prompt_ids") is not None:
            out["prompt_token_ids"] = tok["prompt_ids"]
        out["completion_token_ids"] = tok["completion_ids"]
        if tok.get("completion_logprobs") is not None:
            out["logprobs"] = tok["completion_logprobs"]
    return out


def _observe(step: dict[str, Any], call_id: str | None, text: str) -> None:
    """Add a tool result to ``step``'s observation, pointing at the call it answers.

    Harbor's ``Trajectory.validate_tool_call_references`` refuses a non-null
    ``source_call_id`` that is not one of the same step's ``tool_calls``. A
    result that answers no call there (an agent that seeded a result into its
    history) gets a null ``source_call_id``; its own id is kept in the step's
    ``extra`` under ORPHAN_KEY so an import gives the message back as it was.
    """
    calls = {c["tool_call_id"] for c in step.get("tool_calls") or ()}
    results = step.setdefault("observation", {"results": []})["results"]
    if call_id is None or call_id in calls:
        results.append({"source_call_id": call_id, "content": text})
        return
    step.setdefault("extra", {}).setdefault(ORPHAN_KEY, {})[str(len(results))] = call_id
    results.append({"source_call_id": None, "content": text})


def to_atif(t: Trajectory, counts: Counter[str]) -> dict[str, Any] | None:
    """One trajectory as an ATIF object (None when it has no chat steps)."""
    segs = segments(t.steps)
    if not segs:
        return None
    steps: list[dict[str, Any]] = []
    last_agent: dict[str, Any] | None = None
    model = None
    for k, seg in enumerate(segs):
        start = len(steps)
        for i, m in enumerate(seg.messages):
            role, text = m["role"], content_text(m.get("content"))
            if role == "tool":
                if last_agent is None:
                    last_agent = {"source": "system", "message": ""}
                    steps.append(last_agent)
                _observe(last_agent, m.get("tool_call_id"), text)
                continue
            if role != "assistant":
                steps.append({"source": "system" if role != "user" else "user", "message": text})
                last_agent = None
                continue
            st: dict[str, Any] = {"source": "agent", "message": text}
            sampled = seg.sampled.get(i)
            if sampled is not None:
                model = sampled["request"].get("model") or model
                if sampled["request"].get("model"):
                    st["model_name"] = sampled["request"]["model"]
                st["timestamp"] = _iso(sampled["timings"].get("started_at"))
            if m.get("reasoning"):
                st["reasoning_content"] = m["reasoning"]
            if m.get("tool_calls"):
                st["tool_calls"] = [
                    {
                        "tool_call_id": c.get("id") or f"call_{j}",
                        "function_name": c["name"],
                        "arguments": _arguments(c["arguments"]),
                    }
                    for j, c in enumerate(m["tool_calls"])
                ]
            extra: dict[str, Any] = {}
            if sampled is not None:
                if metrics := _metrics(sampled):
                    st["metrics"] = metrics
                extra = {"step": sampled["id"], "policy_version": sampled["policy_version"]}
                if step_reward(sampled) is not None:
                    extra["reward"] = step_reward(sampled)
                if not step_trainable(sampled):
                    extra["trainable"] = False
            else:
                extra = {"sampled": False}  # an assistant turn the policy did not produce here
            st["extra"] = extra
            steps.append(st)
            last_agent = st
        if k and len(steps) > start:
            steps[start].setdefault("extra", {})[RESET_KEY] = True
    for n, st in enumerate(steps, 1):
        st["step_id"] = n
        if st.get("timestamp") is None:
            st.pop("timestamp", None)
    pv = [s["policy_version"] for s in t.steps]
    agent: dict[str, Any] = {"name": t.first("agent") or "unknown", "version": f"policy-{max(pv)}"}
    if model:
        agent["model_name"] = model
    tools = openai_tools(segs[-1].tools)
    if tools:
        agent["tool_definitions"] = tools
    metrics = [st.get("metrics") or {} for st in steps]
    counts["steps"] += sum(len(s.sampled) for s in segs)
    return {
        "schema_version": SCHEMA_VERSION,
        "session_id": t.id,
        "agent": agent,
        "steps": [{"step_id": st.pop("step_id"), **st} for st in steps],
        "final_metrics": {
            "total_prompt_tokens": sum(m.get("prompt_tokens", 0) for m in metrics),
            "total_completion_tokens": sum(m.get("completion_tokens", 0) for m in metrics),
            "total_steps": len(steps),
        },
        "extra": {
            "reward": t.reward,
            "status": t.status,
            "group": t.first("group"),
            "dataset": t.first("dataset"),
            "split": t.first("split"),
            "task": t.first("task"),
            "labels": t.labels,
        },
    }


# -- import -------------------------------------------------------------------------


def _str(v: Any, where: str, *, optional: bool = False) -> str | None:
    if v is None and optional:
        return None
    if isinstance(v, list):  # v1.6+ content parts
        return content_text(v)
    if not isinstance(v, str):
        raise RowError(where, "expected a string")
    return v


def parse_atif(obj: Any) -> dict[str, Any]:
    """Check an ATIF object and return its calls as (prompt messages, response, metrics, extra).

    The result: ``{"session_id", "agent", "model", "tools", "calls": [...], "extra"}``
    where each call has ``messages`` (the conversation before it), ``message``
    (the assistant response), ``metrics``, ``timestamp`` and ``extra``.
    """
    if not isinstance(obj, dict):
        raise RowError("", "an ATIF trajectory is a JSON object")
    version = obj.get("schema_version")
    if version not in READ_VERSIONS:
        raise RowError("schema_version", f"{version!r} is not one of {READ_VERSIONS[0]}..v1.7")
    session = _str(obj.get("session_id"), "session_id")
    agent = obj.get("agent")
    if not isinstance(agent, dict) or not isinstance(agent.get("name"), str):
        raise RowError("agent.name", "required string")
    steps = obj.get("steps")
    if not isinstance(steps, list) or not steps:
        raise RowError("steps", "required non-empty list")
    conversation: list[dict[str, Any]] = []
    calls = []
    for i, st in enumerate(steps):
        where = f"steps[{i}]"
        if not isinstance(st, dict):
            raise RowError(where, "a step is a JSON object")
        source = st.get("source")
        if source not in ("system", "user", "agent"):
            raise RowError(f"{where}.source", f"must be system, user or agent, got {source!r}")
        text = _str(st.get("message", ""), f"{where}.message") or ""
        if (st.get("extra") or {}).get(RESET_KEY):
            conversation = []
        if source == "agent":
            msg: dict[str, Any] = {"role": "assistant", "content": text}
            if st.get("reasoning_content") is not None:
                msg["reasoning"] = _str(st["reasoning_content"], f"{where}.reasoning_content")
            tool_calls = st.get("tool_calls") or []
            if not isinstance(tool_calls, list):
                raise RowError(f"{where}.tool_calls", "expected a list")
            if tool_calls:
                msg["tool_calls"] = []
            for j, c in enumerate(tool_calls):
                cw = f"{where}.tool_calls[{j}]"
                if not isinstance(c, dict):
                    raise RowError(cw, "a tool call is a JSON object")
                args = c.get("arguments", {})
                if not isinstance(args, dict):
                    raise RowError(f"{cw}.arguments", "expected a JSON object")
                raw = args["_raw"] if set(args) == {"_raw"} else json.dumps(args)
                msg["tool_calls"].append(
                    {
                        "id": _str(c.get("tool_call_id"), f"{cw}.tool_call_id"),
                        "name": _str(c.get("function_name"), f"{cw}.function_name"),
                        "arguments": raw,
                    }
                )
            metrics = st.get("metrics") or {}
            if not isinstance(metrics, dict):
                raise RowError(f"{where}.metrics", "expected an object")
            extra = st.get("extra") or {}
            if extra.get("sampled") is not False:
                calls.append(
                    {
                        "messages": list(conversation),
                        "message": msg,
                        "metrics": metrics,
                        "model": st.get("model_name") or agent.get("model_name"),
                        "timestamp": st.get("timestamp"),
                        "extra": extra,
                        "where": where,
                    }
                )
            conversation.append(msg)
        elif text or source != "system" or not st.get("observation"):
            conversation.append({"role": source, "content": text})
        obs = st.get("observation")
        orphans = (st.get("extra") or {}).get(ORPHAN_KEY) or {}
        if obs is not None:
            results = obs.get("results") if isinstance(obs, dict) else None
            if not isinstance(results, list):
                raise RowError(f"{where}.observation.results", "required list")
            for j, r in enumerate(results):
                if not isinstance(r, dict):
                    raise RowError(f"{where}.observation.results[{j}]", "expected an object")
                text = _str(r.get("content") or "", f"{where}.observation.results[{j}].content")
                tool_msg = {"role": "tool", "content": text}
                call_id = r.get("source_call_id")
                if call_id is None and isinstance(orphans, dict):
                    call_id = orphans.get(str(j))
                if call_id is not None:
                    tool_msg["tool_call_id"] = str(call_id)
                conversation.append(tool_msg)
    if not calls:
        raise RowError("steps", "no agent step to import")
    return {
        "session_id": session,
        "agent": agent["name"],
        "tools": agent.get("tool_definitions"),
        "calls": calls,
        "extra": obj.get("extra") if isinstance(obj.get("extra"), dict) else {},
    }
