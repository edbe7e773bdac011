"""A trajectory as a readable rich transcript for `aw pool show` (agent text is never markup)."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.text import Text

from agentworld.literal import clean
from agentworld.pool.reader import Trajectory

ROLE_STYLES = {
    "system": "magenta",
    "developer": "magenta",
    "user": "cyan",
    "assistant": "green",
    "tool": "yellow",
}


def _content(content: Any) -> str:
    """A message's content as text (control characters made visible: agents' tool output
    is full of terminal colour codes, and a few would clear the reader's screen)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return clean(content)
    parts = []
    for p in content:
        if isinstance(p, dict):
            parts.append(clean(p.get("text") or f"[{p.get('type', 'part')}]"))
    return "\n".join(parts)


def message_text(m: dict[str, Any]) -> Text:
    """One message as literal text: content, reasoning and tool calls."""
    out = Text()
    if m.get("reasoning"):
        out.append("(reasoning) ", style="dim italic")
        out.append(clean(m["reasoning"]), style="dim")
        out.append("\n")
    out.append(_content(m.get("content")))
    for call in m.get("tool_calls") or ():
        if out:
            out.append("\n")
        out.append("→ ", style="bold yellow")
        out.append(f"{clean(call.get('name'))}({clean(call.get('arguments', ''))})", style="yellow")
        out.append(f"  [{clean(call.get('id', ''))}]", style="dim")
    return out


def _message_panel(m: dict[str, Any], title_extra: str = "") -> Panel:
    role = m.get("role", "?")
    title = Text(clean(role), style=f"bold {ROLE_STYLES.get(role, 'white')}")
    if m.get("tool_call_id"):
        title.append(f" ← {clean(m['tool_call_id'])}", style="dim")
    if title_extra:
        title.append(f"  {title_extra}", style="dim")
    return Panel(
        message_text(m),
        title=title,
        title_align="left",
        border_style=ROLE_STYLES.get(role, "white"),
    )


def step_meta(step: dict[str, Any]) -> Text:
    """A one-line summary of a step's metadata."""
    resp = step.get("response") or {}
    usage = resp.get("usage") or {}
    t = step.get("timings") or {}
    tok = step.get("tokens") or {}
    dur = (t.get("ended_at") or 0) - (t.get("started_at") or 0)
    parts = [
        f"step {step['index']}" + (f".{step['choice']}" if step.get("choice") else ""),
        step["id"],
        step["protocol"],
        f"status {step['status']}",
        f"policy v{step['policy_version']}",
        f"finish {resp.get('finish_reason', '-')}",
        f"tokens {usage.get('prompt_tokens', '?')}+{usage.get('completion_tokens', '?')}",
        f"ids {tok.get('source')}",
        f"{dur * 1000:.0f} ms",
    ]
    if t.get("first_token_s") is not None:
        parts.append(f"ttft {t['first_token_s'] * 1000:.0f} ms")
    if step.get("reward") is not None:
        parts.append(f"reward {step['reward']:.3g}")
    if step.get("_labels"):
        parts.append(f"labels {step['_labels']}")
    invalid = (step.get("metadata") or {}).get("upstream_invalid")
    if isinstance(invalid, dict) and invalid:  # what the proxy could not keep of the answer
        parts.append("left out " + ", ".join(clean(k) for k in invalid))
    return Text(" · ".join(parts), style="dim")


def render_trajectory(traj: Trajectory) -> RenderableType:
    """Transcript: the first step's prompt, then each step's new messages and its response."""
    items: list[RenderableType] = []
    head = Text(f"trajectory {traj.id}", style="bold")
    first = traj.steps[0] if traj.steps else traj.end or {}
    for key in ("agent", "dataset", "task", "group"):
        if first.get(key) is not None:
            head.append(f"  {key} ")
            head.append(clean(first[key]), style="bold")
    head.append(f"  status {traj.status}")
    if traj.reward is not None:
        head.append(f"  reward {traj.reward:.3g}")
    if traj.labels:
        head.append(f"  labels {traj.labels}")
    items.append(head)
    seen = 0
    for step in traj.steps:
        msgs = (step.get("request") or {}).get("messages") or []
        # Each prompt repeats the conversation so far: show only what is new.
        new = msgs[seen:] if len(msgs) >= seen else msgs
        for m in new:
            items.append(_message_panel(m))
        if (step.get("request") or {}).get("prompt") is not None:
            prompt = Text(clean(step["request"]["prompt"]))
            items.append(Panel(prompt, title="prompt", title_align="left"))
        items.append(step_meta(step))
        resp = step.get("response") or {}
        if resp.get("message"):
            items.append(_message_panel(resp["message"]))
        elif resp.get("text") is not None:
            items.append(Panel(Text(clean(resp["text"])), title="completion", border_style="green"))
        if step.get("error"):
            err = step["error"]
            message = f"error {clean(err.get('type'))}: {clean(err.get('message'))}"
            items.append(Text(message, style="bold red"))
        seen = len(msgs) + (1 if resp.get("message") else 0)
    if traj.end:
        e = traj.end
        items.append(
            Text(
                f"end: {e['status']} after {e['steps']} step{'' if e['steps'] == 1 else 's'} at "
                f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(e['ended_at']))}"
                + (f", error {clean(e['error'].get('message'))}" if e.get("error") else ""),
                style="bold",
            )
        )
    return Group(*items)
