"""The proxy's collector policy: survivors of young collections are frozen (no later
collection walks them), garbage is still collected, and cycles among frozen objects are
reclaimed once the frozen heap outgrows its limit."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from agentworld.proxy.gc_pauses import GcPauses, resident_bytes


class Node:
    """A weak-referenceable object that can sit in a cycle."""

    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture
def policy() -> Iterator[GcPauses]:
    # The limit in frozen objects, not resident bytes: doubling it takes a small ballast.
    p = GcPauses(young_threshold=100_000, margin=1_000, size=gc.get_freeze_count)
    p.install(watchdog=False)
    try:
        yield p
    finally:
        p.uninstall()


def tracked_ids() -> set[int]:
    """Ids of the objects some collection would still walk (frozen ones are not listed)."""
    return {id(o) for o in gc.get_objects()}


def test_install_sets_the_young_threshold_and_uninstall_restores(policy: GcPauses) -> None:
    assert gc.get_threshold()[0] == 100_000
    before = policy._thresholds
    policy.uninstall()
    assert gc.get_threshold() == before
    assert policy._after_collection not in gc.callbacks


def test_survivors_of_a_young_collection_are_frozen(policy: GcPauses) -> None:
    frozen = gc.get_freeze_count()
    kept = [{"n": i, "ids": [i]} for i in range(500)]
    assert id(kept[0]) in tracked_ids()
    gc.collect(0)
    assert gc.get_freeze_count() >= frozen + 1_000  # the dicts and their lists
    walked = tracked_ids()
    assert id(kept) not in walked and id(kept[0]) not in walked
    assert not gc.get_objects(1) and not gc.get_objects(2)  # older generations stay empty


def test_young_cyclic_garbage_is_still_collected(policy: GcPauses) -> None:
    a, b = Node(), Node()
    a.other, b.other = b, a
    ref = weakref.ref(a)
    del a, b
    gc.collect(0)
    assert ref() is None


def test_frozen_objects_die_by_reference_counting(policy: GcPauses) -> None:
    n = Node()
    ref = weakref.ref(n)
    gc.collect(0)  # n survives: frozen
    assert id(n) not in tracked_ids()
    del n
    assert ref() is None


def test_a_cycle_frozen_while_alive_is_reclaimed_past_the_limit(policy: GcPauses) -> None:
    a, b = Node(), Node()
    a.other, b.other = b, a
    ref = weakref.ref(a)
    gc.collect(0)  # alive now: frozen with the rest
    del a, b
    gc.collect()  # a full collection does not walk frozen objects
    assert ref() is not None
    assert not policy.over_limit()
    ballast = [[i] for i in range(max(policy.limit, 2_000))]
    gc.collect(0)
    assert policy.over_limit()  # the frozen heap doubled
    assert policy.reclaim() >= 2
    assert ref() is None
    assert not policy.over_limit()  # the limit follows what lives on
    del ballast


def test_the_default_limit_is_in_resident_bytes() -> None:
    p = GcPauses()
    assert p.size is resident_bytes
    assert 10 << 20 < resident_bytes() < 64 << 30
