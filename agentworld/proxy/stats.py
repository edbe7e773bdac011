"""Counters the proxy keeps: JSON for /aw/stats and Prometheus metrics for /metrics.

Each app gets its own CollectorRegistry, so several proxies (tests, `aw run`)
can live in one process.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector

RATE_WINDOW_S = 60.0


class _Rate:
    """Events per second over the last minute (one bucket per second, bounded)."""

    def __init__(self) -> None:
        self._buckets: deque[list[float]] = deque(maxlen=int(RATE_WINDOW_S) + 1)

    def add(self, n: float = 1.0, now: float | None = None) -> None:
        sec = int(now if now is not None else time.monotonic())
        if self._buckets and self._buckets[-1][0] == sec:
            self._buckets[-1][1] += n
        else:
            self._buckets.append([sec, n])

    def per_s(self, now: float | None = None) -> float:
        now = now if now is not None else time.monotonic()
        total = sum(n for sec, n in self._buckets if now - sec <= RATE_WINDOW_S)
        return total / RATE_WINDOW_S


class _Lags:
    """The event loop's lateness samples of the last minute (bounded: one every check)."""

    def __init__(self) -> None:
        self._samples: deque[tuple[float, float]] = deque(maxlen=4096)

    def add(self, lag_s: float, now: float) -> None:
        self._samples.append((now, lag_s))

    def summary(self, now: float) -> dict[str, Any]:
        recent = sorted(lag for t, lag in self._samples if now - t <= RATE_WINDOW_S)
        if not recent:
            return {"lag_ms_p50": None, "lag_ms_max": None, "checks": 0}
        return {
            "lag_ms_p50": round(recent[len(recent) // 2] * 1000, 3),
            "lag_ms_max": round(recent[-1] * 1000, 3),
            "checks": len(recent),
        }


class ProxyStats:
    """Everything /aw/stats and /metrics report."""

    def __init__(self) -> None:
        self.started = time.time()
        self.requests = 0
        self.steps = {"ok": 0, "error": 0, "cancelled": 0}
        self.tokens = {"prompt": 0, "completion": 0}
        self.errors = {
            "bad_request": 0,
            "upstream": 0,
            "record": 0,
            "internal": 0,
            "auth": 0,
            "agent_timeout": 0,  # an agent kept the proxy waiting (agent_conn.py)
        }
        self.trajectories_done = 0
        self.whitebox_steps = 0
        self._step_rate = _Rate()
        self._token_rate = _Rate()
        self._lags = _Lags()
        self.registry = CollectorRegistry()
        r = self.registry
        # CPU seconds, memory, open files: a proxy near one CPU second per second is CPU-bound.
        ProcessCollector(namespace="aw_proxy", registry=r)
        self.m_requests = Counter(
            "aw_proxy_requests",
            "HTTP requests by route kind and status",
            ["route", "status"],
            registry=r,
        )
        self.m_steps = Counter("aw_proxy_steps", "Step records by status", ["status"], registry=r)
        self.m_tokens = Counter("aw_proxy_tokens", "Tokens recorded", ["kind"], registry=r)
        self.m_errors = Counter("aw_proxy_errors", "Errors by kind", ["kind"], registry=r)
        self.m_open = Gauge("aw_proxy_trajectories_open", "Open trajectories", registry=r)
        self.m_done = Counter(
            "aw_proxy_trajectories_ended", "Ended trajectories", ["status"], registry=r
        )
        self.m_policy = Gauge("aw_proxy_policy_version", "Current policy version", registry=r)
        self.m_upstream_s = Histogram(
            "aw_proxy_upstream_seconds",
            "Upstream time per generation request",
            buckets=(0.005, 0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
            registry=r,
        )
        self.m_loop_lag = Histogram(
            "aw_proxy_event_loop_lag_seconds",
            "How late the event loop ran a timer: high when the proxy is CPU-bound",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
            registry=r,
        )

        # Bound children once: labels() lookups cost more than the increments on the hot path.
        self._c_requests: dict[tuple[str, int], Any] = {}
        self._c_steps = {s: self.m_steps.labels(s) for s in self.steps}
        self._c_prompt = self.m_tokens.labels("prompt")
        self._c_completion = self.m_tokens.labels("completion")

    def request(self, route: str, status: int) -> None:
        self.requests += 1
        child = self._c_requests.get((route, status))
        if child is None:
            child = self._c_requests[(route, status)] = self.m_requests.labels(route, str(status))
        child.inc()

    def step(self, status: str, prompt_tokens: int = 0, completion_tokens: int = 0) -> None:
        self.steps[status] = self.steps.get(status, 0) + 1
        self._c_steps[status].inc()
        self._step_rate.add()
        if prompt_tokens:
            self.tokens["prompt"] += prompt_tokens
            self._c_prompt.inc(prompt_tokens)
        if completion_tokens:
            self.tokens["completion"] += completion_tokens
            self._c_completion.inc(completion_tokens)
            self._token_rate.add(completion_tokens)

    def loop_lag(self, lag_s: float) -> None:
        """One check of how late the event loop ran a timer."""
        self._lags.add(lag_s, time.monotonic())
        self.m_loop_lag.observe(lag_s)

    def error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1
        self.m_errors.labels(kind).inc()

    def ended(self, status: str) -> None:
        self.trajectories_done += 1
        self.m_done.labels(status).inc()

    def snapshot(self, *, open_trajectories: int, policy_version: int) -> dict[str, Any]:
        self.m_open.set(open_trajectories)
        self.m_policy.set(policy_version)
        return {
            "uptime_s": round(time.time() - self.started, 3),
            "requests": self.requests,
            "steps": {**self.steps, "total": sum(self.steps.values())},
            "whitebox_steps": self.whitebox_steps,
            "trajectories": {"open": open_trajectories, "done": self.trajectories_done},
            "tokens": {**self.tokens, "total": sum(self.tokens.values())},
            "errors": {**self.errors, "total": sum(self.errors.values())},
            "rates": {
                "steps_per_s": round(self._step_rate.per_s(), 3),
                "completion_tokens_per_s": round(self._token_rate.per_s(), 3),
                "window_s": RATE_WINDOW_S,
            },
            # Over the same window; the process's CPU seconds include the pool's threads.
            "event_loop": self._lags.summary(time.monotonic()),
            "process_cpu_s": round(time.process_time(), 3),
            "policy_version": policy_version,
        }
