"""The proxy's trajectory lifecycle API, seen from `aw run`: create, complete, health.

`aw run` talks to the proxy over HTTP only, so an in-process proxy and a
remote `aw proxy` are driven the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aiohttp

from agentworld.errors import UpstreamError
from agentworld.server_url import server_base


class ProxyHTTPError(UpstreamError):
    """The proxy answered with an HTTP error status (``status``)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def proxy_base(url: str, where: str = "--proxy") -> str:
    """A running proxy's address as ``aw run`` takes it (an agent's base URL, pasted, too)."""
    return server_base(url, where, "http://127.0.0.1:4000")


@dataclass(frozen=True)
class TrajectoryHandle:
    """A trajectory the proxy opened: its id and the base URLs bound to it."""

    id: str
    base_url: str  # OpenAI-compatible, ends in /v1
    anthropic_base_url: str


class ProxyClient:
    """Async client of one proxy's lifecycle endpoints (use as an async context manager)."""

    def __init__(self, url: str, *, token: str | None = None, timeout_s: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> ProxyClient:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        self._session = aiohttp.ClientSession(headers=headers, timeout=self._timeout)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        assert self._session is not None, "use ProxyClient as an async context manager"
        url = self.url + path
        try:
            async with self._session.request(method, url, json=body) as resp:
                text = await resp.text()
                if resp.status >= 400:
                    raise ProxyHTTPError(
                        f"proxy {method} {url}: HTTP {resp.status}: {text[:300]}", resp.status
                    )
                try:
                    return await resp.json(content_type=None) if text else {}
                except ValueError:
                    raise UpstreamError(f"proxy {method} {url}: not JSON: {text[:200]}") from None
        except aiohttp.ClientError as exc:
            raise UpstreamError(f"proxy {method} {url}: {exc}") from None
        except TimeoutError:
            raise UpstreamError(f"proxy {method} {url}: timed out") from None

    async def health(self) -> dict[str, Any]:
        """GET /aw/health (raises UpstreamError when the proxy is not there)."""
        return await self._call("GET", "/aw/health")

    async def create_trajectory(
        self,
        *,
        agent: str,
        dataset: str | None = None,
        split: str | None = None,
        task: str | None = None,
        group: str | None = None,
        metadata: dict[str, Any] | None = None,
        trajectory: str | None = None,
        seed: int | None = None,
    ) -> TrajectoryHandle:
        """POST /aw/trajectories: open a trajectory and get the base URLs bound to it.

        ``trajectory`` is the id to give it (the proxy mints one otherwise): a caller
        that knows the id can still end the trajectory if it gives up on the answer.
        ``seed`` seeds the sampling of each of its calls (the proxy derives one a step).
        """
        body = {
            "trajectory": trajectory,
            "agent": agent,
            "dataset": dataset,
            "split": split,
            "task": task,
            "group": group,
            "metadata": metadata,
            "seed": seed,
        }
        data = await self._call(
            "POST", "/aw/trajectories", {k: v for k, v in body.items() if v is not None}
        )
        try:
            tid = data["trajectory"]
            base_url = data["base_url"]
        except (KeyError, TypeError):
            raise UpstreamError(
                f"proxy POST /aw/trajectories: unexpected answer {str(data)[:200]}"
            ) from None
        return TrajectoryHandle(
            id=tid,
            base_url=base_url,
            anthropic_base_url=data.get("anthropic_base_url") or base_url.removesuffix("/v1"),
        )

    async def complete(
        self,
        trajectory: str,
        *,
        status: str,
        reward: float | None = None,
        error: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """POST /aw/trajectories/<id>/complete: the proxy writes the end record.

        The proxy writes it once the trajectory's calls in flight have recorded their
        steps; it is asked to wait for that no longer than half this client's timeout
        (then it answers that the end is pending, and writes it all the same), so a
        call still running upstream does not fail the episode's ending.
        """
        body = {"status": status, "reward": reward, "error": error, "metadata": metadata}
        body["wait_s"] = self.timeout_s / 2
        return await self._call(
            "POST",
            f"/aw/trajectories/{trajectory}/complete",
            {k: v for k, v in body.items() if v is not None},
        )
