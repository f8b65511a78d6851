"""Which run's record stands for each episode of several runs, without holding any record.

The same episode id in two runs is the same episode run again, and the run given later wins, in the place of the
episode's first appearance (as when every record was held and de-duplicated in order). :class:`RunOwners` keeps,
per episode id, the first and the last run (by index) that hold it; :func:`standing_records` reads the records that
stand, in that order, each from the run that owns it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack

from harness.results.store import StoredResults
from harness.schema import Trajectory

_LAST = (1 << 32) - 1
MAX_OPEN_RUNS = 32


class RunOwners:
    """For each episode id of ``runs``: the first and the last of them (by index) that hold it."""

    def __init__(self, runs: Sequence[StoredResults]) -> None:
        self.runs = runs
        self._spans: dict[str, int] = {}
        for index, results in enumerate(runs):
            for episode_id in results.ids():
                span = self._spans.get(episode_id)
                self._spans[episode_id] = (index << 32 | index) if span is None else (span & ~_LAST) | index

    def __len__(self) -> int:
        return len(self._spans)

    def __contains__(self, episode_id: object) -> bool:
        return episode_id in self._spans

    def first(self, episode_id: str) -> int:
        return self._spans[episode_id] >> 32

    def last(self, episode_id: str) -> int:
        return self._spans[episode_id] & _LAST

    def in_order(self) -> Iterator[tuple[int, str]]:
        """(run index, episode id) of each episode's first appearance: runs in order, each run's episodes in its
        order."""
        for index, results in enumerate(self.runs):
            for episode_id in results.ids():
                if self._spans[episode_id] >> 32 == index:
                    yield index, episode_id

    def holders(self, episode_id: str) -> Iterator[int]:
        """The runs that hold ``episode_id``, in order."""
        for index in range(self.first(episode_id), self.last(episode_id) + 1):
            if self.runs[index].position(episode_id) is not None:
                yield index


class RunReaders:
    """Handles on the runs' results files while the block runs, opened as they are needed (at most
    ``MAX_OPEN_RUNS`` at a time, the least recently used closed first); ``read(run, episode_id)`` is that run's
    record of the episode (None when it no longer reads back)."""

    def __init__(self, runs: Sequence[StoredResults]) -> None:
        self.runs = runs
        self._open: OrderedDict[int, tuple[ExitStack, Callable[[int], Trajectory | None]]] = OrderedDict()

    def __enter__(self) -> RunReaders:
        return self

    def __exit__(self, *_: object) -> None:
        while self._open:
            stack, _read = self._open.popitem()[1]
            stack.close()

    def read(self, run: int, episode_id: str) -> Trajectory | None:
        position = self.runs[run].position(episode_id)
        if position is None:
            return None
        opened = self._open.get(run)
        if opened is None:
            if len(self._open) >= MAX_OPEN_RUNS:
                self._open.popitem(last=False)[1][0].close()
            stack = ExitStack()
            opened = self._open[run] = (stack, stack.enter_context(self.runs[run].reader()))
        self._open.move_to_end(run)
        return opened[1](position)


def standing_records(owners: RunOwners) -> Iterator[tuple[int, Trajectory]]:
    """Each episode's standing record (its last run's) with that run's index, in the order of first appearance."""
    with RunReaders(owners.runs) as readers:
        for _, episode_id in owners.in_order():
            owner = owners.last(episode_id)
            trajectory = readers.read(owner, episode_id)
            if trajectory is not None:
                yield owner, trajectory
