"""The local backend: episodes as asyncio tasks in this process, at most ``in_flight`` at a time, environment
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

        async def episode_worker() -> None:
            while True:
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
                try:
                    trajectory = await run_one_episode(spec, context)
                finally:
                    progress.in_flight -= 1
                on_result(trajectory)

        workers = [asyncio.create_task(episode_worker()) for _ in range(min(in_flight, len(specs)))]
        try:
            await asyncio.gather(*workers)
        finally:
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)

    async def close(self) -> None:
        """Nothing to release: the pool belongs to the driver."""
