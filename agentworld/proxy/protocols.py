"""Wire-protocol adapters: checking agent requests, asking vLLM for token ids, and normalising
requests and responses into the record shape.

This is the one place that knows the OpenAI chat and completions formats. A
later adapter (Anthropic Messages, OpenAI Responses) implements the same
methods and registers its route; nothing else in the proxy changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from agentworld.proxy.bad_request import BadRequest
from agentworld.proxy.config import UpstreamConfig
from agentworld.proxy.redact import recorded_params
from agentworld.raw_ids import RawIds
from agentworld.records import MAX_TOOL_NAME_BYTES

MAX_N = 128
_MESSAGE_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


@dataclass(frozen=True)
class Injected:
    """What the proxy added to the agent's request, to be removed from what the agent receives."""

    token_ids: bool = False
    logprobs: bool = False

    @property
    def any(self) -> bool:
        return self.token_ids or self.logprobs


# -- messages -----------------------------------------------------------------------


def _arguments(v: Any) -> str:
    if isinstance(v, str):
        return v
    return orjson.dumps(v).decode() if v is not None else ""


def normalise_tool_calls(calls: Any) -> list[dict[str, Any]] | None:
    """OpenAI ``tool_calls`` ([{id, type, function{name, arguments}}]) -> [{id, name, arguments}]."""
    if not isinstance(calls, list) or not calls:
        return None
    out = []
    for c in calls:
        if not isinstance(c, dict):
            continue
        fn = c.get("function") if isinstance(c.get("function"), dict) else c
        call = {"name": str(fn.get("name") or ""), "arguments": _arguments(fn.get("arguments"))}
        if isinstance(c.get("id"), str):
            call["id"] = c["id"]
        out.append(call)
    return out or None


def normalise_message(m: dict[str, Any]) -> dict[str, Any]:
    """One OpenAI chat message in the record's normalised shape."""
    role = m.get("role")
    out: dict[str, Any] = {"role": "tool" if role == "function" else role}
    content = m.get("content")
    if isinstance(content, str | list):
        out["content"] = content
    for key in ("name", "tool_call_id"):
        if isinstance(m.get(key), str):
            out[key] = m[key]
    calls = normalise_tool_calls(m.get("tool_calls"))
    if calls:
        out["tool_calls"] = calls
    reasoning = m.get("reasoning")
    if reasoning is None:
        reasoning = m.get("reasoning_content")
    if isinstance(reasoning, str):
        out["reasoning"] = reasoning
    return out


def thread_form(m: dict[str, Any]) -> Any:
    """What must match for a resent message to count as the same turn (automatic threading).

    Agents often drop reasoning, turn a null assistant content into "", strip
    whitespace, or re-serialise tool arguments; none of that breaks a thread.
    """
    content = m.get("content")
    if isinstance(content, list):
        if all(isinstance(p, dict) and p.get("type") == "text" for p in content):
            content = "".join(str(p.get("text", "")) for p in content)
        else:
            content = orjson.dumps(content, option=orjson.OPT_SORT_KEYS).decode()
    content = (content or "").strip()
    calls = []
    for c in m.get("tool_calls") or ():
        args = c.get("arguments", "")
        try:
            args = orjson.dumps(orjson.loads(args), option=orjson.OPT_SORT_KEYS).decode()
        except (orjson.JSONDecodeError, TypeError):
            pass
        calls.append([c.get("id") or "", c.get("name"), args])
    return [m.get("role"), content, calls, m.get("tool_call_id") or "", m.get("name") or ""]


# -- field checks ---------------------------------------------------------------------


def check_tool_name(v: Any, where: str) -> None:
    """A tool call's id or name, or a tool's name: a string a record can keep (or absent).
    A request with a longer one is refused, rather than served and then not recorded."""
    if v is None:
        return
    if not isinstance(v, str):
        raise BadRequest(f"{where} must be a string", where)
    if len(v) > MAX_TOOL_NAME_BYTES // 4 and len(v.encode()) > MAX_TOOL_NAME_BYTES:
        raise BadRequest(f"{where}: longer than {MAX_TOOL_NAME_BYTES} bytes", where)


def _check_tool_calls(calls: Any, where: str) -> None:
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


def _check_chat_tools(tools: Any) -> None:
    if not isinstance(tools, list):
        raise BadRequest("'tools' must be a list of tool definitions", "tools")
    for j, t in enumerate(tools):
        if not isinstance(t, dict):
            raise BadRequest(f"tools[{j}] must be an object", f"tools[{j}]")
        fn = t.get("function")
        if isinstance(fn, dict):
            check_tool_name(fn.get("name"), f"tools[{j}].function.name")


