"""Request fields vLLM applies and the embedded engine does not, and fields neither knows:
named in the server's log.

vLLM samples under penalties, biases, guided decoding and forced tool calls; the
embedded engine samples under temperature, top-k, top-p, stop and seed only. A request
setting one of the others is still answered (agents send them as a matter of course),
and the server's log says, once per field, which were not applied, so an operator can
tell why an answer is not the JSON, the tool call or the distribution that was asked for.

A field no protocol defines (``temprature``) is ignored, as vLLM ignores it, and
named in the log likewise, with the field it likely meant: sampled at temperature 1,
the answer gave no other sign of the typo.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from aiohttp import web

from agentworld.errors import did_you_mean

WARNED_KEY = web.AppKey("ignored_fields_warned", set)

# Each field and the values at which it changes nothing (what vLLM does with them unset).
_NEUTRAL: dict[str, tuple[Any, ...]] = {
    "frequency_penalty": (None, 0, 0.0),
    "presence_penalty": (None, 0, 0.0),
    "repetition_penalty": (None, 1, 1.0),
    "min_p": (None, 0, 0.0),
    "min_tokens": (None, 0),
    "logit_bias": (None, {}),
    "allowed_token_ids": (None, []),
    "bad_words": (None, []),
    "structured_outputs": (None,),
    "guided_json": (None,),
    "guided_regex": (None,),
    "guided_choice": (None,),
    "include_stop_str_in_output": (None, False),
    "use_beam_search": (None, False),
}


# The request fields of OpenAI chat/completions and of vLLM's extensions to them: what the
# embedded engine applies, and what it leaves out (said above when it matters).
KNOWN_FIELDS = frozenset(
    {
        # OpenAI chat completions and (legacy) completions
        "messages", "model", "audio", "frequency_penalty", "function_call", "functions",
        "logit_bias", "logprobs", "max_completion_tokens", "max_tokens", "metadata",
        "modalities", "n", "parallel_tool_calls", "prediction", "presence_penalty",
        "prompt_cache_key", "prompt_cache_retention", "reasoning_effort", "response_format",
        "safety_identifier", "seed", "service_tier", "stop", "store", "stream",
        "stream_options", "temperature", "tool_choice", "tools", "top_logprobs", "top_p",
        "user", "verbosity", "web_search_options", "prompt", "best_of", "echo", "suffix",
        # vLLM's sampling and request extensions
        "top_k", "min_p", "repetition_penalty", "length_penalty", "stop_token_ids",
        "include_stop_str_in_output", "ignore_eos", "min_tokens", "skip_special_tokens",
        "spaces_between_special_tokens", "truncate_prompt_tokens", "prompt_logprobs",
        "allowed_token_ids", "bad_words", "add_generation_prompt", "continue_final_message",
        "add_special_tokens", "documents", "chat_template", "chat_template_kwargs",
        "mm_processor_kwargs", "structured_outputs", "guided_json", "guided_regex",
        "guided_choice", "guided_grammar", "guided_decoding_backend",
        "guided_whitespace_pattern", "priority", "request_id", "logits_processors",
        "return_tokens_as_token_ids", "return_token_ids", "cache_salt", "kv_transfer_params",
        "vllm_xargs", "use_beam_search", "prompt_embeds", "media_io_kwargs",
        "thinking_token_budget",
    }
)  # fmt: skip


def unknown_fields(body: dict[str, Any]) -> list[str]:
    """The fields of ``body`` no protocol the server speaks defines."""
    return [k for k in body if k not in KNOWN_FIELDS]


def ignored_fields(body: dict[str, Any]) -> list[str]:
    """The fields of ``body`` that ask for something the embedded engine does not do."""
    names = [k for k, neutral in _NEUTRAL.items() if k in body and body[k] not in neutral]
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") not in (None, "text"):
        names.append(f"response_format {fmt.get('type')}")
    choice = body.get("tool_choice")
    if body.get("tools") and (choice == "required" or isinstance(choice, dict)):
        # vLLM forces the call with guided decoding; here the model may answer in text.
        names.append("tool_choice " + ("required" if choice == "required" else "(a function)"))
    return names


def warn_ignored(app: web.Application, body: dict[str, Any], out: TextIO | None = None) -> None:
    """Say on stderr, the first time each comes, which of ``body``'s fields are not applied,
    and which are no field of the protocol (ignored, as vLLM ignores them)."""
    warned: set[str] = app[WARNED_KEY]
    unknown = [name for name in unknown_fields(body) if "?" + name not in warned]
    if unknown:
        warned.update("?" + name for name in unknown)
        said = ", ".join(f"{name!r}{did_you_mean(name, KNOWN_FIELDS)}" for name in unknown)
        print(
            f"aw serve: ignored request field(s) no protocol defines: {said} (said once per field)",
            file=out or sys.stderr,
            flush=True,
        )
    new = [name for name in ignored_fields(body) if name not in warned]
    if not new:
        return
    warned.update(new)
    print(
        f"aw serve: the embedded engine does not apply {', '.join(new)}: answered without "
        "(said once per field; --engine vllm applies them)",
        file=out or sys.stderr,
        flush=True,
    )
