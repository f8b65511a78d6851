"""Every episode of a leaderboard's runs, each to get a page and a row in the index, read from its run as its
page is written.

The pages come in this order: first the failure lists' examples (in the order they were named, each as the run
that named it recorded it), then every other episode in the order of its first appearance, as its last run
recorded it. Per episode only its id and which runs hold it are kept (:class:`leaderboards.standing.RunOwners`),
plus the run of each example.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from harness.schema import Scenario, Trajectory
from leaderboards.catalog import Catalog
from leaderboards.standing import RunOwners, RunReaders


class EpisodePages:
    """The episodes of the runs ``owners`` indexes, with the catalog of each run's environment set."""

    def __init__(self, owners: RunOwners, catalogs: Sequence[Catalog]) -> None:
        self.owners = owners
        self.catalogs = catalogs
        self._examples: dict[str, int] = {}
        """Episode id → the run whose record of it a failure list shows (the last run to name it)."""

    def note_example(self, episode_id: str, run: int) -> None:
        """``run``'s record of ``episode_id`` is the example of one of its failure lists."""
        self._examples[episode_id] = run

    def __len__(self) -> int:
        return len(self.owners)

    def __contains__(self, episode_id: object) -> bool:
        return episode_id in self.owners

    def ids(self) -> Iterator[str]:
        """Every episode id, in page order."""
        for episode_id, _ in self._placed():
            yield episode_id

    def _placed(self) -> Iterator[tuple[str, int]]:
        """(episode id, the run its page shows) in page order."""
        yield from self._examples.items()
        for _, episode_id in self.owners.in_order():
            if episode_id not in self._examples:
                yield episode_id, self.owners.last(episode_id)

    def records(self) -> Iterator[tuple[Trajectory, Scenario | None]]:
        """Each page's record, with its scenario when the environment set of a run holding it is at hand (the last
        such run's), in page order."""
        with RunReaders(self.owners.runs) as readers:
            for episode_id, run in self._placed():
                trajectory = readers.read(run, episode_id)
                if trajectory is not None:
                    yield trajectory, self._scenario(episode_id, trajectory.scenario_id)

    def scenario_of(self, episode_id: str) -> Scenario | None:
        """The scenario ``episode_id``'s page shows (its record is read to know it)."""
        run = self._examples.get(episode_id, self.owners.last(episode_id))
        with RunReaders(self.owners.runs) as readers:
            trajectory = readers.read(run, episode_id)
        return None if trajectory is None else self._scenario(episode_id, trajectory.scenario_id)

    def _scenario(self, episode_id: str, scenario_id: str) -> Scenario | None:
        for run in reversed(list(self.owners.holders(episode_id))):
            scenario = self.catalogs[run].scenarios.get(scenario_id)
            if scenario is not None:
                return scenario
        return None
