"""Garbage-collector settings for a process that runs many episodes at once.

CPython's cyclic collector runs after every 700 net allocations of container objects, and each full
collection walks every tracked object: the imported model clients (litellm alone creates hundreds of
thousands), the library, and every episode in flight. Measured with ``bench/runner.py`` at concurrency 256,
half the harness process's CPU went to the collector. While episodes run, the objects that exist at the start
(modules, the library) are moved out of the collector's view with :func:`gc.freeze`, and the first
generation's threshold is raised, so short-lived JSON and message objects are freed by reference counting
before any collection looks at them. Cycles are still collected, only less often.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator
from contextlib import contextmanager

logger = logging.getLogger(__name__)

YOUNG_THRESHOLD = 50_000
"""Allocations between two collections of the youngest generation (CPython's default is 700)."""
OLDER_THRESHOLDS = (20, 20)

_depth = 0
_saved_thresholds = (700, 10, 10)
_caller_froze = False


def tune_for_throughput() -> None:
    """Collect, freeze what is left and raise the thresholds, for the rest of this process's life (a dedicated
    worker such as a Ray episode executor)."""
    gc.collect()
    _freeze_and_raise()


def _freeze_and_raise() -> None:
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *OLDER_THRESHOLDS)
    logger.debug("collector tuned: %d objects frozen", gc.get_freeze_count())


@contextmanager
def tuned_for_throughput() -> Iterator[None]:
    """Freeze and raise the thresholds while the block runs; afterwards the thresholds are restored and the
    frozen objects are visible to the collector again (garbage frozen with them is collected then). Nested or
    overlapping uses restore once, at the last exit. A process that had frozen objects itself (before forking
    workers, say) keeps everything frozen: CPython cannot unfreeze only part of the permanent generation."""
    global _depth, _saved_thresholds, _caller_froze
    if _depth == 0:
        _saved_thresholds = gc.get_threshold()
        _caller_froze = gc.get_freeze_count() > 0
        _freeze_and_raise()
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0:
            gc.set_threshold(*_saved_thresholds)
            if not _caller_froze:
                gc.unfreeze()


@contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic collection while the block runs (reading a library: parsing creates millions of objects that
    all live on, and each collection on the way would walk all those made so far; a library of 114 retail tasks,
    each carrying its 1.2 MB database, read in 16 s with collections and in 4 s without). Parsed records hold
    no reference cycles, so nothing is left for the collector that reference counting does not free."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


__all__ = ["OLDER_THRESHOLDS", "YOUNG_THRESHOLD", "collector_paused", "tune_for_throughput", "tuned_for_throughput"]
