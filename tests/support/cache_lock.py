"""One writer at a time for what the tests build once and cache outside the run (venvs, downloaded wheels): the
suite runs in several worker processes (pytest-xdist), and two of them may ask for the same item at once."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def exclusive(item: Path) -> Iterator[None]:
    """Hold ``<item>.lock`` (beside ``item``) for the block: another process asking for it waits until then."""
    item.parent.mkdir(parents=True, exist_ok=True)
    with open(item.with_name(item.name + ".lock"), "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
