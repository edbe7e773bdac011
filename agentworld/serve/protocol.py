"""OpenAI/vLLM wire shapes: request bodies validated into engine params, results into bodies."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from agentworld.serve.chat import render_prompt
from agentworld.serve.engine import PromptToken, SamplingParams, TokenEvent

MAX_TOP_LOGPROBS = 20  # vLLM's default --max-logprobs
# OpenAI's bound (the proxy's too); vLLM sets none. Choices past a batch wait their turn.
MAX_N = 128
# OpenAI's and vLLM's default for the legacy /v1/completions (chat fills the context).
COMPLETIONS_MAX_TOKENS = 16
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


# vLLM's ErrorResponse names the error by its HTTP status (``type``) and repeats the
# status as an integer ``code``; clients and the proxy read both as they would vLLM's.
_ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    500: "InternalServerError",
    501: "NotImplementedError",
    503: "ServiceUnavailableError",
}


def error_type(status: int) -> str:
    """vLLM's error ``type`` for an HTTP status (``BadRequestError`` for 400)."""
    if status in _ERROR_TYPES:
        return _ERROR_TYPES[status]
    return HTTPStatus(status).phrase.replace(" ", "").replace("-", "") + "Error"


class ApiError(Exception):
    """An HTTP error in vLLM's shape; `param` names the offending field."""

    def __init__(self, message: str, param: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.message, self.param, self.status = message, param, status

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": error_type(self.status),
                "param": self.param,
                "code": self.status,
            }
        }


def _get(body: dict[str, Any], name: str, kinds: type | tuple[type, ...], default: Any) -> Any:
    value = body.get(name)
    if value is None:
        return default
    # bool is an int in Python; a JSON `true` is never a valid count or temperature.
    if isinstance(value, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,)):
        raise ApiError(f"'{name}' must be a number, got a boolean", name)
    if not isinstance(value, kinds):
        wanted = kinds if isinstance(kinds, tuple) else (kinds,)
        if int in wanted and isinstance(value, float) and abs(value) >= 2**63:
            # The JSON parser reads an integer past 64 bits as a float: say what is wrong.
            raise ApiError(f"'{name}' must be an integer within 64 bits, got {value:.0f}", name)
        want = kinds.__name__ if isinstance(kinds, type) else "/".join(k.__name__ for k in kinds)
        raise ApiError(f"'{name}' must be {want}, got {type(value).__name__}", name)
    return value


@dataclass
class GenerationRequest:
    """What both endpoints share once validated."""

    params: SamplingParams
    n: int
    stream: bool
    include_usage: bool
    continuous_usage: bool  # vLLM's stream_options.continuous_usage_stats: usage on every chunk
    return_token_ids: bool
    logprobs: bool
    tokens_as_ids: bool
    echo: bool = False  # completions: the prompt is prepended to each choice's text
    # ``max_tokens: 0`` with echo: the answer is the prompt alone. One token is still
    # generated (and counted in usage, its id in ``token_ids``), as vLLM does.
    echo_only: bool = False


# Like vLLM's `--served-model-name NAME default`: configs (agents.toml) can say
# `model = "default"` without knowing which model a server was started with.
DEFAULT_ALIAS = "default"


