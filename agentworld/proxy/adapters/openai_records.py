"""OpenAI chat and completions bodies as step records: each choice's response, tokens and prompt.

vLLM's extensions carry the token ids (``token_ids`` on a choice, ``prompt_token_ids``
on the body or, for completions, on each choice); a record keeps them only when they
are whole (as many log-probs as ids, each a number).
"""

from __future__ import annotations

from operator import itemgetter
from typing import TYPE_CHECKING, Any

from agentworld.proxy.normal_form import normalise_message
from agentworld.raw_ids import RawIds

if TYPE_CHECKING:
    from agentworld.proxy.adapters.openai import Injected


def choice_usage(body: dict[str, Any], choice: dict[str, Any], n_choices: int, ids: Any) -> Any:
    usage = body.get("usage")
    if n_choices == 1:
        if usage is None and isinstance(ids, list):
            prompt = body.get("prompt_token_ids") or choice.get("prompt_token_ids")
            usage = {"completion_tokens": len(ids)}
            if isinstance(prompt, list | RawIds):
                usage["prompt_tokens"] = len(prompt)
        return usage
    # n > 1: the upstream's usage covers all choices; give each step its own share. A
    # completions batch's choices answer different prompts: vLLM puts each one's ids on it.
    out: dict[str, Any] = {}
    prompt = choice.get("prompt_token_ids")
    if isinstance(prompt, list | RawIds):
        out["prompt_tokens"] = len(prompt)
    elif isinstance(usage, dict) and isinstance(usage.get("prompt_tokens"), int):
        out["prompt_tokens"] = usage["prompt_tokens"]
    if isinstance(ids, list):
        out["completion_tokens"] = len(ids)
    return out or None


def choice_response(
    body: dict[str, Any], c: dict[str, Any], n: int, ids: Any, response: dict[str, Any]
) -> dict[str, Any]:
    """A step's ``response`` for choice ``c`` of ``n``: ``response`` (its message or text)
    with the finish reason, the body's id and the choice's share of the usage."""
    if isinstance(c.get("finish_reason"), str):
        response["finish_reason"] = c["finish_reason"]
    if isinstance(body.get("id"), str):
        response["id"] = body["id"]
    usage = choice_usage(body, c, n, ids)
    if isinstance(usage, dict):
        response["usage"] = usage
    return response


def choice_list(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A response body's choices (objects only; none when ``choices`` is not a list)."""
    choices = body.get("choices")
    if choices.__class__ is not list:
        return []
    return [c for c in choices if c.__class__ is dict]


def choice_index(c: dict[str, Any], position: int) -> int:
    """A choice's ``index``; its position among the choices when the upstream's is not one."""
    i = c.get("index", position)
    return i if i.__class__ is int and i >= 0 else position


def record_tokens(prompt_ids: Any, ids: Any, logprobs: list[Any] | None) -> dict[str, Any]:
    if not isinstance(ids, list):
        return {"source": "none"}
    tokens: dict[str, Any] = {"source": "engine", "completion_ids": ids}
    if isinstance(prompt_ids, list | RawIds):  # RawIds: kept as the upstream's bytes
        tokens["prompt_ids"] = prompt_ids
    # Exact types: parsed JSON holds no subclasses, and bool (an int) must not pass. One
    # C-speed pass (a Python loop here cost as much as the rest of a short answer's record).
    if (
        logprobs is not None
        and len(logprobs) == len(ids)
        and _NUMBER_TYPES.issuperset(map(type, logprobs))
    ):
        tokens["completion_logprobs"] = logprobs
    return tokens


_NUMBER_TYPES = frozenset({int, float})
_LOGPROB = itemgetter("logprob")


class LogprobValues(list):  # type: ignore[type-arg]
    """A chat ``logprobs.content`` already read down to each entry's ``logprob``, None for
    an entry without one (as ``logprob_values`` reads it): the typed reading of a unary
    answer (``openai_answer``), and a streamed choice's as the assembler keeps it
    (``sse._Choice.logprobs``, whichever reading took its events: none makes the entries)."""

    __slots__ = ()  # made once a call, or a streamed choice: no attribute dict


def logprob_values(content: list[Any]) -> list[Any]:
    """Each chat ``logprobs.content`` entry's ``logprob`` (None for an entry without one):
    one C-speed pass over the usual entries, a loop only when one is not an object."""
    if content.__class__ is LogprobValues:
        return list(content)
    try:
        return list(map(_LOGPROB, content))
    except (KeyError, TypeError):  # an entry without it, or not an object
        return [e.get("logprob") if e.__class__ is dict else None for e in content]


def choice_reply(c: dict[str, Any]) -> dict[str, Any]:
    """A response choice's message, normalised as the record's assistant message."""
    msg = c.get("message")
    message = normalise_message(
        {**msg, "role": "assistant"} if isinstance(msg, dict) else {"role": "assistant"}
    )
    message.setdefault("content", None)
    return message


def all_token_ids(v: list[Any]) -> bool:
    return all(isinstance(x, int) and not isinstance(x, bool) for x in v)


def prompt_list(prompt: Any) -> list[Any]:
    """A completions ``prompt`` (as ``check`` lets through) as the prompts it holds, each a
    string or a list of token ids: a list of strings or of token-id lists is a batch."""
    if isinstance(prompt, str) or isinstance(prompt[0], int):
        return [prompt]
    return prompt


def record_prompt(req: dict[str, Any], prompt: str | list[int]) -> None:
    """One prompt in a request record: its text, or "" and its ``params.prompt_token_ids``."""
    if isinstance(prompt, str):
        req["prompt"] = prompt
    else:
        req["prompt"] = ""
        req["params"]["prompt_token_ids"] = prompt


def injected_keys(injected: Injected, *, chat: bool) -> frozenset[str]:
    """Request keys the proxy added (not recorded as the agent's parameters)."""
    keys = set()
    if injected.token_ids:
        keys.add("return_token_ids")
    if injected.logprobs:
        keys.add("logprobs")
    return frozenset(keys)
