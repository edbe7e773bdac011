"""Counters the proxy keeps: JSON for /aw/stats and Prometheus metrics for /metrics.

The counts are plain numbers, bumped on the request path without locks or
metric objects; ``/metrics`` turns them into Prometheus families when it is
scraped (a collector), so nothing is counted twice. Each app gets its own
CollectorRegistry, so several proxies (tests, `aw run`) can live in one process.
"""

from __future__ import annotations

import bisect
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString

RATE_WINDOW_S = 60.0


def rate_window(started: float, now: float) -> float:
    """The seconds a rate is taken over: the last minute, or the time since the start when
    shorter (a proxy up for 10 s that served 10 steps did 1 step/s, not 1/6), at least 1."""
    return max(1.0, min(RATE_WINDOW_S, now - started))


class _Rate:
    """Events per second over the last minute (one bucket per second, bounded)."""

    def __init__(self, started: float | None = None) -> None:
        self._buckets: deque[list[float]] = deque(maxlen=int(RATE_WINDOW_S) + 1)
        self.started = started if started is not None else time.monotonic()

    def add(self, n: float = 1.0, now: float | None = None) -> None:
        sec = int(now if now is not None else time.monotonic())
        if self._buckets and self._buckets[-1][0] == sec:
            self._buckets[-1][1] += n
        else:
            self._buckets.append([sec, n])

    def per_s(self, now: float | None = None) -> float:
        now = now if now is not None else time.monotonic()
        total = sum(n for sec, n in self._buckets if now - sec <= RATE_WINDOW_S)
        return total / rate_window(self.started, now)


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


class _Histogram:
    """Observations by upper bound (Prometheus' cumulative buckets made at scrape time)."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last: over every bound (+Inf)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def family(self, name: str, doc: str) -> HistogramMetricFamily:
        buckets, total = [], 0
        for bound, n in zip((*map(floatToGoString, self.bounds), "+Inf"), self.counts, strict=True):
            total += n
            buckets.append((bound, total))
        return HistogramMetricFamily(name, doc, buckets=buckets, sum_value=self.sum)


UPSTREAM_BUCKETS_S = (0.005, 0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
LOOP_LAG_BUCKETS_S = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


class ProxyStats:
    """Everything /aw/stats and /metrics report."""

    def __init__(self) -> None:
        self.started = time.time()
        self.requests = 0
        self.by_route: dict[tuple[str, int], int] = {}  # (route kind, HTTP status) -> requests
        # "lost": answered, then lost to a failed pool write (batched mode); no longer
        # counted under the status it was answered with.
        self.steps = {"ok": 0, "error": 0, "cancelled": 0, "lost": 0}
        self.tokens = {"prompt": 0, "completion": 0}
        self.errors = {
            "bad_request": 0,
            "upstream": 0,
            "record": 0,
            "upstream_invalid": 0,  # a step recorded without the upstream's malformed parts
            "internal": 0,
            "auth": 0,
            "agent_timeout": 0,  # an agent kept the proxy waiting (agent_conn.py)
            "record_refused": 0,  # a call refused while the pool could not be written
        }
        self.trajectories_done = 0
        self.ended_by: dict[str, int] = {}  # end status -> trajectories
        self.whitebox_steps = 0
        self.upstream_s = _Histogram(UPSTREAM_BUCKETS_S)
        self.loop_lag_s = _Histogram(LOOP_LAG_BUCKETS_S)
        self._open = 0  # as of the last snapshot (taken by each /aw/stats and /metrics)
        self._policy = 0
        self._step_rate = _Rate()
        self._token_rate = _Rate()
        self._lags = _Lags()
        self.registry = CollectorRegistry()
        # CPU seconds, memory, open files: a proxy near one CPU second per second is CPU-bound.
        ProcessCollector(namespace="aw_proxy", registry=self.registry)
        self.registry.register(self)  # ``collect`` below

    def request(self, route: str, status: int) -> None:
        self.requests += 1
        key = (route, status)
        self.by_route[key] = self.by_route.get(key, 0) + 1

    def step(self, status: str, prompt_tokens: int = 0, completion_tokens: int = 0) -> None:
        self.steps[status] = self.steps.get(status, 0) + 1
        self._step_rate.add()
        if prompt_tokens:
            self.tokens["prompt"] += prompt_tokens
        if completion_tokens:
            self.tokens["completion"] += completion_tokens
            self._token_rate.add(completion_tokens)

    def lost_step(self, status: str) -> None:
        """A step counted under ``status`` when it was answered was lost to a failed write."""
        if self.steps.get(status, 0) > 0:
            self.steps[status] -= 1
        self.steps["lost"] += 1

    def upstream(self, seconds: float) -> None:
        """One generation call's time at the upstream (first byte sent to last byte read)."""
        self.upstream_s.observe(seconds)

    def loop_lag(self, lag_s: float) -> None:
        """One check of how late the event loop ran a timer."""
        self._lags.add(lag_s, time.monotonic())
        self.loop_lag_s.observe(lag_s)

    def error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1

    def ended(self, status: str) -> None:
        self.trajectories_done += 1
        self.ended_by[status] = self.ended_by.get(status, 0) + 1

    def collect(self) -> Iterator[Metric]:
        """The Prometheus families, made from the counts at scrape time."""
        requests = CounterMetricFamily(
            "aw_proxy_requests",
            "HTTP requests by route kind and status",
            labels=["route", "status"],
        )
        for (route, status), n in sorted(self.by_route.items()):
            requests.add_metric([route, str(status)], n)
        yield requests
        for name, doc, label, counts in (
            ("aw_proxy_steps", "Step records by status", "status", self.steps),
            ("aw_proxy_tokens", "Tokens recorded", "kind", self.tokens),
            ("aw_proxy_errors", "Errors by kind", "kind", self.errors),
            ("aw_proxy_trajectories_ended", "Ended trajectories", "status", self.ended_by),
        ):
            family = CounterMetricFamily(name, doc, labels=[label])
            for value, n in counts.items():
                family.add_metric([value], n)
            yield family
        yield GaugeMetricFamily("aw_proxy_trajectories_open", "Open trajectories", self._open)
        yield GaugeMetricFamily("aw_proxy_policy_version", "Current policy version", self._policy)
        yield self.upstream_s.family(
            "aw_proxy_upstream_seconds", "Upstream time per generation request"
        )
        yield self.loop_lag_s.family(
            "aw_proxy_event_loop_lag_seconds",
            "How late the event loop ran a timer: high when the proxy is CPU-bound",
        )

    def snapshot(self, *, open_trajectories: int, policy_version: int) -> dict[str, Any]:
        self._open, self._policy = open_trajectories, policy_version
        now = time.monotonic()
        return {
            "uptime_s": round(time.time() - self.started, 3),
            "requests": self.requests,
            "steps": {**self.steps, "total": sum(self.steps.values())},
            "whitebox_steps": self.whitebox_steps,
            "trajectories": {"open": open_trajectories, "done": self.trajectories_done},
            "tokens": {**self.tokens, "total": sum(self.tokens.values())},
            "errors": {**self.errors, "total": sum(self.errors.values())},
            "rates": {
                "steps_per_s": round(self._step_rate.per_s(now), 3),
                "completion_tokens_per_s": round(self._token_rate.per_s(now), 3),
                "window_s": round(rate_window(self._step_rate.started, now), 3),
            },
            # Over the last minute; the process's CPU seconds include the pool's threads.
            "event_loop": self._lags.summary(now),
            "process_cpu_s": round(time.process_time(), 3),
            "policy_version": policy_version,
        }
