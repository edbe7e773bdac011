"""What the proxy's open trajectories cost as they pile up: per call, and per idle sweep.

Agents that send neither a trajectory id nor a continued conversation (one-shot
calls: evaluations, single-turn tasks) open a trajectory per call, and it stays
open until the idle timeout (15 minutes by default) or the cap on open
trajectories (100,000) closes it. At 112 such calls a second the proxy sits at
the cap. This measures, in-process, the registry work at ``--small`` open
trajectories against the same work at ``--large`` (the cap), side by side:

- a new call: open a trajectory, give it one of four upstream URLs (trajectory
  affinity), and mark it active as the call starts and ends;
- the idle sweep (every 5 s by default): the trajectories idle past the
  timeout (none) and those over the cap (ten).

The same two at ``--small`` and ``--large`` open *twins*: trajectories whose
conversations are identical, so they all wait at one continuation point (a
load test repeating one call, or many rollouts of one task with the same first
answer). A new call there also registers its continuation beside the others,
and a continued call looks through them for its own connection's.

A ratio near 1 means the cost does not grow with the number of open
trajectories. ``--restore N`` also times what a restarted proxy does before it
serves: reopen N open trajectories from a pool (one threaded step each, the
last call with two choices), best of ``--rounds``.

    python bench/proxy_registry.py [--small 1000] [--large 100000] [--rounds 5]
                                    [--restore 20000] [--checkout PATH]

``--checkout`` measures another checkout's registry (a git worktree of an
older commit, say) instead of this one's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
URLS = 4
OVER = 10


def _touch(reg: Any, t: Any) -> None:
    touch = getattr(reg, "touch", None)  # a registry without it scans instead
    if touch is not None:
        touch(t)
    else:
        t.last_active = time.monotonic()


def filled(registry: type, n: int) -> Any:
    """A registry of ``registry``'s class holding ``n`` open trajectories."""
    reg = registry(max_open=n)
    counted = hasattr(reg, "_slot_load")  # a registry without counters scans in pick_slot,
    for i in range(n):  # which would take hours to fill 100,000 trajectories this way
        t = reg.create("agent", threaded=True)
        if counted:
            reg.pick_slot(t, URLS)
        else:
            t.slot = i % URLS
        _touch(reg, t)
    return reg


def new_calls(reg: Any, calls: int) -> float:
    """Seconds per call: open, pick an upstream, mark active at start and end, then close
    the oldest (the registry stays at its size)."""
    oldest = list(reg.open)[:calls]
    t0 = time.perf_counter()
    for i in range(calls):
        t = reg.create("agent", threaded=True)
        reg.pick_slot(t, URLS)
        _touch(reg, t)
        _touch(reg, t)
        reg.close(oldest[i], "timeout")
    return (time.perf_counter() - t0) / calls


ASKED = [{"role": "user", "content": "the same task"}]
REPLY = {"role": "assistant", "content": "the same answer"}


def twins(registry: type, n: int) -> Any:
    """A registry of ``n`` open trajectories all waiting at one continuation point."""
    from agentworld.proxy.registry import prefix_keys

    reg = filled(registry, n)
    key = prefix_keys("agent", ASKED)[-1]
    for t in reg.open.values():
        reg.add_continuations(t, key, [REPLY])
    return reg


def twin_calls(reg: Any, calls: int) -> float:
    """Seconds per pair of calls among twins: a new one (its answer waits beside the
    others') and one that goes on (found among them, from a connection none had)."""
    import inspect

    from agentworld.proxy.registry import prefix_keys

    key = prefix_keys("agent", ASKED)[-1]
    more = prefix_keys("agent", [*ASKED, REPLY, {"role": "user", "content": "go on"}])
    peer = (
        {"peer": ("127.0.0.1", 1)}
        if "peer" in inspect.signature(reg.find_thread).parameters
        else {}
    )
    oldest = list(reg.open)[:calls]
    t0 = time.perf_counter()
    for i in range(calls):
        t = reg.create("agent", threaded=True)
        reg.pick_slot(t, URLS)
        reg.add_continuations(t, key, [REPLY])
        went_on = reg.find_thread(more, **peer)
        reg.continue_thread(went_on)
        reg.add_continuations(went_on, key, [REPLY])  # back among them, for the next round
        reg.close(oldest[i], "timeout")
    return (time.perf_counter() - t0) / calls


