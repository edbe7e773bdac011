"""Short garbage-collector pauses for the proxy process: what survives a young collection is frozen.

Every event-loop stall over 3 ms of `aw proxy` at concurrency 1 was a cyclic
collection (loop lag and ``gc.callbacks`` logged side by side, 40 s of
bench/proxy_hop.py's latency load): each call leaves a few objects that live as
long as its trajectory stays open (the trajectory, its continuation keys and
step ids), so the older generations fill with the registry, and CPython walks
all of them again in every collection of those generations: young collections
of 4 to 20 ms, a middle one of 117 ms after 35 s, full ones of ~0.5 s at
100,000 open trajectories. Nothing of that is garbage: in steady state no
collection found any (the proxy's objects die by reference counting).

So after each young collection its survivors are frozen (``gc.freeze``): no
later collection walks them, and young collections stay the only ones, each
bounded by ``young_threshold`` allocations. Frozen objects are still freed by
reference counting when the registry drops them; only cyclic garbage among them
(an exception kept in a cycle by a call that was in flight during a collection)
would never be reclaimed, so a watchdog thread unfreezes and collects everything
once the process outgrows its limit (twice the resident memory the last such
collection left, or that plus ``margin_bytes``): one long pause where the live
heap has doubled, none while it holds steady. The watchdog reads the resident
size from /proc, not ``gc.get_freeze_count()``: that walks the frozen list,
~10 ms with the GIL held at a million objects.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

# Objects allocated (net) before a young collection: ~6 a call survive, so a
# collection every ~800 calls, each pausing about a millisecond.
YOUNG_THRESHOLD = 5_000
MARGIN_BYTES = 1 << 30  # ~100,000 open trajectories' worth of live objects and more
CHECK_EVERY_S = 30.0


def resident_bytes() -> int:
    """This process's resident memory (Linux /proc; elsewhere the frozen object count)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return gc.get_freeze_count()


class GcPauses:
    """The collector policy of one long-running process (``install`` once, at start-up)."""

    def __init__(
        self,
        *,
        young_threshold: int = YOUNG_THRESHOLD,
        margin: int = MARGIN_BYTES,
        check_every_s: float = CHECK_EVERY_S,
        size: Callable[[], int] = resident_bytes,
    ) -> None:
        self.young_threshold = young_threshold
        self.margin = margin  # in ``size``'s unit
        self.check_every_s = check_every_s
        self.size = size  # what outgrowing the limit is measured in
        self.limit = 0  # the ``size`` beyond which ``reclaim`` runs
        self.reclaims = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._thresholds: tuple[int, int, int] | None = None  # the ones before ``install``

    def install(self, *, watchdog: bool = True) -> None:
        """Collect and freeze what start-up made, collect young objects every
        ``young_threshold`` allocations and freeze their survivors; with ``watchdog``, a
        daemon thread checks the frozen heap against its limit every ``check_every_s``."""
        gc.collect()
        gc.freeze()
        self._set_limit()
        self._thresholds = gc.get_threshold()
        _, gen1, gen2 = self._thresholds
        gc.set_threshold(self.young_threshold, gen1, gen2)
        if self._after_collection not in gc.callbacks:
            gc.callbacks.append(self._after_collection)
        if watchdog and self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="aw-gc-watch", daemon=True)
            self._thread.start()

    def uninstall(self) -> None:
        """Back to the collector's settings before ``install`` (tests); what is frozen is
        unfrozen."""
        self._stop.set()
        if self._after_collection in gc.callbacks:
            gc.callbacks.remove(self._after_collection)
        if self._thresholds is not None:
            gc.set_threshold(*self._thresholds)
        gc.unfreeze()

    def _after_collection(self, phase: str, info: dict[str, Any]) -> None:
        # Runs in whichever thread allocated last, with the GIL held: freezing is a
        # list splice, constant time however many objects it moves.
        if phase == "stop" and info["generation"] == 0:
            gc.freeze()

    def over_limit(self) -> bool:
        """Whether the process outgrew its limit (cyclic garbage may be piling up)."""
        return self.size() > self.limit

    def reclaim(self) -> int:
        """Unfreeze everything and collect it all (one long pause); freeze what lives on and
        set the next limit from it. Returns the objects collected."""
        t0 = time.perf_counter()
        before = gc.get_freeze_count()
        gc.unfreeze()
        found = gc.collect()
        gc.freeze()
        self._set_limit()
        self.reclaims += 1
        log.info(
            "gc: %d frozen objects checked, %d collected in %.0f ms; next reclaim above %d",
            before,
            found,
            (time.perf_counter() - t0) * 1000,
            self.limit,
        )
        return found

    def _set_limit(self) -> None:
        live = self.size()
        self.limit = max(2 * live, live + self.margin)

    def _watch(self) -> None:
        while not self._stop.wait(self.check_every_s):
            if self.over_limit():
                self.reclaim()
