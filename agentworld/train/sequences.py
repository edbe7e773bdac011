"""Steps -> training sequences: token ids, which tokens the policy sampled, and their rollout log-probs.

Engine token ids are used as recorded. Steps without them are rendered with
the model's chat template: the prompt with the generation prompt, then the
conversation including the reply; the reply's tokens are the difference
(prefix by prefix), cut after the end-of-turn token, since what follows it is
template, not sampled. Consecutive steps of a trajectory merge into one row
when the next prompt continues the row exactly; otherwise a new row starts
and the break is counted.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any

NAN = math.nan

# Sampling parameters and the value at which each does nothing. The trainer applies
# temperature (log-probs of logits / T, as TRL and verl do); any of these set otherwise
# changed the distribution that sampled in a way the trainer does not reproduce.
UNAPPLIED_NEUTRAL: dict[str, tuple[float, ...]] = {
    "top_p": (1.0,),
    "top_k": (0, -1),
    "min_p": (0.0,),
    "presence_penalty": (0.0,),
    "frequency_penalty": (0.0,),
    "repetition_penalty": (1.0,),
}
# Settings that constrain which tokens may be sampled (structured outputs, biases,
# banned or allowed tokens, a minimum length before the end token): each reshapes the
# distribution per token, which the trainer's log-probs of logits / T do not.
CONSTRAINTS = (
    "logit_bias",
    "response_format",
    "structured_outputs",
    "guided_json",
    "guided_regex",
    "guided_choice",
    "guided_grammar",
    "bad_words",
    "allowed_token_ids",
    "min_tokens",
    "tool_choice",
)
# Below this a temperature means greedy decoding: engines (vLLM's _SAMPLING_EPS, `aw serve`)
# then report log-probs at temperature 1.
GREEDY_EPS = 1e-5


def sampling_of(step: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """The temperature a step sampled at, and the parameters it set that the trainer does not apply.

    Absent parameters are the OpenAI/Anthropic defaults (temperature 1, no filtering). A
    translated call (Anthropic Messages, Responses) also records the chat body its engine
    got (``params.chat``): a constraint the translation made (``text.format`` became
    ``response_format``) is named from there.
    """
    params = (step.get("request") or {}).get("params") or {}
    t = params.get("temperature")
    temperature = float(t) if isinstance(t, int | float) and not isinstance(t, bool) else 1.0
    if temperature < GREEDY_EPS:
        temperature = 1.0
    unapplied = {}
    for key, neutral in UNAPPLIED_NEUTRAL.items():
        v = params.get(key)
        if isinstance(v, int | float) and not isinstance(v, bool) and v not in neutral:
            unapplied[key] = v
    chat = params.get("chat")
    for key in CONSTRAINTS:
        said = _constraint(key, params.get(key))
        if said is None and chat.__class__ is dict:
            said = _constraint(key, chat.get(key))
        if said is not None:
            unapplied[key] = said
    return temperature, unapplied


def _constraint(key: str, v: Any) -> Any:
    """What a constraining setting did, short enough for a log line; None when it did nothing
    (absent, null, empty, ``min_tokens`` 0, a ``response_format`` of plain text)."""
    if v is None or v is False or v == 0 or v == "" or v == [] or v == {}:
        return None
    if key == "response_format":
        kind = v.get("type") if isinstance(v, dict) else v
        return None if kind == "text" else kind
    if key == "tool_choice":
        return _forced_tool(v)
    if key == "logit_bias" and isinstance(v, dict):
        return f"{len(v)} tokens"
    if isinstance(v, dict):  # structured_outputs={"json": ...}: which kind
        return ",".join(sorted(map(str, v)))[:40]
    if isinstance(v, list):
        return f"{len(v)} entries"
    return v if not isinstance(v, str) or len(v) <= 40 else v[:37] + "..."


def _forced_tool(choice: Any) -> str | None:
    """A ``tool_choice`` that forces a call ("required", Anthropic's "any", a named function
    or tool), which vLLM decodes under a JSON grammar; None for auto and none.

    OpenAI chat: ``"required"``, ``{"type": "function", "function": {"name": N}}``;
    Anthropic: ``{"type": "any"}``, ``{"type": "tool", "name": N}``; Responses:
    ``{"type": "function", "name": N}``, ``{"type": "allowed_tools", "mode": "required"}``.
    """
    if choice.__class__ is str:
        return "required" if choice in ("required", "any") else None
    if choice.__class__ is not dict:
        return None
    kind = choice.get("type")
    if kind in (None, "auto", "none") or (
        kind == "allowed_tools" and choice.get("mode") != "required"
    ):
        return None
    fn = choice.get("function")
    name = fn.get("name") if fn.__class__ is dict else choice.get("name")
    if kind in ("any", "allowed_tools"):
        return "required"
    return f"{name}" if isinstance(name, str) else str(kind)


@dataclass
class StepTokens:
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float] | None  # rollout log-probs of completion_ids, when recorded
    source: str  # "engine" | "rendered"


@dataclass
class Row:
    """One training sequence: ids, sampled-token mask and rollout log-probs, aligned per token."""

    ids: list[int]
    sampled: list[int]  # 1 where the policy sampled this token and it is trainable
    logprobs: list[float]  # rollout log-prob of this token; NaN where none
    trajectory: str
    group: str
    steps: int = 1
    rendered: bool = False
    advantage: float = 0.0
    reward: float | None = None
    policy_version: int | None = None  # the newest policy version that sampled its trajectory
    temperature: list[float] = field(default_factory=list)  # per token; 1.0 where not sampled
    unapplied: dict[str, Any] = field(default_factory=dict)  # sampled with, not reproduced

    def __len__(self) -> int:
        return len(self.ids)


@dataclass
class SequenceStats:
    steps: int = 0
    merged: int = 0  # steps appended to the row before them
    breaks: int = 0  # steps whose prompt did not continue the row before them
    rendered: int = 0  # steps tokenized with the chat template (no engine ids)
    render_mismatch: int = 0  # rendered reply was not a clean suffix of the rendered prompt
    skipped: int = 0  # error/cancelled steps, steps with no reply
    untrainable: int = 0  # steps labelled trainable = false (kept as context only)
    too_long: int = 0  # single steps over max_seq_len, dropped
    no_logprobs: int = 0  # steps without rollout log-probs: on-policy fallback in ratios

    def add(self, other: SequenceStats) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(
            p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    return content or ""


def template_messages(messages: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Normalised record messages -> the OpenAI-shaped dicts chat templates expect."""
    out = []
    for m in messages:
        d: dict[str, Any] = {"role": m["role"], "content": _text(m.get("content"))}
        if m.get("tool_calls"):
            calls = []
            for tc in m["tool_calls"]:
                args: Any = tc.get("arguments", "")
                try:
                    args = json.loads(args)  # templates index arguments as a mapping
                except ValueError:
                    pass
                fn = {"name": tc["name"], "arguments": args}
                calls.append({"id": tc.get("id", ""), "type": "function", "function": fn})
            d["tool_calls"] = calls
        for key in ("tool_call_id", "name"):
            if m.get(key):
                d[key] = m[key]
        out.append(d)
    return out


