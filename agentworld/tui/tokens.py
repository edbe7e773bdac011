"""The token view: what the model saw and sampled, coloured by log-prob, breaks marked."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.text import Text

from agentworld.errors import MissingExtraError
from agentworld.literal import clean

Decoder = Callable[[int], str]
MAX_PROMPT_TOKENS_SHOWN = 2000
MAX_COMPLETION_TOKENS_SHOWN = 2000
BREAK_CONTEXT = 20  # prompt tokens shown before a prefix break


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


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
EMBEDDED_MODEL = "smollm2-135m-instruct"  # the folder `aw serve` converts its default into


def find_tokenizer(step: dict[str, Any], models_dir: str | None) -> str | None:
    """A local tokenizer for a step's ids, without being told: the model folder the step
    names (a path, or a model `aw serve` keeps under ``models_dir``), else the embedded
    default `aw serve` serves as ``default``. Only folders already on disk: nothing is
    downloaded or converted."""
    model = (step.get("request") or {}).get("model")
    candidates: list[Path] = []
    if isinstance(model, str) and model:
        candidates.append(Path(model).expanduser())
        if models_dir and "/" not in model and model not in (".", ".."):
            candidates.append(Path(models_dir) / model.lower())
    if models_dir:
        candidates.append(Path(models_dir) / EMBEDDED_MODEL)
    for folder in candidates:
        try:
            if any((folder / name).is_file() for name in TOKENIZER_FILES):
                return str(folder)
        except OSError:  # a model name that is no valid path
            continue
    return None


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


def shown_windows(n: int, limit: int, anchor: int | None) -> list[tuple[int, int]]:
    """The ranges of ``n`` tokens to show, at most ``limit`` in all (a long session's prompt
    is hundreds of thousands: laid out whole, one step takes seconds on every key).

    All of them when they fit; else the last ``limit``, or, when ``anchor`` (a prefix
    break, the completion's start) comes before those, half from just before it and
    half at the end.
    """
    if n <= limit:
        return [(0, n)]
    if anchor is None or anchor >= n - limit:
        return [(n - limit, n)]
    start = max(0, anchor - min(BREAK_CONTEXT, limit // 4))
    return [(start, start + limit // 2), (n - limit // 2, n)]


def _append_windows(
    out: Text, windows: list[tuple[int, int]], append: Callable[[int, int], None]
) -> None:
    """Append each window (``append(start, end)``), after a line counting what is left out."""
    at = 0
    for start, end in windows:
        if start > at:
            gap = f"{start} earlier tokens" if at == 0 else f"{start - at} tokens not shown"
            out.append(("\n" if at else "") + f"… {gap}\n", style="dim")
        append(start, end)
        at = end


def _token(token_id: int, decode: Decoder | None) -> str:
    if decode is None:
        return str(token_id)
    return clean(decode(token_id)).replace("\n", "\\n") or "∅"


def _joined(token_ids: Sequence[int], decode: Decoder | None) -> str:
    """Tokens side by side, each followed by a space."""
    return "".join(_token(t, decode) + " " for t in token_ids)


def token_view(
    step: dict[str, Any],
    prev: dict[str, Any] | None = None,
    *,
    decode: Decoder | None = None,
    max_prompt_tokens: int = MAX_PROMPT_TOKENS_SHOWN,
    max_completion_tokens: int = MAX_COMPLETION_TOKENS_SHOWN,
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

    def prompt_tokens(start: int, end: int) -> None:
        # One span a run (before the break, after it): a span per token lays out ~4x slower.
        cut = end if brk is None else min(max(brk, start), end)
        if cut > start:
            out.append(_joined(prompt[start:cut], decode), style="dim")
        if cut == brk and cut < end:
            out.append("⟂BREAK⟂", style="bold white on red")
            out.append(" ")
        if end > cut:
            out.append(_joined(prompt[cut:end], decode), style="bold red")

    def completion_tokens(start: int, end: int) -> None:
        for i in range(start, end):  # a span each: the colours are the point
            lp = lps[i] if lps is not None and i < len(lps) else None
            out.append(_token(completion[i], decode), style=logprob_style(lp))
            out.append(" ")

    _append_windows(out, shown_windows(len(prompt), max_prompt_tokens, brk), prompt_tokens)
    out.append("\n── completion (sampled)\n", style="bold green")
    _append_windows(
        out, shown_windows(len(completion), max_completion_tokens, 0), completion_tokens
    )
    out.append("\n")
    return out
