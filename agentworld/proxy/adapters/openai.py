"""The OpenAI chat completions (identity) and legacy completions adapters.

Checking agent requests, asking vLLM for token ids and log-probs the agent did
not ask for (and removing them from what it gets), and normalising requests
and responses into the record shape. The one place that knows these formats.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web

from agentworld import raw_ids
from agentworld.proxy.adapters import openai_answer
from agentworld.proxy.adapters.base import IDENTITY, Answer, Outbound
from agentworld.proxy.adapters.openai_checks import (
    MESSAGE_ROLES,
    check_chat_tools,
    check_common,
    check_tool_calls,
    check_top_logprobs,
)
from agentworld.proxy.adapters.openai_records import (
    all_token_ids,
    choice_index,
    choice_list,
    choice_reply,
    choice_response,
    injected_keys,
    logprob_values,
    prompt_list,
    record_prompt,
    record_tokens,
)
from agentworld.proxy.adapters.openai_stream import OpenAIRelay
from agentworld.proxy.bad_request import BadRequest
from agentworld.proxy.config import UpstreamConfig
from agentworld.proxy.error_responses import bad_request, error_response
from agentworld.proxy.normal_form import normalise_message
from agentworld.proxy.recorder import failed_step, ok_steps
from agentworld.proxy.redact import recorded_params
from agentworld.proxy.translate.response_chains import ResponseChains
from agentworld.proxy.upstream import answer_json
from agentworld.proxy.upstream.faults import Fault

if TYPE_CHECKING:
    from agentworld.proxy.adapters.base import Exchange


@dataclass(frozen=True)
class Injected:
    """What the proxy added to the agent's request, to be removed from what the agent receives."""

    token_ids: bool = False
    logprobs: bool = False

    @property
    def any(self) -> bool:
        return self.token_ids or self.logprobs


