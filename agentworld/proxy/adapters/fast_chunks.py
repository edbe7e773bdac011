"""The compiled reading of streamed chat events (``agentworld/proxy/_chunks.c``), where built.

Reading a streamed call's events is most of what the proxy does for it, and in
Python it is about 35,000 instructions an event, mostly the interpreter and the
objects it makes (``bench/proxy_instructions.py --ablate noparse``: a 14-event
vLLM chat stream cost 1.56 M instructions a call, 1.10 M with its events unread).
The C reader takes a whole upstream read in one call and makes the assembler's
state directly (the call: 1.16 M; of the log-probs, the values only, into the
choice's ``LogprobValues``), and the events it does not take with
certainty go the Python way, which stays the definition (``openai_chunks``,
``StreamAssembler.add_typed``; tests/proxy/test_fast_chunks.py holds the two to
the same results).

The extension is optional, as aiohttp's are: ``Reader`` is None where it was not
built (no compiler at install) or where ``AW_NO_EXTENSIONS`` is set (to anything
but ``0``; read once, at import, as aiohttp reads ``AIOHTTP_NO_EXTENSIONS``), and
the proxy then reads every event in Python.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from agentworld.proxy.adapters.openai_records import LogprobValues
from agentworld.proxy.sse import StreamAssembler, _Choice

Reader: Any = None
NO_EXTENSIONS = os.environ.get("AW_NO_EXTENSIONS", "") not in ("", "0")
if not NO_EXTENSIONS:
    try:
        from agentworld.proxy._chunks import Reader
    except ImportError:  # not built: the Python path
        pass

# read(events, start, parts) -> (stop, done): see ``reader``.
Read = Callable[[list[bytes], int, list[bytes]], tuple[int, bool]]


def reader(
    asm: StreamAssembler, *, rewrite: bool, strip_ids: bool, max_payload: int
) -> Read | None:
    """The C reading of one stream's events into ``asm``, or None without the extension.

    ``read(events, start, parts)`` takes ``events[start:]`` up to the first it does
    not read with certainty, returns that one's position (``len(events)`` when it
    took them all) and whether ``data: [DONE]`` came among them, appends the agent's
    bytes of those it took to ``parts`` (one bytes a call), and adds them to ``asm``
    as ``add_typed`` would. ``rewrite``: the ``REWRITE`` reading (a field the structs
    do not name goes to Python; each choice's ``logprobs`` is written null, and with
    ``strip_ids`` the token ids are cut). The agent's copy is the upstream's bytes
    with those cuts, where the Python path writes msgspec's encoding of the structs:
    the same JSON, key order and spacing aside. An event of ``max_payload`` bytes or
    more goes to Python (``answer_json`` keeps long prompt ids as bytes).
    """
    if Reader is None:
        return None
    strip = rewrite and strip_ids
    return Reader(asm, _Choice, LogprobValues, rewrite, strip, rewrite, max_payload).read