def _check_common(body: dict[str, Any]) -> None:
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


def _check_top_logprobs(v: Any, logprobs: bool) -> None:
    """Alternatives only with ``logprobs: true``, as OpenAI, vLLM and ``aw serve`` require
    (vLLM takes 0 alone, and -1 for all). Forwarded, the proxy's own log-probs request
    would hide the agent's mistake: the call would succeed with no alternatives."""
    if v is None:
        return
    if isinstance(v, bool) or not isinstance(v, int):
        raise BadRequest("'top_logprobs' must be an integer", "top_logprobs")
    if v != 0 and not logprobs:
        raise BadRequest("'top_logprobs' requires 'logprobs' to be true", "top_logprobs")


def _usage_for(body: dict[str, Any], choice: dict[str, Any], n_choices: int, ids: Any) -> Any:
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


def _response(
    body: dict[str, Any], c: dict[str, Any], n: int, ids: Any, response: dict[str, Any]
) -> dict[str, Any]:
    """A step's ``response`` for choice ``c`` of ``n``: ``response`` (its message or text)
    with the finish reason, the body's id and the choice's share of the usage."""
    if isinstance(c.get("finish_reason"), str):
        response["finish_reason"] = c["finish_reason"]
    if isinstance(body.get("id"), str):
        response["id"] = body["id"]
    usage = _usage_for(body, c, n, ids)
    if isinstance(usage, dict):
        response["usage"] = usage
    return response


