"""Incremental detokenization: each streamed token decodes a few tokens, not the whole answer.

Re-decoding every output id for each new token is O(n²): a 4,000-token stream spent about
1.5 s of the event loop in ``tokenizer.decode`` (1.7 s measured in a server), stalling every
other client's stream; this takes 0.04 s (``python bench/serve.py --detok 4000``).

As vLLM's ``detokenize_incrementally``: decode a window that starts at the tokens last
emitted (``prefix``) and send what it adds to their text, so a tokenizer that strips a
leading space (sentencepiece's ``▁``) strips it from both decodes alike; text ending in
U+FFFD (a character whose UTF-8 bytes are split across tokens) is held until the rest
arrives. Skipped special tokens are dropped before the window, so a window never begins
with one; a run of byte-fallback tokens is never split between windows (see `TokenSets`).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

# A UTF-8 sequence cut short decodes to this; wait for the token that completes it.
_PARTIAL = "\ufffd"


def decode_text(tokenizer: Any, ids: list[int]) -> str:
    """The text of output ids, as every answer reports it: special tokens skipped, and no
    ``clean_up_tokenization_spaces`` (vLLM's text keeps them; cleaning would also make
    the text of a prefix stop being a prefix of the text)."""
    return tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)


@dataclass(frozen=True)
class TokenSets:
    """The ids incremental decoding treats apart, found once per tokenizer."""

    # Dropped by ``skip_special_tokens``: the special tokens, and added tokens marked
    # special (SmolLM2's ``<repo_name>`` and the like are in no special-token list).
    skipped: frozenset[int]
    # Byte-fallback tokens (``<0xE4>``, sentencepiece's): the decoder joins a run of them
    # before decoding it as UTF-8, and an invalid run turns every byte into U+FFFD, even
    # a valid ``<0x24>`` before it, so a window never ends inside a run.
    byte_fallback: frozenset[int]


_SETS: weakref.WeakKeyDictionary[Any, TokenSets] = weakref.WeakKeyDictionary()


def token_sets(tokenizer: Any) -> TokenSets:
    """`TokenSets` of ``tokenizer``, cached while it lives."""
    found = _SETS.get(tokenizer)
    if found is None:
        added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
        marked = {i for i, tok in added.items() if getattr(tok, "special", False)}
        byte_ids = set()
        for b in range(256):
            name = f"<0x{b:02X}>"
            i = tokenizer.convert_tokens_to_ids(name)
            # A missing token maps to the unknown token's id, or None.
            if isinstance(i, int) and tokenizer.convert_ids_to_tokens(i) == name:
                byte_ids.add(i)
        found = TokenSets(
            frozenset(tokenizer.all_special_ids) | frozenset(marked), frozenset(byte_ids)
        )
        _SETS[tokenizer] = found
    return found


class IncrementalDetokenizer:
    """One answer's text, token by token; the pieces ``add`` returns concatenate to
    ``decode_text`` of the ids so far, less any trailing partial character."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        sets = token_sets(tokenizer)
        self._skip, self._bytes = sets.skipped, sets.byte_fallback
        self._window: list[int] = []  # ids from the prefix on; [:_read] are already sent
        self._read = 0
        self._prefix_text = ""  # decode_text(self._window[: self._read])

    def add(self, token_id: int) -> str:
        """The text ``token_id`` completes: '' for a skipped special token, or while the
        text ends in a partial character or a run of byte-fallback tokens."""
        if token_id in self._skip:
            return ""
        self._window.append(token_id)
        if token_id in self._bytes:
            return ""  # its run is decoded whole, once a token of another kind ends it
        text = decode_text(self._tokenizer, self._window)
        if len(text) <= len(self._prefix_text) or text.endswith(_PARTIAL):
            return ""
        new = text[len(self._prefix_text) :]
        # The next window starts at the tokens whose text this call sent.
        self._window = self._window[self._read :]
        self._read = len(self._window)
        self._prefix_text = decode_text(self._tokenizer, self._window)
        return new


class StopStrings:
    """Finds the first of ``stops`` (in their order, as vLLM does) to appear in a growing
    answer, reading each new character once plus a tail one stop long."""

    def __init__(self, tokenizer: Any, stops: list[str]) -> None:
        self._stops = stops
        self._detok = IncrementalDetokenizer(tokenizer)
        self._keep = max(len(s) for s in stops) - 1  # a stop may begin this far back
        self._tail = ""

    def add(self, token_id: int) -> str | None:
        """The stop string the text reached with ``token_id``, or None."""
        new = self._detok.add(token_id)
        if not new:
            return None
        # An earlier stop would have ended the answer, so only a match reaching into `new`
        # can be first; the tail is shorter than any stop plus one character.
        window = self._tail + new
        for s in self._stops:
            if s in window:
                return s
        self._tail = window[len(window) - self._keep :] if self._keep else ""
        return None