class _OpenAIAdapter:
    """What the two OpenAI adapters share: the body sent upstream, stripping injected fields,
    and the pipeline's interface (``adapters.base.Adapter``) as the identity: the answer
    and events go to the agent as they came, minus what the proxy asked for itself."""

    protocol: str
    path: str
    chat: bool
    api_key_header = None  # a pass-through key goes as a Bearer token

    def history(self, body: dict[str, Any], chains: ResponseChains) -> tuple[list[Any], str | None]:
        return [], None  # no previous_response_id here

    def mode(self, up: UpstreamConfig) -> str:
        return IDENTITY

    def outbound(
        self,
        body: dict[str, Any],
        messages: list[dict[str, Any]] | None,
        up: UpstreamConfig,
        mode: str,
        history: list[Any],
    ) -> Outbound:
        sent, injected = self.prepare(body, up)
        return Outbound(sent, injected, self.path, sent.get("stream") is True)

    def answer(self, x: Exchange, raw: bytes, content_type: str) -> Answer:
        """The upstream's bytes (re-encoded only without what the proxy asked for); the
        parsed body stays whole for the records, built when they are needed."""
        call = x.call
        obj, raw = self.read_answer(raw, call.injected)
        replies = self.replies(obj) if x.threads else None
        return Answer(raw, content_type, replies, lambda: ok_steps(call, obj, replies))

    def read_answer(self, raw: bytes, injected: Injected) -> tuple[dict[str, Any], bytes]:
        """The upstream's answer parsed for the records, and the agent's copy (``raw`` itself
        unless the proxy asked for what the agent did not).

        A chat answer is read into typed structs where they read it exactly
        (``openai_answer``), as the stream relay reads events: REWRITE where the log-probs
        are nulled, READ where the answer goes as it came. Ids added alone leave the
        entries whole for the agent: the general way, as for anything the structs refuse.
        """
        if self.chat and (injected.logprobs or not injected.any):
            typed = openai_answer.read(raw, strict=injected.logprobs)
            if typed is not None:
                obj = openai_answer.body(typed)  # before ``stripped`` writes over the structs
                if injected.any:
                    raw = openai_answer.stripped(typed, injected.token_ids)
                return obj, raw
        obj = answer_json.loads_object(raw)
        if injected.any:
            raw = raw_ids.dumps(self.stripped(obj, injected))
        return obj, raw

    def relay(self, x: Exchange, url: str) -> OpenAIRelay:
        return OpenAIRelay(x, url, self)

    def failed(
        self, x: Exchange, status: str, error: dict[str, Any], partial: Any = None
    ) -> list[dict[str, Any]]:
        return failed_step(x.call, status=status, error=error, partial=partial)

    def refused(
        self, x: Exchange, fault: Fault, raw: bytes, content_type: str, headers: dict[str, str]
    ) -> web.Response:
        """The upstream's error, relayed as it came."""
        return web.Response(
            status=fault.status, body=raw, headers={"Content-Type": content_type, **headers}
        )

    def refusal(self, exc: BadRequest) -> web.Response:
        return bad_request(exc)

    def server_error(
        self, status: int, message: str, kind: str, headers: dict[str, str]
    ) -> web.Response:
        return error_response(status, message, kind, code=status, headers=headers)

    def replies(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        raise NotImplementedError

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
            if not isinstance(role, str) or role not in MESSAGE_ROLES:
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
                check_tool_calls(calls, f"messages[{i}].tool_calls")
        tools = body.get("tools")
        if tools is not None:
            check_chat_tools(tools)
        lp = body.get("logprobs")
        if lp is not None and not isinstance(lp, bool):
            raise BadRequest("'logprobs' must be a boolean", "logprobs")
        check_top_logprobs(body.get("top_logprobs"), lp is True)
        check_common(body)

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
        skip = self._skip | injected_keys(injected, chat=True)
        req: dict[str, Any] = {
            "messages": messages if messages is not None else self.messages(sent),
            "params": recorded_params(sent, skip),
        }
        if isinstance(sent.get("model"), str):
            req["model"] = sent["model"]
        if sent.get("tools"):
            req["tools"] = sent["tools"]
        return req

    def messages(
        self, body: dict[str, Any], history: list[Any] = (), *, strict: bool = True
    ) -> list[dict[str, Any]]:
        """The request's messages in the record shape (also what threading compares)."""
        return [normalise_message(m) for m in body["messages"]]

    def replies(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        """The assistant message of each choice, normalised (what threading continues from)."""
        return [choice_reply(c) for c in choice_list(body)]

    def choices(
        self, body: dict[str, Any], replies: list[dict[str, Any]] | None = None
    ) -> list[tuple[int, dict[str, Any], dict[str, Any]]]:
        """(choice index, record response, record tokens) for each choice of a response body.

        ``replies``: ``self.replies(body)`` when already computed.
        """
        out = []
        choices = choice_list(body)
        for i, c in enumerate(choices):
            message = replies[i] if replies is not None else choice_reply(c)
            ids = c.get("token_ids")
            response = choice_response(body, c, len(choices), ids, {"message": message})
            lp = c.get("logprobs")
            values = None
            if isinstance(lp, dict) and isinstance(lp.get("content"), list):
                values = logprob_values(lp["content"])
            tokens = record_tokens(body.get("prompt_token_ids"), ids, values)
            out.append((choice_index(c, i), response, tokens))
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
                or all_token_ids(prompt)
                or all(isinstance(p, list) and p and all_token_ids(p) for p in prompt)
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
        check_common(body)

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
        skip = self._skip | injected_keys(injected, chat=False)
        prompts = prompt_list(sent["prompt"])
        req: dict[str, Any] = {"params": recorded_params(sent, skip)}
        if len(prompts) == 1:
            record_prompt(req, prompts[0])
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
        prompts = prompt_list(sent["prompt"])
        k = choice // (sent.get("n") or 1)
        if len(prompts) == 1 or k >= len(prompts):
            return request
        params = {key: v for key, v in request["params"].items() if key != "prompt_list"}
        params["prompt_index"] = k
        out = {**request, "params": params}
        record_prompt(out, prompts[k])
        return out

    def messages(
        self, body: dict[str, Any], history: list[Any] = (), *, strict: bool = True
    ) -> None:
        return None  # a prompt: never threaded

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
            response = choice_response(body, c, len(choices), ids, {"text": text})
            lp = c.get("logprobs")
            values = lp.get("token_logprobs") if isinstance(lp, dict) else None
            tokens = record_tokens(
                c.get("prompt_token_ids"), ids, values if isinstance(values, list) else None
            )
            out.append((choice_index(c, i), response, tokens))
        return out


CHAT = ChatAdapter()
COMPLETIONS = CompletionsAdapter()
OpenAIAdapter = ChatAdapter | CompletionsAdapter
