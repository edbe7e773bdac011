"""The checks of an OpenAI chat or completions request: each names the first malformed field.

Forwarded unchecked, a malformed field costs an upstream call whose answer the
proxy then cannot record, or a 500 from the engine in a shape the agent's SDK
does not read.
"""

from __future__ import annotations

from typing import Any

from agentworld.proxy.bad_request import BadRequest
from agentworld.proxy.normal_form import check_tool_name

MAX_N = 128
MESSAGE_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


def check_tool_calls(calls: Any, where: str) -> None:
    if not isinstance(calls, list):
        raise BadRequest(f"{where} must be a list", where)
    for j, c in enumerate(calls):
        w = f"{where}[{j}]"
        if not isinstance(c, dict):
            raise BadRequest(f"{w} must be an object", w)
        fn = c.get("function")
        if fn is not None and not isinstance(fn, dict):
            raise BadRequest(f"{w}.function must be an object", f"{w}.function")
        check_tool_name(c.get("id"), f"{w}.id")
        check_tool_name((fn or c).get("name"), f"{w}.function.name" if fn else f"{w}.name")


def check_chat_tools(tools: Any) -> None:
    if not isinstance(tools, list):
        raise BadRequest("'tools' must be a list of tool definitions", "tools")
    for j, t in enumerate(tools):
        if not isinstance(t, dict):
            raise BadRequest(f"tools[{j}] must be an object", f"tools[{j}]")
        fn = t.get("function")
        if isinstance(fn, dict):
            check_tool_name(fn.get("name"), f"tools[{j}].function.name")


def check_common(body: dict[str, Any]) -> None:
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise BadRequest("'model' must be a string", "model")
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise BadRequest("'stream' must be a boolean", "stream")
    n = body.get("n")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_N):
        raise BadRequest(f"'n' must be an integer between 1 and {MAX_N}", "n")
    opts = body.get("stream_options")
    if opts is not None and not isinstance(opts, dict):
        raise BadRequest("'stream_options' must be an object", "stream_options")
    for key in ("temperature", "top_p", "presence_penalty", "frequency_penalty"):
        v = body.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
            raise BadRequest(f"'{key}' must be a number", key)
    for key in ("max_tokens", "max_completion_tokens", "seed"):
        v = body.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise BadRequest(f"'{key}' must be an integer", key)
    stop = body.get("stop")
    if (
        stop is not None
        and not isinstance(stop, str)
        and (not isinstance(stop, list) or not all(isinstance(s, str) for s in stop))
    ):
        raise BadRequest("'stop' must be a string or a list of strings", "stop")


def check_top_logprobs(v: Any, logprobs: bool) -> None:
    """Alternatives only with ``logprobs: true``, as OpenAI, vLLM and ``aw serve`` require
    (vLLM takes 0 alone, and -1 for all). Forwarded, the proxy's own log-probs request
    would hide the agent's mistake: the call would succeed with no alternatives."""
    if v is None:
        return
    if isinstance(v, bool) or not isinstance(v, int):
        raise BadRequest("'top_logprobs' must be an integer", "top_logprobs")
    if v != 0 and not logprobs:
        raise BadRequest("'top_logprobs' requires 'logprobs' to be true", "top_logprobs")
