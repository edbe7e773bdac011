"""The token view: what the model saw and sampled, coloured by log-prob, breaks marked."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from rich.text import Text

from agentworld.errors import MissingExtraError
from agentworld.literal import clean

Decoder = Callable[[int], str]
MAX_PROMPT_TOKENS_SHOWN = 2000


def load_decoder(tokenizer_path: str) -> Decoder:
    """A token-id → text function from a Hugging Face tokenizer (imported only here)."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise MissingExtraError("transformers", "train") from None
    tok = AutoTokenizer.from_pretrained(tokenizer_path)
    cache: dict[int, str] = {}

    def decode(token_id: int) -> str:
        s = cache.get(token_id)
        if s is None:
            s = cache[token_id] = tok.decode([token_id])
        return s

    return decode


def prefix_break(prev: dict[str, Any] | None, step: dict[str, Any]) -> int | None:
    """Where this step's prompt stops continuing the previous step's prompt + completion.

    None when there is no previous step with tokens or the prompt continues it exactly.
    """
    if prev is None:
        return None
    pt, st = prev.get("tokens") or {}, step.get("tokens") or {}
    before = list(pt.get("prompt_ids") or []) + list(pt.get("completion_ids") or [])
    prompt = st.get("prompt_ids") or []
    if not before or not prompt:
        return None
    n = min(len(before), len(prompt))
    for i in range(n):
        if before[i] != prompt[i]:
            return i
    return None if len(prompt) >= len(before) else len(prompt)


def logprob_style(lp: float | None) -> str:
    """Green for likely tokens through yellow to red for unlikely ones."""
    if lp is None:
        return "reverse"
    p = math.exp(lp) if lp > -50 else 0.0
    if p >= 0.9:
        return "black on green"
    if p >= 0.5:
        return "black on yellow"
    if p >= 0.1:
        return "black on dark_orange"
    return "white on red"


def _token(token_id: int, decode: Decoder | None) -> str:
    if decode is None:
        return str(token_id)
    return clean(decode(token_id)).replace("\n", "\\n") or "∅"


def token_view(
    step: dict[str, Any],
    prev: dict[str, Any] | None = None,
    *,
    decode: Decoder | None = None,
    max_prompt_tokens: int = MAX_PROMPT_TOKENS_SHOWN,
) -> Text:
    """The step's prompt and completion tokens as one Text, with a legend and break marker."""
    tokens = step.get("tokens") or {}
    source = tokens.get("source", "none")
    prompt: Sequence[int] = tokens.get("prompt_ids") or []
    completion: Sequence[int] = tokens.get("completion_ids") or []
    lps: Sequence[float] | None = tokens.get("completion_logprobs")
    out = Text()
    out.append(f"source: {source}", style="bold green" if source == "engine" else "bold yellow")
    if source == "rendered":
        out.append(
            "  (rendered by a tokenizer after the fact, not what the engine sampled)",
            style="yellow",
        )
    out.append(f"   prompt {len(prompt)} · completion {len(completion)}")
    out.append("   ids" if decode is None else "   decoded")
    out.append("\n")
    if source == "none" or (not prompt and not completion):
        out.append("no token ids recorded for this step\n", style="dim")
        return out
    brk = prefix_break(prev, step)
    if prev is not None and (prev.get("tokens") or {}).get("prompt_ids"):
        if brk is None:
            out.append("prefix: continues the previous step exactly\n", style="green")
        else:
            out.append(
                f"prefix: BREAK at prompt token {brk} (differs from previous step)\n",
                style="bold white on red",
            )
    out.append("legend: ", style="dim")
    for lp, name in ((-0.01, "p≥.9"), (-0.3, "p≥.5"), (-1.5, "p≥.1"), (-5.0, "p<.1")):
        out.append(f" {name} ", style=logprob_style(lp))
        out.append(" ")
    out.append("\n── prompt\n", style="bold cyan")
    start = 0
    if len(prompt) > max_prompt_tokens:
        start = len(prompt) - max_prompt_tokens
        if brk is not None and brk < start:
            start = max(0, brk - 20)
        out.append(f"… {start} earlier tokens\n", style="dim")
    for i in range(start, len(prompt)):
        if i == brk:
            out.append("⟂BREAK⟂", style="bold white on red")
            out.append(" ")
        out.append(_token(prompt[i], decode), style="dim" if brk is None or i < brk else "bold red")
        out.append(" ")
    out.append("\n── completion (sampled)\n", style="bold green")
    for i, tid in enumerate(completion):
        lp = lps[i] if lps is not None and i < len(lps) else None
        out.append(_token(tid, decode), style=logprob_style(lp))
        out.append(" ")
    out.append("\n")
    return out
