"""The local backend: episodes as asyncio tasks in this process, at most ``in_flight`` running at a time (an
episode that has asked to be scored no longer counts: it waits for its check process out of its slot), environment
code in the run's own sandbox pool."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from harness.sandbox import SandboxPool
from harness.schema import Trajectory

from .backend import EpisodeJob
from .episodes import EpisodeContext, run_one_episode
from .plan import EpisodeSpec
from .progress import RunProgress


class LocalBackend:
    """Runs episodes in this process; ``progress.in_flight`` counts the episodes running."""

    def __init__(self, pool: SandboxPool, progress: RunProgress) -> None:
        self.pool = pool
        self.progress = progress
        self.job: EpisodeJob | None = None

    async def start(self, job: EpisodeJob) -> None:
        self.job = job

    async def execute(
        self, specs: list[EpisodeSpec], *, run_id: str, in_flight: int, on_result: Callable[[Trajectory], None]
    ) -> None:
        job = self.job
        if job is None:
            raise RuntimeError("LocalBackend.execute before start")
        context = EpisodeContext.of(
            job.config, job.library, self.pool, job.client, job.agent_factory, job.user_factory, run_id
        )
        queue: asyncio.Queue[EpisodeSpec] = asyncio.Queue()
        for spec in specs:
            queue.put_nowait(spec)
        progress = self.progress
        limit = job.spend_limit

        scoring: set[asyncio.Task[None]] = set()
        """Episodes started and not yet recorded (past their slot while they wait to be scored)."""
        failures: list[BaseException] = []

        async def one_episode(spec: EpisodeSpec, slot: asyncio.Event) -> None:
            try:
                # The episode's slot is free as soon as it asks to be scored: the next episode starts while this
                # one waits for its batch.
                trajectory = await run_one_episode(spec, context, on_scoring=slot.set)
            finally:
                slot.set()
            on_result(trajectory)

        def ended(episode: asyncio.Task[None]) -> None:
            scoring.discard(episode)
            if not episode.cancelled() and episode.exception() is not None:
                failures.append(episode.exception())  # type: ignore[arg-type]  # not None, checked above

        async def episode_worker() -> None:
            while True:
                if failures:
                    raise failures[0]  # an error of the harness ends the run, as it always did
                if limit is not None and limit.reached():
                    limit.not_started += queue.qsize()
                    while not queue.empty():
                        queue.get_nowait()
                    return
                try:
                    spec = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                progress.in_flight += 1
                slot = asyncio.Event()
                episode = asyncio.create_task(one_episode(spec, slot))
                scoring.add(episode)
                episode.add_done_callback(ended)
                freed = asyncio.create_task(slot.wait())
                # Under a spend limit the next episode waits for this one's record, so that the limit is checked
                # against what it cost (its scoring no longer overlaps the next episode's start).
                awaited = {episode} if limit is not None else {episode, freed}
                try:
                    await asyncio.wait(awaited, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    freed.cancel()
                    progress.in_flight -= 1

        workers = [asyncio.create_task(episode_worker()) for _ in range(min(in_flight, len(specs)))]
        try:
            await asyncio.gather(*workers)
            while scoring:
                await asyncio.wait(set(scoring))
            if failures:
                raise failures[0]
        finally:
            for task in [*workers, *scoring]:
                task.cancel()
            await asyncio.gather(*workers, *scoring, return_exceptions=True)

    async def close(self) -> None:
        """Nothing to release: the pool belongs to the driver."""
