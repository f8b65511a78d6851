"""The episode executor: the fleet's executor that runs a run's episodes.

It runs the very code a local run runs (``harness.run.episodes.run_one_episode``) and returns finished
trajectories to the driver as JSON; it never writes a result itself. The library is put in Ray's object store
once by the driver (keyed by its fingerprint there) and each node fetches it once: every executor on a node,
including a replacement after a crash, reads that node's copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from harness.collector import tune_for_throughput
from harness.library import Library
from harness.run.config import RunConfig
from harness.run.episodes import AgentFactory, EpisodeContext, UserFactory, run_one_episode
from harness.run.plan import EpisodeSpec
from harness.sandbox import SandboxPool
from harness.schema import Mode, Scenario
from harness.scoring.checks import SharedResetResults, adopt_reset_results

from .settings import ExecutorConfig
from .worker import FleetExecutor

RUN_EPISODE = "run_episode"


@dataclass(frozen=True)
class ExecutorPlan:
    """The job of a run's executors (``ExecutorConfig.job``): the run's config (rules, limits of an episode,
    mode) and the agents that play it."""

    config: RunConfig
    agent_factory: AgentFactory
    user_factory: UserFactory | None
    reset_results: SharedResetResults = field(default_factory=dict)
    """What held at reset per scenario, from the driver's screening (a local run's pool has the same)."""


@dataclass(frozen=True)
class EpisodeTicket:
    """An episode as sent over the wire: the scenario travels by id, not by value."""

    episode_id: str
    environment_id: str
    scenario_id: str
    mode: Mode
    trial: int
    seed: int
    run_id: str

    @classmethod
    def of(cls, spec: EpisodeSpec, run_id: str) -> EpisodeTicket:
        scenario = spec.scenario
        return cls(spec.episode_id, scenario.environment_id, scenario.id, spec.mode, spec.trial, spec.seed, run_id)


class EpisodeExecutor(FleetExecutor):
    """Ray actor body (``ray.remote(EpisodeExecutor)``) of a run: ``config.job`` is its :class:`ExecutorPlan`."""

    WORK: ClassVar[frozenset[str]] = frozenset({RUN_EPISODE})

    def __init__(self, config: ExecutorConfig, limiter: Any | None, library: Library) -> None:
        super().__init__(config, limiter)
        self.library = library
        self.plan: ExecutorPlan = config.job
        self.scenarios: dict[tuple[str, str], Scenario] = {(s.environment_id, s.id): s for s in library.scenarios}
        self.contexts: dict[str, EpisodeContext] = {}

    async def prepare(self, pool: SandboxPool) -> int:
        return adopt_reset_results(pool, self.library.scenarios, self.plan.reset_results)

    def started(self) -> None:
        tune_for_throughput()  # this process only runs episodes from here on

    async def run_episode(self, ticket: EpisodeTicket) -> bytes:
        """Run one episode; the trajectory comes back as its JSON line."""
        plan = self.plan
        scenario = self.scenarios[(ticket.environment_id, ticket.scenario_id)]
        spec = EpisodeSpec(ticket.episode_id, scenario, ticket.mode, ticket.trial, ticket.seed)
        context = self.contexts.get(ticket.run_id)
        if context is None:  # one per run: its recipe built once, each scenario's versions hashed once
            context = self.contexts[ticket.run_id] = EpisodeContext.of(
                plan.config, self.library, self.pool, self.client, plan.agent_factory, plan.user_factory, ticket.run_id
            )
        trajectory = await run_one_episode(spec, context)
        return trajectory.model_dump_json().encode()
