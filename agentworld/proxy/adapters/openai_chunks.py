"""Streamed chat chunks read into typed structs: the fast path of the stream relays.

A streamed call's events are most of what the proxy does for it: each is parsed,
added to the assembler and, when the proxy asked for token ids or log-probs the
agent did not, written again without them. Parsed by orjson, every object of an
event becomes a dict, the log-prob entries included (a token, its bytes, its top
log-probs), though the record keeps only each entry's value. Read with msgspec
into the structs here, an event makes no dicts, and the log-prob entries only
their values: vLLM's 14-event answer to a short chat is relayed in 14% fewer
instructions (the whole streamed call in 7% fewer: ``bench/proxy_instructions.py
--modes stream``), translated to Anthropic Messages in 17% fewer, to Responses in 12%.

The structs describe a vLLM or OpenAI ``chat.completion.chunk``. Two readings:

- ``READ``, when the event goes to the agent as it came, or is translated
  (``first_choice_pieces`` gives the translators what ``chat_form``'s gives them
  of a dict, and a chunk's ``get`` what they read of a stream's first): fields
  the structs do not name are skipped;
- ``REWRITE``, when it is written again without what the proxy added: every
  field must be one the structs name (``forbid_unknown_fields``), so the event
  written from them is the upstream's, less the stripped fields (its keys in the
  structs' order). It is used only where the log-probs are to be nulled: the
  entries, which it does not keep, are never written.

Absent fields stay ``UNSET`` (never written), so null and absent keep apart.
Anything the structs refuse (a field of another type, an event that is no
object, a field ``REWRITE`` does not know) goes the general way, orjson and
``StreamAssembler.add``, which this path must match: ``add_typed`` there makes
the same state from the same event (tests/proxy/test_proxy_chunks.py).
"""

# No ``from __future__ import annotations``: msgspec reads the structs' annotations,
# which name classes local to ``_structs``.
from collections.abc import Iterator
from typing import Annotated, Any

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from agentworld.proxy.translate.chat_form import Piece

# A 64-bit index (msgspec's bounds stop there; orjson reads wider ints as floats): any
# other goes the general way, which makes the same choice of it.
Index = Annotated[int, Meta(ge=-(2**63), le=2**63 - 1)]

# What a typed reading raises for an event it does not take (ValidationError is a
# DecodeError; invalid UTF-8 is a UnicodeDecodeError).
NOT_TYPED = (msgspec.DecodeError, UnicodeDecodeError)


class Entry(Struct):
    """A log-prob entry: its value only (the token, its bytes and top log-probs skipped)."""

    logprob: Any = None


class Logprobs(Struct):
    content: list[Entry] | UnsetType | None = UNSET


def _structs(strict: bool) -> type[Struct]:
    """The chunk, choice and delta structs; ``strict``: unknown fields refused."""

    class Delta(Struct, forbid_unknown_fields=strict):
        role: Any = UNSET
        content: Any = UNSET
        reasoning: Any = UNSET
        reasoning_content: Any = UNSET
        tool_calls: Any = UNSET

    class Choice(Struct, forbid_unknown_fields=strict):
        index: Index | UnsetType = UNSET
        delta: Delta | UnsetType | None = UNSET
        logprobs: Logprobs | UnsetType | None = UNSET
        finish_reason: Any = UNSET
        stop_reason: Any = UNSET
        token_ids: Any = UNSET

    class Chunk(Struct, forbid_unknown_fields=strict):
        id: Any = UNSET
        object: Any = UNSET
        created: Any = UNSET
        model: Any = UNSET
        choices: list[Choice] | UnsetType | None = UNSET
        usage: Any = UNSET
        system_fingerprint: Any = UNSET
        prompt_token_ids: Any = UNSET
        error: Any = UNSET  # an error event: the general way reads it

        def get(self, key: str, default: Any = None) -> Any:
            """A field as ``dict.get`` gives a parsed event's (UNSET: absent): what a
            translator reads of a stream's first event."""
            value = getattr(self, key, UNSET)
            return default if value is UNSET else value

    return Chunk


READ = msgspec.json.Decoder(_structs(strict=False)).decode
REWRITE = msgspec.json.Decoder(_structs(strict=True)).decode
encode = msgspec.json.Encoder().encode


def first_choice_pieces(chunk: Any) -> Iterator[Piece]:
    """``chat_form.first_choice_pieces`` of a chunk read into the structs."""
    for c in chunk.choices or ():
        if c.index is not UNSET and c.index != 0:
            continue
        delta = c.delta
        if delta is None or delta is UNSET:
            yield Piece("", "", (), _value(c.finish_reason), _value(c.stop_reason))
            continue
        reasoning = delta.reasoning
        if reasoning is None or reasoning is UNSET:
            reasoning = delta.reasoning_content
        text, calls = delta.content, delta.tool_calls
        yield Piece(
            reasoning if reasoning.__class__ is str else "",
            text if text.__class__ is str else "",
            (calls or ()) if calls is not UNSET else (),
            _value(c.finish_reason),
            _value(c.stop_reason),
        )


def _value(v: Any) -> Any:
    return None if v is UNSET else v


def strip(chunk: Any, token_ids: bool) -> None:
    """``ChatAdapter.strip`` for a ``REWRITE`` chunk whose log-probs are to be nulled (and,
    with ``token_ids``, its ids removed)."""
    if token_ids:
        chunk.prompt_token_ids = UNSET
    for c in chunk.choices or ():
        if token_ids:
            c.token_ids = UNSET
        if c.logprobs is not UNSET:
            c.logprobs = None