def parse_common(body: dict[str, Any], model_name: str, *, chat: bool) -> GenerationRequest:
    """Validate the sampling fields shared by /v1/chat/completions and /v1/completions."""
    check_model(body, model_name)
    n = _get(body, "n", int, 1)
    if not 1 <= n <= MAX_N:
        raise ApiError(f"'n' must be between 1 and {MAX_N}", "n")
    max_tokens = _get(body, "max_completion_tokens", int, None) if chat else None
    field = "max_completion_tokens" if max_tokens is not None else "max_tokens"
    if max_tokens is None:
        max_tokens = _get(body, "max_tokens", int, None if chat else COMPLETIONS_MAX_TOKENS)
    echo = not chat and _get(body, "echo", bool, False)
    echo_only = echo and max_tokens == 0
    if echo_only:
        max_tokens = 1  # vLLM's too: scored at prefill, then one token it drops
    if max_tokens is not None and max_tokens < 1:
        but = " (0 only with 'echo')" if not chat else ""
        raise ApiError(f"'{field}' must be at least 1{but}", field)
    temperature = float(_get(body, "temperature", (int, float), 1.0))
    if temperature < 0:
        raise ApiError("'temperature' must be non-negative", "temperature")
    top_p = float(_get(body, "top_p", (int, float), 1.0))
    if not 0 < top_p <= 1:
        raise ApiError("'top_p' must be in (0, 1]", "top_p")
    top_k = _get(body, "top_k", int, 0)
    seed = _get(body, "seed", int, None)
    # vLLM's bounds. Past them torch's generator refuses the seed on the engine thread,
    # which failed every request decoding in the same batch, other clients' too.
    if seed is not None and not INT64_MIN <= seed <= INT64_MAX:
        raise ApiError(f"'seed' must be between {INT64_MIN} and {INT64_MAX}", "seed")
    stop = body.get("stop")
    if stop is None:
        stop = []
    elif isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
        raise ApiError("'stop' must be a non-empty string or a list of them", "stop")
    stop_token_ids = _get(body, "stop_token_ids", list, [])
    if not all(isinstance(t, int) for t in stop_token_ids):
        raise ApiError("'stop_token_ids' must be a list of integers", "stop_token_ids")

    if chat:
        logprobs = _get(body, "logprobs", bool, False)
        top = _get(body, "top_logprobs", int, 0)
        if top and not logprobs:
            raise ApiError("'top_logprobs' requires 'logprobs' to be true", "top_logprobs")
        top_field = "top_logprobs"
    else:
        # /v1/completions: `logprobs` is the number of top alternatives (legacy API).
        top = _get(body, "logprobs", int, None)
        logprobs = top is not None
        top = top or 0
        top_field = "logprobs"
    if not 0 <= top <= MAX_TOP_LOGPROBS:
        raise ApiError(f"'{top_field}' must be between 0 and {MAX_TOP_LOGPROBS}", top_field)

    stream = _get(body, "stream", bool, False)
    prompt_top = None if chat else _parse_prompt_logprobs(body, stream)
    if prompt_top is None and echo and logprobs:
        # vLLM scores an echoed prompt at the request's ``logprobs``.
        prompt_top = top
    options = _get(body, "stream_options", dict, None)
    if options is not None and not stream:
        raise ApiError("Stream options can only be defined when `stream=True`.", "stream_options")
    include_usage = bool((options or {}).get("include_usage", False))
    continuous = include_usage and bool((options or {}).get("continuous_usage_stats", False))
    params = SamplingParams(
        max_tokens=max_tokens or 0,  # 0: fill in the rest of the context (set per prompt)
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        seed=seed,
        stop=tuple(stop),
        stop_token_ids=tuple(stop_token_ids),
        ignore_eos=_get(body, "ignore_eos", bool, False),
        top_logprobs=top,
        prompt_logprobs=prompt_top,
    )
    return GenerationRequest(
        params=params,
        n=n,
        stream=stream,
        include_usage=include_usage,
        continuous_usage=continuous,
        return_token_ids=_get(body, "return_token_ids", bool, False),
        logprobs=logprobs,
        tokens_as_ids=_get(body, "return_tokens_as_token_ids", bool, False),
        echo=echo,
        echo_only=echo_only,
    )


def _parse_prompt_logprobs(body: dict[str, Any], stream: bool) -> int | None:
    """vLLM's ``prompt_logprobs`` of a completion, with its checks and words."""
    k = _get(body, "prompt_logprobs", int, None)
    if k is None:
        return None
    if stream and (k > 0 or k == -1):
        raise ApiError("`prompt_logprobs` are not available when `stream=True`.", "prompt_logprobs")
    if k < 0 and k != -1:
        raise ApiError("`prompt_logprobs` must be a positive value or -1.", "prompt_logprobs")
    if k == -1 or k > MAX_TOP_LOGPROBS:
        # -1 is the whole vocabulary, which vLLM's default --max-logprobs refuses too.
        shown = "the whole vocabulary (-1)" if k == -1 else str(k)
        raise ApiError(
            f"Requested prompt logprobs of {shown}, which is greater than max allowed: "
            f"{MAX_TOP_LOGPROBS}",
            "prompt_logprobs",
        )
    return k


