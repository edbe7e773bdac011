"""A chat completion answered in one body, read into typed structs: the unary fast path.

A unary chat answer with log-probs carries an entry per sampled token (the token,
its bytes, its top log-probs) of which a record keeps only the value, and an
agent that did not ask for log-probs gets the answer without them. Parsed by
orjson, every entry becomes a dict and its bytes a list, to be freed again; read
with msgspec into the structs here, an entry is its value alone
(``openai_chunks.Entry``). Reading, stripping and the steps' tokens of a
600-token answer with 82,500 prompt ids take 25% fewer instructions (7.4 M to
5.6 M), of a 32-token one 20% fewer; a short unary call 4.6% fewer
(``bench/proxy_instructions.py --baseline``), an agent-shaped one ~4% less CPU
(``bench/proxy_overhead.py --turns 20 --reply-chars 600 --baseline``). A
translated call's chat answer (Messages or Responses over a chat upstream) is
read with ``READ`` too (``parsed``): the translator writes the agent's answer.

The readings mirror the stream relay's (``openai_chunks``):

- ``READ`` when the agent gets the answer as it came (the proxy added nothing
  it must take out): fields the structs do not name are skipped, as the
  record reads none of them;
- ``REWRITE`` when the agent's copy leaves out what the proxy asked for: every
  field must be one the structs name (``forbid_unknown_fields``), so the copy
  written from them is the upstream's answer less the stripped fields (its keys
  in the structs' order). Used only where the log-probs are nulled: the entries,
  of which it keeps the values, are never written.

``body`` gives the record code (``ChatAdapter.choices`` and ``replies``) what the
general way's parse gives it, but each choice's log-prob entries as their values
(``LogprobValues``, which ``logprob_values`` takes as they are). The field set is
vLLM's ``ChatCompletionResponse`` and its choice; the message is read as JSON,
whatever it holds. Anything the structs do not read exactly (a field of another
type, a body that is no object, a field ``REWRITE`` does not know, long prompt
ids whose tag lands anywhere but a ``prompt_token_ids``) goes the general way,
``answer_json.loads``, which this must match (tests/proxy/test_proxy_answers.py).
"""

# No ``from __future__ import annotations``: msgspec reads the structs' annotations,
# which name classes local to ``_structs``.
from typing import Any

import msgspec
from msgspec import UNSET, Struct, UnsetType

from agentworld.proxy.adapters.openai_chunks import NOT_TYPED, Index, Logprobs
from agentworld.proxy.adapters.openai_records import LogprobValues
from agentworld.proxy.upstream import answer_json
from agentworld.raw_ids import RawIds


def _structs(strict: bool) -> type[Struct]:
    """The answer and choice structs; ``strict``: unknown fields refused."""

    class Choice(Struct, forbid_unknown_fields=strict):
        index: Index | UnsetType = UNSET
        message: Any = UNSET
        logprobs: Logprobs | UnsetType | None = UNSET
        finish_reason: Any = UNSET
        stop_reason: Any = UNSET
        token_ids: Any = UNSET
        prompt_token_ids: Any = UNSET  # a completions choice's: read here as ``_place`` does
        routed_experts: Any = UNSET

    class Body(Struct, forbid_unknown_fields=strict):
        id: Any = UNSET
        object: Any = UNSET
        created: Any = UNSET
        model: Any = UNSET
        choices: list[Choice] | UnsetType | None = UNSET
        usage: Any = UNSET
        system_fingerprint: Any = UNSET
        service_tier: Any = UNSET
        prompt_logprobs: Any = UNSET
        prompt_token_ids: Any = UNSET
        kv_transfer_params: Any = UNSET

    return Body


_READ = msgspec.json.Decoder(_structs(strict=False)).decode
_REWRITE = msgspec.json.Decoder(_structs(strict=True)).decode


def _enc_hook(obj: Any) -> Any:
    if obj.__class__ is RawIds:  # the upstream's array, written back as it came
        return msgspec.Raw(obj.json)
    raise TypeError(f"Type is not JSON serializable: {type(obj).__name__}")


_encode = msgspec.json.Encoder(enc_hook=_enc_hook).encode


def read(raw: bytes, *, strict: bool) -> Any:
    """The answer read into the structs (``strict``: ``REWRITE``, else ``READ``), its long
    prompt ids as RawIds; None when the structs do not take it (the general way then)."""
    data, ids = answer_json.cut_ids(raw)
    try:
        body = (_REWRITE if strict else _READ)(data)
    except NOT_TYPED:
        return None
    if ids and not _place(body, ids):
        return None
    return body


def parsed(raw: bytes) -> dict[str, Any]:
    """The chat answer as the record code and a translator read it (``READ``, else the
    general way): for a caller that writes the agent's answer itself."""
    typed = read(raw, strict=False)
    return body(typed) if typed is not None else answer_json.loads_object(raw)


def _place(body: Any, ids: list[RawIds]) -> bool:
    """``answer_json._place`` for the structs: each array where its tag landed, and every
    tag on a ``prompt_token_ids`` (of the body or a choice)."""
    holders = [body, *(body.choices or ())]
    placed: set[int] = set()
    for h in holders:
        i = answer_json.tagged(h.prompt_token_ids)
        if i is not None:
            if i in placed:
                return False
            placed.add(i)
            h.prompt_token_ids = ids[i]
    return len(placed) == len(ids)


_BODY_FIELDS = tuple(f for f in _structs(False).__struct_fields__ if f != "choices")
_CHOICE_FIELDS = ("index", "message", "finish_reason", "stop_reason", "token_ids")
_CHOICE_RARE = ("prompt_token_ids", "routed_experts")


def body(answer: Any) -> dict[str, Any]:
    """What the general way's parse is to the record code: the fields the upstream sent,
    the log-prob entries as their values."""
    out = _present(answer, _BODY_FIELDS, {})
    choices = answer.choices
    if choices is not UNSET:
        out["choices"] = None if choices is None else [_choice(c) for c in choices]
    return out


def _choice(c: Any) -> dict[str, Any]:
    out = _present(c, _CHOICE_FIELDS, {})
    lp = c.logprobs
    if lp is not UNSET:  # the record reads the values of a list of entries, or none
        content = None if lp is None else lp.content
        out["logprobs"] = (
            None
            if content is None or content is UNSET
            else {"content": LogprobValues([e.logprob for e in content])}
        )
    return _present(c, _CHOICE_RARE, out)


def _present(struct: Any, names: tuple[str, ...], out: dict[str, Any]) -> dict[str, Any]:
    """``out`` with each of the struct's fields ``names`` the upstream sent (not UNSET)."""
    for name in names:
        v = getattr(struct, name)
        if v is not UNSET:
            out[name] = v
    return out


def stripped(answer: Any, token_ids: bool) -> bytes:
    """The agent's copy of a ``REWRITE`` answer: its log-probs nulled and, with
    ``token_ids``, its ids left out (``ChatAdapter.strip``), written from the structs."""
    if token_ids:
        answer.prompt_token_ids = UNSET
    for c in answer.choices or ():
        if token_ids:
            c.token_ids = UNSET
        if c.logprobs is not UNSET:
            c.logprobs = None
    return _encode(answer)
