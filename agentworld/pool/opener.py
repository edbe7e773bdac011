"""Opening a pool from what a user typed: a folder, or an object-store URL.

``Pool.open`` opens a pool folder; a URL (``s3://bucket/prefix``, ``gs://``, ``az://``,
``file://``) is a ``RemotePool``, read through a local mirror. This module sits above
both, so the pool's base class never imports its subclass (no import cycle), and every
command that takes ``--pool`` opens it here.
"""

from __future__ import annotations

import os

from agentworld.pool import Pool
from agentworld.pool.remote_pool import RemotePool
from agentworld.pool.remote_store import remote_url


def open_pool(path: str | os.PathLike[str], *, recover: bool = True, log_cuts: bool = True) -> Pool:
    """The pool at ``path``: a folder (``Pool.open``, recovering dead writers unless
    ``recover`` is False; ``log_cuts`` as there), or an object-store URL (``RemotePool``,
    read-only)."""
    url = remote_url(path)
    if url is not None:
        return RemotePool.open_url(url)
    return Pool.open(path, recover=recover, log_cuts=log_cuts)