def _apply(tokenizer: Any, messages: list[dict[str, Any]], tools: Any, gen: bool) -> list[int]:
    out = tokenizer.apply_chat_template(
        messages,
        tools=tools or None,
        add_generation_prompt=gen,
        tokenize=True,
        return_dict=True,
    )
    return list(out["input_ids"])


def stop_ids_of(tokenizer: Any, generation_config: Any = None) -> frozenset[int]:
    """Token ids that end an assistant turn (eos, plus the model's generation eos list)."""
    ids = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    eos = getattr(generation_config, "eos_token_id", None)
    if isinstance(eos, int):
        ids.add(eos)
    elif eos:
        ids.update(int(x) for x in eos)
    return frozenset(ids)


def render_step(step: dict[str, Any], tokenizer: Any, stop_ids: frozenset[int]) -> StepTokens:
    """Tokenize a step without engine ids using the trainer's chat template."""
    req, resp = step["request"], step.get("response") or {}
    stopped = resp.get("finish_reason") != "length"
    eos = [int(tokenizer.eos_token_id)] if stopped and tokenizer.eos_token_id is not None else []
    if req.get("messages") is None:  # completions: a raw prompt string
        prompt = tokenizer(req.get("prompt") or "", add_special_tokens=False)["input_ids"]
        reply = tokenizer(resp.get("text") or "", add_special_tokens=False)["input_ids"]
        return StepTokens(list(prompt), list(reply) + eos, None, "rendered")
    messages = template_messages(req["messages"])
    tools = req.get("tools")
    prompt = _apply(tokenizer, messages, tools, True)
    reply_msg = dict(resp.get("message") or {"role": "assistant", "content": resp.get("text")})
    full = _apply(tokenizer, [*messages, *template_messages([reply_msg])], tools, False)
    if full[: len(prompt)] == prompt:
        reply = full[len(prompt) :]
        cut = next((i for i, t in enumerate(reply) if t in stop_ids), None)
        if cut is not None:
            reply = reply[: cut + 1] if stopped else reply[:cut]
        return StepTokens(prompt, reply, None, "rendered")
    text = _text(reply_msg.get("content"))
    reply = tokenizer(text, add_special_tokens=False)["input_ids"]
    return StepTokens(prompt, list(reply) + eos, None, "mismatch")


