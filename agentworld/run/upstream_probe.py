"""Before `aw run` starts its episodes: is anything listening at the agent's model server?

Forgetting to start `aw serve` (or a vLLM server) used to show as every episode
failing with the SDK's ``InternalServerError``. A TCP connect to each upstream URL
(no request, so no API key and no protocol involved) tells a server that is not
there apart from one that answers: when none of an agent's URLs takes a connection,
the run stops before its first episode and says where it looked.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Sequence
from urllib.parse import urlsplit

from agentworld.errors import UpstreamError

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 5.0
EMBEDDED_PORT = 8000  # `aw serve`'s default port, where the `aw init` agents point


async def _refused(url: str, timeout_s: float) -> str | None:
    """Why a TCP connection to ``url``'s host and port fails, or None when one opens."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(parts.hostname, port), timeout_s)
    except TimeoutError:
        return f"no answer in {timeout_s:g} s"
    except ConnectionRefusedError:
        return "connection refused"
    except socket.gaierror:
        return f"cannot resolve {parts.hostname}"
    except OSError as exc:
        return exc.strerror or str(exc) or type(exc).__name__
    writer.close()
    return None


async def check_upstreams(
    agent: str, urls: Sequence[str], where: str, *, timeout_s: float = PROBE_TIMEOUT_S
) -> None:
    """Raise UpstreamError when none of ``urls`` takes a connection; warn for each that
    does not when others do (the proxy sends calls to those that answer)."""
    why = await asyncio.gather(*(_refused(u, timeout_s) for u in urls))
    down = [(u, w) for u, w in zip(urls, why, strict=True) if w is not None]
    if not down:
        return
    if len(down) < len(urls):
        for u, w in down:
            log.warning("agent %r: upstream %s does not answer (%s); using the others", agent, u, w)
        return
    listed = "; ".join(f"{u} ({w})" for u, w in down)
    hint = "start its model server, or point `upstream` in agents.toml at a running one"
    local = {"127.0.0.1", "localhost", "::1"}
    if any(urlsplit(u).hostname in local and urlsplit(u).port == EMBEDDED_PORT for u, _ in down):
        hint = "start the model server (`aw serve` serves the embedded model there)"
    raise UpstreamError(
        f"{where}: agent {agent!r}: nothing answers at its upstream: {listed}; {hint}"
    )