def parse_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError("'messages' must be a non-empty list", "messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ApiError(f"'messages[{i}]' must be an object with a string 'role'", "messages")
        if m["role"] not in ("system", "user", "assistant", "tool", "developer"):
            raise ApiError(f"'messages[{i}].role' {m['role']!r} is not a known role", "messages")
    return messages


def parse_tools(body: dict[str, Any]) -> tuple[list[dict[str, Any]] | None, bool]:
    """Tools for the template, and whether to parse tool calls out of the output."""
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise ApiError("'tools' must be a list", "tools")
        for i, t in enumerate(tools):
            fn = t.get("function") if isinstance(t, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                raise ApiError(f"'tools[{i}].function.name' must be a string", "tools")
    choice = body.get("tool_choice")
    if choice is None:
        choice = "auto" if tools else "none"
    if not (choice in ("none", "auto", "required") or isinstance(choice, dict)):
        raise ApiError(
            "'tool_choice' must be none, auto, required or a named function", "tool_choice"
        )
    # vLLM's checks: a choice other than none needs a 'tools' field (an empty list passes,
    # as no tools), and a named function must be one of them.
    if choice != "none" and tools is None:
        what = repr(choice) if isinstance(choice, str) else "naming a function"
        raise ApiError(f"'tool_choice' {what} needs 'tools'", "tool_choice")
    if isinstance(choice, dict):
        fn = choice.get("function")
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str) or not name:
            raise ApiError(
                "'tool_choice.function.name' must be a string, as in "
                '{"type": "function", "function": {"name": "my_function"}}',
                "tool_choice",
            )
        if name not in (t["function"]["name"] for t in tools or ()):
            raise ApiError(
                f"'tool_choice' names {name!r}, which is not one of 'tools'", "tool_choice"
            )
    if choice == "none" or not tools:
        # Like vLLM: with tool_choice none the tools stay out of the output parsing.
        return tools or None, False
    return tools, True


def chat_prompt(body: dict[str, Any], tokenizer: Any) -> tuple[list[int], bool]:
    """The prompt ids of a chat body (``messages``, ``tools``, ``chat_template_kwargs``,
    ``add_generation_prompt``, ``continue_final_message``, ``add_special_tokens``, as vLLM
    reads them), and whether tool calls are parsed out of the answer. One rendering for
    ``/v1/chat/completions`` and ``/tokenize``, so a count is the prompt generation sees."""
    messages = parse_messages(body)
    tools, parse_calls = parse_tools(body)
    kwargs = body.get("chat_template_kwargs") or {}
    if not isinstance(kwargs, dict):
        raise ApiError("'chat_template_kwargs' must be an object", "chat_template_kwargs")
    add_prompt = parse_flag(body, "add_generation_prompt", True)
    if parse_flag(body, "continue_final_message", False):
        # A prefill: the final assistant message is left open and the answer goes on with it.
        if add_prompt:
            raise ApiError(
                "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
                "continue_final_message",
            )
        kwargs = {**kwargs, "continue_final_message": True}
    try:
        tokens = render_prompt(tokenizer, messages, tools, add_prompt, kwargs)
    except Exception as e:  # template errors are the caller's messages
        raise ApiError(f"cannot apply the chat template: {e}", "messages") from e
    if parse_flag(body, "add_special_tokens", False):
        bos = tokenizer.bos_token_id
        if bos is not None and tokens[:1] != [bos]:
            tokens = [bos, *tokens]
    return tokens, parse_calls


def check_model(body: dict[str, Any], model_name: str) -> None:
    model = body.get("model")
    if model is not None and model not in (model_name, DEFAULT_ALIAS):
        raise ApiError(f"The model `{model}` does not exist.", "model", 404)


def parse_flag(body: dict[str, Any], name: str, default: bool) -> bool:
    return bool(_get(body, name, bool, default))


def parse_token_ids(body: dict[str, Any], vocab_size: int) -> list[int]:
    """``tokens`` of a /detokenize request: ids the tokenizer knows."""
    tokens = body.get("tokens")
    if not isinstance(tokens, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab_size for t in tokens
    ):
        raise ApiError(f"'tokens' must be a list of token ids in [0, {vocab_size})", "tokens")
    return tokens


def _known_ids(ids: list[int], vocab_size: int) -> list[int]:
    """Prompt token ids, each one the tokenizer knows (else the model's lookup fails)."""
    bad = next((t for t in ids if not 0 <= t < vocab_size), None)
    if bad is not None:
        raise ApiError(f"'prompt': token id {bad} is not in [0, {vocab_size})", "prompt")
    return list(ids)


def parse_prompts(body: dict[str, Any], tokenizer: Any) -> list[list[int]]:
    prompt = body.get("prompt")
    if isinstance(prompt, str) and prompt:
        return [tokenizer.encode(prompt)]
    if isinstance(prompt, list) and prompt:
        if all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return [_known_ids(prompt, len(tokenizer))]
        if all(isinstance(p, str) and p for p in prompt):
            return [tokenizer.encode(p) for p in prompt]
        if all(
            isinstance(p, list)
            and p
            and all(isinstance(t, int) and not isinstance(t, bool) for t in p)
            for p in prompt
        ):
            return [_known_ids(p, len(tokenizer)) for p in prompt]
    raise ApiError(
        "'prompt' must be a non-empty string, list of token ids, or a list of either", "prompt"
    )


def echo_texts(body: dict[str, Any], prompts: list[list[int]], tokenizer: Any) -> list[str]:
    """The text ``echo`` puts before each prompt's answers: a text prompt as sent, token ids
    decoded. Empty with ``return_token_ids`` (vLLM's behaviour: the client has the ids)."""
    if body.get("return_token_ids"):
        return ["" for _ in prompts]
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
        return list(prompt)
    return [tokenizer.decode(ids) for ids in prompts]


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def now() -> int:
    return int(time.time())


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None,
    }