def step_tokens(
    step: dict[str, Any], tokenizer: Any, stop_ids: frozenset[int]
) -> StepTokens | None:
    """Engine ids when the record has them, else rendered; None for steps with no reply."""
    if step.get("status") != "ok" or step.get("response") is None:
        return None
    tokens = step.get("tokens") or {}
    if tokens.get("source") == "engine" and tokens.get("completion_ids") is not None:
        prompt = tokens.get("prompt_ids")
        if prompt is not None:
            return StepTokens(
                list(prompt),
                list(tokens["completion_ids"]),
                tokens.get("completion_logprobs"),
                "engine",
            )
    return render_step(step, tokenizer, stop_ids)


def trajectory_rows(
    steps: list[dict[str, Any]],
    tokenizer: Any,
    *,
    trajectory: str,
    group: str,
    stop_ids: frozenset[int],
    merge: bool = True,
    max_seq_len: int = 1 << 30,
) -> tuple[list[Row], SequenceStats]:
    """Rows of one trajectory (steps in order), and how they merged or broke."""
    stats = SequenceStats()
    rows: list[Row] = []
    row: Row | None = None
    for step in steps:
        tok = step_tokens(step, tokenizer, stop_ids)
        if tok is None:
            stats.skipped += 1
            continue
        stats.steps += 1
        stats.no_logprobs += tok.logprobs is None
        temperature, unapplied = sampling_of(step)
        if tok.source != "engine":
            stats.rendered += 1
            stats.render_mismatch += tok.source == "mismatch"
        trainable = (step.get("_labels") or {}).get("trainable") is not False
        stats.untrainable += not trainable
        lps = tok.logprobs if tok.logprobs is not None else [NAN] * len(tok.completion_ids)
        flag = 1 if trainable else 0
        n = len(row.ids) if row is not None else 0
        if (
            merge
            and row is not None
            and len(tok.prompt_ids) >= n
            and tok.prompt_ids[:n] == row.ids
            and len(tok.prompt_ids) + len(tok.completion_ids) <= max_seq_len
        ):
            delta = tok.prompt_ids[n:]
            row.ids += delta + tok.completion_ids
            row.sampled += [0] * len(delta) + [flag] * len(tok.completion_ids)
            row.logprobs += [NAN] * len(delta) + [float(x) for x in lps]
            row.temperature += [1.0] * len(delta) + [temperature] * len(tok.completion_ids)
            row.unapplied.update(unapplied)
            row.steps += 1
            row.rendered |= tok.source != "engine"
            stats.merged += 1
            continue
        if merge and row is not None:
            stats.breaks += 1
        if len(tok.prompt_ids) + len(tok.completion_ids) > max_seq_len:
            stats.too_long += 1
            row = None
            continue
        row = Row(
            ids=tok.prompt_ids + tok.completion_ids,
            sampled=[0] * len(tok.prompt_ids) + [flag] * len(tok.completion_ids),
            logprobs=[NAN] * len(tok.prompt_ids) + [float(x) for x in lps],
            trajectory=trajectory,
            group=group,
            rendered=tok.source != "engine",
            temperature=[1.0] * len(tok.prompt_ids) + [temperature] * len(tok.completion_ids),
            unapplied=dict(unapplied),
        )
        rows.append(row)
    return [r for r in rows if any(r.sampled)], stats
