"""Request fields vLLM applies and the embedded engine does not: named in the server's log.

vLLM samples under penalties, biases, guided decoding and forced tool calls; the
embedded engine samples under temperature, top-k, top-p, stop and seed only. A request
setting one of the others is still answered (agents send them as a matter of course),
and the server's log says, once per field, which were not applied, so an operator can
tell why an answer is not the JSON, the tool call or the distribution that was asked for.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from aiohttp import web

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
    """Say on stderr, the first time each comes, which of ``body``'s fields are not applied."""
    warned: set[str] = app[WARNED_KEY]
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