def sweep(reg: Any) -> float:
    """Seconds for one sweep finding nothing idle and ten trajectories over the cap."""
    reg.max_open = len(reg) - OVER
    t0 = time.perf_counter()
    reg.idle(time.monotonic(), 900.0)
    over = reg.over_capacity()
    took = time.perf_counter() - t0
    assert len(over) == OVER
    reg.max_open = len(reg)
    return took


def restore_s(registry: type, n: int, rounds: int) -> float:
    """Best-of-``rounds`` seconds for ``restore`` to reopen ``n`` threaded open trajectories."""
    import tempfile

    from agentworld.pool import Pool

    with tempfile.TemporaryDirectory(prefix="aw-bench-restore-") as tmp:
        return _restore_s(registry, Pool.create(Path(tmp) / "pool"), n, rounds)


def _restore_s(registry: type, pool: Any, n: int, rounds: int) -> float:
    """``restore_s`` in ``pool``, a temporary one it fills first."""
    from agentworld import records
    from agentworld.proxy.registry import restore

    with pool.writer() as w:
        for i in range(n):
            tid = f"tr_{i:08d}"
            for choice in (0, 1):
                w.append(
                    records.make_step(
                        trajectory=tid,
                        index=0,
                        agent="agent",
                        choice=choice,
                        request={"messages": [{"role": "user", "content": f"task {i}"}]},
                        response={"message": {"role": "assistant", "content": f"answer {choice}"}},
                        metadata={"threading": "auto"},
                    )
                )
    pool.index()
    best = float("inf")
    for _ in range(rounds):
        reg = registry()
        t0 = time.perf_counter()
        got = restore(reg, pool)
        best = min(best, time.perf_counter() - t0)
        assert got == n
    return best


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--small", type=int, default=1_000)
    ap.add_argument("--large", type=int, default=100_000)
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--restore", type=int, default=20_000, help="open trajectories (0: skip)")
    ap.add_argument("--checkout", type=Path, default=ROOT, help="whose registry to measure")
    a = ap.parse_args()
    if not 0 < a.calls <= a.small <= a.large:
        ap.error("need 0 < --calls <= --small <= --large")
    if not (a.checkout / "agentworld" / "proxy" / "trajectories.py").is_file():
        ap.error(f"--checkout: {a.checkout} is not an AgentWorld checkout")
    sys.path.insert(0, str(a.checkout.resolve()))
    import agentworld
    from agentworld.proxy.registry import Registry

    print(f"# registry of {Path(agentworld.__file__).parents[1]}, medians of {a.rounds} rounds")
    regs = {n: filled(Registry, n) for n in (a.small, a.large)}
    twin_regs = {n: twins(Registry, n) for n in (a.small, a.large)}
    call: dict[int, list[float]] = {n: [] for n in regs}
    swept: dict[int, list[float]] = {n: [] for n in regs}
    twin: dict[int, list[float]] = {n: [] for n in regs}
    twin_swept: dict[int, list[float]] = {n: [] for n in regs}
    for _ in range(a.rounds):
        for n, reg in regs.items():  # side by side, so drift hits both
            call[n].append(new_calls(reg, a.calls))
            swept[n].append(sweep(reg))
            twin[n].append(twin_calls(twin_regs[n], a.calls))
            twin_swept[n].append(sweep(twin_regs[n]))
    med = statistics.median
    print(
        f"{'open trajectories':>18} {'new call us':>12} {'sweep ms':>9} {'twins: calls us':>16} {'sweep ms':>9}"
    )
    for n in regs:
        print(
            f"{n:18,} {med(call[n]) * 1e6:12.1f} {med(swept[n]) * 1e3:9.2f}"
            f" {med(twin[n]) * 1e6:16.1f} {med(twin_swept[n]) * 1e3:9.2f}"
        )
    small, large = a.small, a.large
    print(
        f"-> {large:,} open vs {small:,}: a new call costs"
        f" {med(call[large]) / med(call[small]):.2f}x, a sweep"
        f" {med(swept[large]) / med(swept[small]):.1f}x"
        f" ({med(swept[large]) * 1e3:.2f} ms of event loop every sweep);"
        f" among twins, a pair of calls {med(twin[large]) / med(twin[small]):.2f}x, a sweep"
        f" {med(twin_swept[large]) / med(twin_swept[small]):.1f}x"
    )
    if a.restore:
        took = restore_s(Registry, a.restore, a.rounds)
        print(
            f"-> a restart reopens {a.restore:,} open trajectories in {took:.2f} s"
            f" ({took / a.restore * 1e6:.0f} us each)"
        )


if __name__ == "__main__":
    main()
