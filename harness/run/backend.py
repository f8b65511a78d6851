"""Where a run's episodes run: the :class:`EpisodeBackend` protocol that the local backend
(``harness.run.local.LocalBackend``) and the Ray backend (``harness.distributed.RayBackend``) implement. The
driver plans, and stays the only writer of the run folder, whichever backend runs the episodes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from harness.library import Library
from harness.llm import LLMClient
from harness.sandbox import SandboxLimits
from harness.schema import ClusterInfo, Trajectory
from harness.scoring.checks import SharedResetResults

from .config import RunConfig
from .episodes import AgentFactory, UserFactory
from .plan import EpisodeSpec
from .spending import SpendLimit


@dataclass(frozen=True)
class EpisodeJob:
    """What a backend needs to run this run's episodes."""

    config: RunConfig
    library: Library
    client: LLMClient
    agent_factory: AgentFactory
    user_factory: UserFactory | None
    sandbox_limits: SandboxLimits | None
    reset_results: SharedResetResults = field(default_factory=dict)
    """What held at reset for each scenario, from this run's screening: executors start from it."""
    spend_limit: SpendLimit | None = None
    """``--cost-limit``: a backend starts no episode once it is reached (and counts those it did not start)."""


class EpisodeBackend(Protocol):
    """Runs planned episodes and hands each trajectory back; never writes the run folder."""

    async def start(self, job: EpisodeJob) -> ClusterInfo | None:
        """Connect and check every place episodes will run; raise ``RunRefused`` with one line if one cannot.
        Returns the cluster to record in the manifest (``None`` when episodes run in this process)."""
        ...

    async def execute(
        self, specs: list[EpisodeSpec], *, run_id: str, in_flight: int, on_result: Callable[[Trajectory], None]
    ) -> None:
        """Run each spec and call ``on_result`` exactly once per spec run, with at most ``in_flight`` running; a
        spec not yet started when ``job.spend_limit`` is reached is not started (and counted there)."""
        ...

    async def close(self) -> None: ...