def choice_list(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A response body's choices (objects only; none when ``choices`` is not a list)."""
    choices = body.get("choices")
    if choices.__class__ is not list:
        return []
    return [c for c in choices if c.__class__ is dict]


def _choice_index(c: dict[str, Any], position: int) -> int:
    """A choice's ``index``; its position among the choices when the upstream's is not one."""
    i = c.get("index", position)
    return i if i.__class__ is int and i >= 0 else position


def _tokens(prompt_ids: Any, ids: Any, logprobs: list[Any] | None) -> dict[str, Any]:
    if not isinstance(ids, list):
        return {"source": "none"}
    tokens: dict[str, Any] = {"source": "engine", "completion_ids": ids}
    if isinstance(prompt_ids, list | RawIds):  # RawIds: kept as the upstream's bytes
        tokens["prompt_ids"] = prompt_ids
    # Exact types: parsed JSON holds no subclasses, and bool (an int) must not pass.
    if (
        logprobs is not None
        and len(logprobs) == len(ids)
        and all(x.__class__ in _NUMBER_TYPES for x in logprobs)
    ):
        tokens["completion_logprobs"] = logprobs
    return tokens


_NUMBER_TYPES = frozenset({int, float})


def _reply(c: dict[str, Any]) -> dict[str, Any]:
    """A response choice's message, normalised as the record's assistant message."""
    msg = c.get("message")
    message = normalise_message(
        {**msg, "role": "assistant"} if isinstance(msg, dict) else {"role": "assistant"}
    )
    message.setdefault("content", None)
    return message


class _OpenAIAdapter:
    """What the two OpenAI adapters share: the body sent upstream, stripping injected fields."""

    def prepare(self, body: dict[str, Any], up: UpstreamConfig) -> tuple[dict[str, Any], Injected]:
        """The body to send upstream (model, sampling defaults, token-id requests)."""
        sent = {**{k: v for k, v in up.params.items() if k not in body}, **body}
        if up.model is not None:
            sent["model"] = up.model
        if up.engine != "vllm":
            return sent, Injected()
        ids = not sent.get("return_token_ids")
        if ids:
            sent["return_token_ids"] = True
        return sent, Injected(ids, self._ask_logprobs(sent))

    def _ask_logprobs(self, sent: dict[str, Any]) -> bool:
        """Ask for the sampled tokens' log-probs unless the agent did; whether it was asked."""
        raise NotImplementedError

    def strip(self, obj: dict[str, Any], injected: Injected) -> None:
        raise NotImplementedError

    def choice_request(
        self, request: dict[str, Any], sent: dict[str, Any], choice: int
    ) -> dict[str, Any]:
        """The request of choice ``choice``'s step: the call's (one prompt, many answers)."""
        return request

    def stripped(self, obj: dict[str, Any], injected: Injected) -> dict[str, Any]:
        """``strip`` on shallow copies: the parsed body stays whole for the record."""
        out = obj.copy()
        choices = out.get("choices")
        if isinstance(choices, list):
            out["choices"] = [c.copy() if isinstance(c, dict) else c for c in choices]
        self.strip(out, injected)
        return out


class ChatAdapter(_OpenAIAdapter):
    """OpenAI ``POST /v1/chat/completions`` (vLLM extensions for token ids)."""

    protocol = "openai.chat"
    path = "/v1/chat/completions"
    chat = True
    _skip = frozenset({"model", "messages", "tools"})

    def check(self, body: dict[str, Any]) -> None:
        """Raise BadRequest naming the first malformed field."""
        messages = body.get("messages")
        if messages is None:
            raise BadRequest("'messages' is a required property", "messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("'messages' must be a non-empty list of messages", "messages")
        for i, m in enumerate(messages):
            if not isinstance(m, dict):
                raise BadRequest(f"messages[{i}] must be an object", f"messages[{i}]")
            role = m.get("role")
            if not isinstance(role, str) or role not in _MESSAGE_ROLES:
                raise BadRequest(
                    f"messages[{i}].role: unknown role {role!r}", f"messages[{i}].role"
                )
            content = m.get("content")
            if content is not None and not isinstance(content, str | list):
                raise BadRequest(
                    f"messages[{i}].content must be a string, a list of parts or null",
                    f"messages[{i}].content",
                )
            calls = m.get("tool_calls")
            if calls is not None:
                _check_tool_calls(calls, f"messages[{i}].tool_calls")
        tools = body.get("tools")
        if tools is not None:
            _check_chat_tools(tools)
        lp = body.get("logprobs")
        if lp is not None and not isinstance(lp, bool):
            raise BadRequest("'logprobs' must be a boolean", "logprobs")
        _check_top_logprobs(body.get("top_logprobs"), lp is True)
        _check_common(body)

    def _ask_logprobs(self, sent: dict[str, Any]) -> bool:
        if sent.get("logprobs"):
            return False
        sent["logprobs"] = True
        # The agent asked for no alternatives (``check`` refuses them without log-probs): a
        # default from the agent's config must not make the engine compute them for the proxy.
        sent.pop("top_logprobs", None)
        return True

    def strip(self, obj: dict[str, Any], injected: Injected) -> None:
        """Remove what the agent did not ask for, from a body or a stream chunk, in place.

        It runs on every streamed event: the choices are walked inline.
        """
        ids = injected.token_ids
        if ids:
            obj.pop("prompt_token_ids", None)
        choices = obj.get("choices")
        if choices.__class__ is not list:
            return
        lps = injected.logprobs
        for c in choices:
            if c.__class__ is dict:
                if ids:
                    c.pop("token_ids", None)
                if lps and "logprobs" in c:
                    c["logprobs"] = None

    def request_record(
        self, sent: dict[str, Any], injected: Injected, messages: list[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        skip = self._skip | _injected_keys(injected, chat=True)
        req: dict[str, Any] = {
            "messages": messages if messages is not None else self.messages(sent),
            "params": recorded_params(sent, skip),
        }
        if isinstance(sent.get("model"), str):
            req["model"] = sent["model"]
        if sent.get("tools"):
            req["tools"] = sent["tools"]
        return req

    def messages(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        """The request's messages in the record shape (also what threading compares)."""
        return [normalise_message(m) for m in body["messages"]]

    def replies(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        """The assistant message of each choice, normalised (what threading continues from)."""
        return [_reply(c) for c in choice_list(body)]

    def choices(
        self, body: dict[str, Any], replies: list[dict[str, Any]] | None = None
    ) -> list[tuple[int, dict[str, Any], dict[str, Any]]]:
        """(choice index, record response, record tokens) for each choice of a response body.

        ``replies``: ``self.replies(body)`` when already computed.
        """
        out = []
        choices = choice_list(body)
        for i, c in enumerate(choices):
            message = replies[i] if replies is not None else _reply(c)
            ids = c.get("token_ids")
            response = _response(body, c, len(choices), ids, {"message": message})
            lp = c.get("logprobs")
            values = None
            if isinstance(lp, dict) and isinstance(lp.get("content"), list):
                values = [e.get("logprob") if e.__class__ is dict else None for e in lp["content"]]
            tokens = _tokens(body.get("prompt_token_ids"), ids, values)
            out.append((_choice_index(c, i), response, tokens))
        return out


class CompletionsAdapter(_OpenAIAdapter):
    """OpenAI legacy ``POST /v1/completions`` (vLLM puts prompt ids on each choice)."""

    protocol = "openai.completions"
    path = "/v1/completions"
    chat = False
    _skip = frozenset({"model", "prompt"})

    def check(self, body: dict[str, Any]) -> None:
        prompt = body.get("prompt")
        if prompt is None:
            raise BadRequest("'prompt' is a required property", "prompt")
        ok = isinstance(prompt, str) or (
            isinstance(prompt, list)
            and prompt
            and (
                all(isinstance(p, str) for p in prompt)
                or _token_ids(prompt)
                or all(isinstance(p, list) and p and _token_ids(p) for p in prompt)
            )
        )
        if not ok:
            raise BadRequest(
                "'prompt' must be a string, a list of strings, a list of token ids or a list "
                "of lists of token ids",
                "prompt",
            )
        lp = body.get("logprobs")
        if lp is not None and (isinstance(lp, bool) or not isinstance(lp, int)):
            raise BadRequest("'logprobs' must be an integer", "logprobs")
        _check_common(body)

    def _ask_logprobs(self, sent: dict[str, Any]) -> bool:
        if sent.get("logprobs") is not None:
            return False
        sent["logprobs"] = 0  # the sampled token's log-prob, no alternatives
        return True

    def strip(self, obj: dict[str, Any], injected: Injected) -> None:
        for c in choice_list(obj):
            if injected.token_ids:
                c.pop("token_ids", None)
                c.pop("prompt_token_ids", None)
            if injected.logprobs and "logprobs" in c:
                c["logprobs"] = None

    def request_record(
        self, sent: dict[str, Any], injected: Injected, messages: list[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        """The call's request; a batch of prompts is in ``params.prompt_list`` (each choice's
        step has its own prompt: ``choice_request``)."""
        skip = self._skip | _injected_keys(injected, chat=False)
        prompts = _prompts(sent["prompt"])
        req: dict[str, Any] = {"params": recorded_params(sent, skip)}
        if len(prompts) == 1:
            _record_prompt(req, prompts[0])
        else:
            req["prompt"] = ""
            req["params"]["prompt_list"] = prompts
        if isinstance(sent.get("model"), str):
            req["model"] = sent["model"]
        return req

    def choice_request(
        self, request: dict[str, Any], sent: dict[str, Any], choice: int
    ) -> dict[str, Any]:
        """The request of choice ``choice``'s step: for a batch of prompts, the prompt it
        answers (choice = prompt index * n + j, as OpenAI and vLLM number them) and its
        ``params.prompt_index``; else ``request`` itself."""
        prompts = _prompts(sent["prompt"])
        k = choice // (sent.get("n") or 1)
        if len(prompts) == 1 or k >= len(prompts):
            return request
        params = {key: v for key, v in request["params"].items() if key != "prompt_list"}
        params["prompt_index"] = k
        out = {**request, "params": params}
        _record_prompt(out, prompts[k])
        return out

    def replies(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        return []  # completions carry no messages: never threaded

    def choices(
        self, body: dict[str, Any], replies: list[dict[str, Any]] | None = None
    ) -> list[tuple[int, dict[str, Any], dict[str, Any]]]:
        out = []
        choices = choice_list(body)
        for i, c in enumerate(choices):
            ids = c.get("token_ids")
            text = c.get("text") if isinstance(c.get("text"), str) else ""
            response = _response(body, c, len(choices), ids, {"text": text})
            lp = c.get("logprobs")
            values = lp.get("token_logprobs") if isinstance(lp, dict) else None
            tokens = _tokens(
                c.get("prompt_token_ids"), ids, values if isinstance(values, list) else None
            )
            out.append((_choice_index(c, i), response, tokens))
        return out


def _token_ids(v: list[Any]) -> bool:
    return all(isinstance(x, int) and not isinstance(x, bool) for x in v)


def _prompts(prompt: Any) -> list[Any]:
    """A completions ``prompt`` (as ``check`` lets through) as the prompts it holds, each a
    string or a list of token ids: a list of strings or of token-id lists is a batch."""
    if isinstance(prompt, str) or isinstance(prompt[0], int):
        return [prompt]
    return prompt


def _record_prompt(req: dict[str, Any], prompt: str | list[int]) -> None:
    """One prompt in a request record: its text, or "" and its ``params.prompt_token_ids``."""
    if isinstance(prompt, str):
        req["prompt"] = prompt
    else:
        req["prompt"] = ""
        req["params"]["prompt_token_ids"] = prompt


def _injected_keys(injected: Injected, *, chat: bool) -> frozenset[str]:
    """Request keys the proxy added (not recorded as the agent's parameters)."""
    keys = set()
    if injected.token_ids:
        keys.add("return_token_ids")
    if injected.logprobs:
        keys.add("logprobs")
    return frozenset(keys)


CHAT = ChatAdapter()
COMPLETIONS = CompletionsAdapter()
Adapter = ChatAdapter | CompletionsAdapter
