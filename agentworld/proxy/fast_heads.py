"""The compiled reading of HTTP heads (``agentworld/proxy/_heads.c``), where built.

A proxied call has two heads to read, the agent's request and the upstream's
answer; in Python they cost ~38,000 and ~28,000 instructions (callgrind), where
the bare aiohttp hop the proxy is held to reads both in C. The functions here
are the fast paths of two Python functions that stay the definitions,
``front.http1.parse_head_python`` and ``upstream.client.parse_response_head_python``
(tests/proxy/test_fast_heads.py holds each pair to the same results):

- ``parse_request(head)``: None where the front does not serve the head, else
  ``(path, query, pairs, content_length, keep_alive)``;
- ``parse_response(block)``: ``(status, reason, version, pairs)`` of an ordinary
  answer (``pairs`` None for a 1xx), None for anything else, which the
  definition then reads (and words its error);
- ``chunk_run(data, pos)``: the usual run of a chunked body (whole chunks, one an
  event of a stream), for ``UpstreamResponse._decode_chunks``, whose loop reads on
  from where the run ends.

Both are None where the extension was not built (no compiler at install) or where
``AW_NO_EXTENSIONS`` is set (to anything but ``0``; read once, at import, as
``fast_chunks`` reads it), and the proxy then reads every head in Python.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["NO_EXTENSIONS", "chunk_run", "parse_request", "parse_response"]

# parse_request(head) -> (path, query, pairs, content_length, keep_alive) | None
# parse_response(block) -> (status, reason, version, pairs | None) | None
parse_request: Any = None
parse_response: Any = None
# chunk_run(data, pos) -> (the data of the whole chunks from pos, joined; where they end)
chunk_run: Any = None
NO_EXTENSIONS = os.environ.get("AW_NO_EXTENSIONS", "") not in ("", "0")
if not NO_EXTENSIONS:
    try:
        from agentworld.proxy._heads import chunk_run, parse_request, parse_response
    except ImportError:  # not built: the Python path
        pass
