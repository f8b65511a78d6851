"""The collector settings a run uses while its episodes are in flight, and what it leaves behind."""

from __future__ import annotations

import gc
import weakref

from harness.collector import YOUNG_THRESHOLD, tuned_for_throughput


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def make_cycle() -> weakref.ref[Node]:
    first, second = Node(), Node()
    first.other, second.other = second, first
    return weakref.ref(first)


def test_a_run_freezes_what_exists_raises_the_threshold_and_restores_both() -> None:
    before = gc.get_threshold()
    frozen_before = gc.get_freeze_count()
    with tuned_for_throughput():
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD
        assert gc.get_freeze_count() > frozen_before
        with tuned_for_throughput():  # a nested run does not restore the settings when it ends
            pass
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == frozen_before


def test_cycles_are_still_collected_during_and_after_a_run() -> None:
    gc.disable()  # no collection between making the cycle and the freeze
    old_garbage = make_cycle()
    with tuned_for_throughput():
        gc.enable()
        gc.collect()
        assert old_garbage() is not None  # frozen with everything else that existed at the start
        new_garbage = make_cycle()
        gc.collect()
        assert new_garbage() is None
    gc.collect()
    assert old_garbage() is None


def test_objects_the_caller_froze_stay_frozen_after_a_run() -> None:
    # Frozen objects are out of the collector's view: gc.get_objects() does not list them. (The freeze count is
    # no measure here: a frozen object that another thread of the test process frees lowers it.)
    marker = ["frozen by the caller"]
    gc.freeze()
    try:
        with tuned_for_throughput():
            pass
        assert not any(found is marker for found in gc.get_objects())
        assert gc.get_threshold()[0] != YOUNG_THRESHOLD
    finally:
        gc.unfreeze()
    assert any(found is marker for found in gc.get_objects())