def token_str(tokenizer: Any, token_id: int, as_ids: bool) -> str:
    if as_ids:
        return f"token_id:{token_id}"
    return tokenizer.decode([token_id])


def _lp(value: float) -> float:
    # vLLM clamps -inf to -9999.0 so the JSON stays valid.
    return max(value, -9999.0)


def chat_logprobs(tokenizer: Any, events: list[TokenEvent], as_ids: bool) -> dict[str, Any]:
    """`choices[i].logprobs` of a chat completion: {content: [{token, logprob, bytes, top_logprobs}]}."""
    content = []
    for ev in events:
        tok = token_str(tokenizer, ev.token_id, as_ids)
        tops = []
        for tid, lp in ev.top:
            t = token_str(tokenizer, tid, as_ids)
            tops.append({"token": t, "logprob": _lp(lp), "bytes": list(t.encode("utf-8"))})
        content.append(
            {
                "token": tok,
                "logprob": _lp(ev.logprob),
                "bytes": list(tok.encode("utf-8")),
                "top_logprobs": tops,
            }
        )
    return {"content": content}


def completion_logprobs(
    tokenizer: Any,
    events: list[TokenEvent],
    as_ids: bool,
    offset: int = 0,
    prompt: tuple[list[int], list[PromptToken | None], int] | None = None,
) -> dict[str, Any]:
    """`choices[i].logprobs` of a legacy completion: parallel lists.

    ``prompt`` (echo): the prompt's ids, their scores and the ``logprobs`` asked, listed
    before the generated tokens as vLLM lists them: the first token's log-prob is null,
    and each position's top holds the prompt token and then the best ``logprobs``, as a
    generated position's holds the sampled token and then the best.
    """
    rows: list[tuple[str, float | None, dict[str, float] | None]] = []

    def row(tid: int, logprob: float, best: list[tuple[int, float]]) -> None:
        # OpenAI's and vLLM's top: the position's own token always, then the best (up to
        # logprobs + 1 entries; `logprobs: 0` gives the token's alone).
        tok = token_str(tokenizer, tid, as_ids)
        top = {tok: _lp(logprob)}
        top.update((token_str(tokenizer, t, as_ids), _lp(lp)) for t, lp in best)
        rows.append((tok, _lp(logprob), top))

    if prompt is not None:
        ids, scored, k = prompt
        for tid, pos in zip(ids, scored, strict=True):
            if pos is None:
                rows.append((token_str(tokenizer, tid, as_ids), None, None))
            else:
                row(tid, pos.logprob, pos.top[:k])
    for ev in events:
        row(ev.token_id, ev.logprob, ev.top)
    tokens, lps, tops, offsets = [], [], [], []
    for tok, lp, top in rows:
        offsets.append(offset)
        offset += len(tok)
        tokens.append(tok)
        lps.append(lp)
        tops.append(top)
    return {"text_offset": offsets, "token_logprobs": lps, "tokens": tokens, "top_logprobs": tops}


def prompt_logprobs(tokenizer: Any, scored: list[PromptToken | None]) -> list[Any]:
    """vLLM's ``choices[i].prompt_logprobs``: None for the first token, then per position
    {token id: {logprob, rank, decoded_token}}, the prompt token first, then the best."""
    out: list[Any] = []
    for pos in scored:
        if pos is None:
            out.append(None)
            continue
        entries = [(pos.token_id, pos.logprob, pos.rank)]
        entries += [(t, lp, r) for r, (t, lp) in enumerate(pos.top, start=1)]
        out.append(
            {
                str(t): {"logprob": _lp(lp), "rank": r, "decoded_token": tokenizer.decode([t])}
                for t, lp, r in entries
            }
        )
    return out
