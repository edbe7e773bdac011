"""A translated call that asks for more than the engine's context window holds.

Anthropic's and OpenAI's APIs take ``max_tokens`` / ``max_output_tokens`` as
an upper bound: an answer that reaches the end of the model's context window
stops there (Anthropic says so with ``stop_reason:
"model_context_window_exceeded"``). vLLM instead refuses a request whose
prompt plus ``max_tokens`` exceeds ``max_model_len`` with a 400, so Claude
Code, which asks for 32,000 or more output tokens on every call, fails on a
32k or 64k engine once its conversation grows past the difference. When
translating, the proxy asks again, once, with ``max_tokens`` cut to the room
vLLM's message says is left (``retry_within_window``); the step's metadata
names both figures (``max_tokens_clamped``).

A prompt that alone overflows the window is told to the agent in its own
API's words (``overflow_error``): Anthropic's ``prompt is too long: N tokens
> M maximum``, on which Claude Code compacts its conversation, and OpenAI's
``context_length_exceeded`` code, on which Codex does.
"""

from __future__ import annotations

import re
from typing import Any

# vLLM's messages (``vllm/entrypoints``' request validation), numbers as it writes them.
_TOO_LARGE = re.compile(
    r"is too large: (\d+)\. This model's maximum context length is (\d+) tokens "
    r"and your request has (\d+) input tokens"
)
_PROMPT_TOO_LONG = re.compile(
    r"maximum context length is (\d+) tokens\. However, your request has (\d+) input tokens"
)
CLAMPED = "max_tokens_clamped"  # the step's metadata: {"asked": N, "sent": M}


def retry_within_window(call: Any, request_record: dict[str, Any], message: str) -> bool:
    """When ``message`` is vLLM's refusal of ``max_tokens`` for the window, cut the call's
    ``max_tokens`` to the room left and say so (True: ask again); once a call."""
    m = _TOO_LARGE.search(message)
    if m is None or CLAMPED in call.metadata:
        return False
    asked, window, prompt = (int(g) for g in m.groups())
    room = window - prompt
    if room < 1 or call.sent.get("max_tokens") != asked:
        return False  # no room at all, or not the figure the proxy sent
    call.sent["max_tokens"] = room
    chat = request_record.get("params", {}).get("chat")
    if isinstance(chat, dict):
        chat["max_tokens"] = room  # the record shows what produced the answer
    call.metadata[CLAMPED] = {"asked": asked, "sent": room}
    return True


def clamped(call: Any) -> bool:
    return CLAMPED in call.metadata


def overflow(message: str) -> tuple[int, int] | None:
    """(prompt tokens, window) when ``message`` says the prompt alone does not fit."""
    m = _PROMPT_TOO_LONG.search(message)
    if m is None:
        return None
    window, prompt = int(m.group(1)), int(m.group(2))
    return prompt, window
