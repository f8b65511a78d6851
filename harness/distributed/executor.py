"""The episode executor: a Ray actor on one node with its own sandbox pool and model client.

It runs the very code a local run runs (``harness.run.episodes.run_one_episode``) and returns finished
trajectories to the driver as JSON; it never writes a result itself. Episodes arrive in batches
(:meth:`EpisodeExecutor.submit`) and leave in batches (:meth:`EpisodeExecutor.collect`, a long poll), so the
cost of a Ray call is shared by the episodes it carries rather than paid twice by each one. The library is put
in Ray's object store once by the driver (keyed by its fingerprint there) and each node fetches it once: every
executor on a node, including a replacement after a crash, reads that node's copy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from harness.collector import tune_for_throughput
from harness.library import Library
from harness.llm import AliasTable, EndpointLimits, RetryPolicy
from harness.llm.aliases import AliasEntry
from harness.run.config import RunConfig
from harness.run.episodes import AgentFactory, EpisodeContext, UserFactory, run_one_episode
from harness.run.plan import EpisodeSpec
from harness.sandbox import SandboxError, SandboxLimits, SandboxPool
from harness.schema import Environment, Mode, Scenario, ToolCall
from harness.scoring import SharedResetResults, adopt_reset_results
from harness.toolspec import derive_tools

from .limiter import ClusterLLMClient

logger = logging.getLogger(__name__)

COLLECT_LINGER_S = 0.05
"""Once a trajectory is ready, :meth:`EpisodeExecutor.collect` waits this long for others to join it, when at
least ``COLLECT_LINGER_MIN_RUNNING`` episodes are still running: a busy executor saves Ray calls (CPU it would
take from the episodes), a quiet one answers at once (the wait would hold an episode slot idle)."""
COLLECT_LINGER_MIN_RUNNING = 32
COLLECT_BATCH = 256

PROBE_CODE = """class Probe:
    def __init__(self, init_config: dict):
        self.count = init_config.get("count", 0)

    def bump(self) -> dict:
        \"\"\"Add one to the count.\"\"\"
        self.count += 1
        return {"success": True, "data": self.count}
"""
PROBE_ENVIRONMENT = Environment(
    id="harness-sandbox-probe",
    name="sandbox probe",
    class_name="Probe",
    code=PROBE_CODE,
    tools=derive_tools(PROBE_CODE, "Probe"),
)


async def probe_sandbox(pool: SandboxPool) -> None:
    """One session of a known-good environment through the whole sandbox path: start, call, state, close."""
    session = await pool.open_session(PROBE_ENVIRONMENT, {"count": 0}, seed=0)
    try:
        observation, _ = await session.call(ToolCall(id="probe", name="bump", arguments={}))
        state = await session.state()
    finally:
        await session.close()
    if state.get("count") != 1:
        raise SandboxError(f"the probe environment answered {observation!r} and ended in state {state!r}")


@dataclass(frozen=True)
class ExecutorPlan:
    """What every executor of a run gets once, at start (the library travels separately, by reference)."""

    config: RunConfig
    agent_factory: AgentFactory
    user_factory: UserFactory | None
    aliases: dict[str, AliasEntry]
    retry: RetryPolicy
    default_limits: EndpointLimits
    sandbox_limits: SandboxLimits | None
    sandbox_workers: int | None
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

    @classmethod
    def of(cls, spec: EpisodeSpec) -> EpisodeTicket:
        scenario = spec.scenario
        return cls(spec.episode_id, scenario.environment_id, scenario.id, spec.mode, spec.trial, spec.seed)


@dataclass(frozen=True)
class ExecutorStatus:
    node_id: str
    pid: int
    missing_layers: tuple[str, ...] = ()
    """Confinement layers the sandbox runs without on this node, each as ``name (why)``."""
    reset_results_adopted: int = 0
    """Scenarios whose reset results this executor took from the driver's screening instead of computing."""


class EpisodeExecutor:
    """Ray actor body (``ray.remote(EpisodeExecutor)``). ``environment`` holds the variables the driver
    forwards (API keys named by the run's model aliases); they are set here and never logged."""

    def __init__(self, plan: ExecutorPlan, library: Library, limiter: Any | None, environment: dict[str, str]):
        os.environ.update(environment)
        self.library = library
        self.plan = plan
        self.limiter = limiter
        self.scenarios: dict[tuple[str, str], Scenario] = {(s.environment_id, s.id): s for s in self.library.scenarios}
        self._stack = AsyncExitStack()
        self._pool: SandboxPool | None = None
        self._client: ClusterLLMClient | None = None
        self._running: dict[str, asyncio.Task[None]] = {}
        self._finished: list[tuple[str, bytes]] = []
        self._failure: BaseException | None = None
        self._arrived = asyncio.Event()
        self._adopted = 0

    async def ready(self) -> ExecutorStatus:
        """Start the sandbox pool and open one session in it, so a node that cannot confine environment code
        is known before any episode is sent to it."""
        import ray

        if self._pool is None:
            plan = self.plan
            self._pool = await self._stack.enter_async_context(
                SandboxPool(
                    workers=plan.sandbox_workers,
                    limits=plan.sandbox_limits,
                    require_full_confinement=self.library.from_hub and not plan.config.allow_weak_sandbox,
                )
            )
            self._client = ClusterLLMClient(
                cache_dir=plan.config.cache_dir,
                default_limits=plan.default_limits,
                retry=plan.retry,
                timeout=plan.config.timeout,
                aliases=AliasTable(plan.aliases, environ={}),
                limiter=self.limiter,
            )
            self._adopted = adopt_reset_results(self._pool, self.library.scenarios, plan.reset_results)
            await self._probe_sandbox(self._pool)
            tune_for_throughput()  # this process only runs episodes from here on
        missing = tuple(f"{layer['name']} ({layer['detail']})" for layer in self._pool.missing_layers)
        return ExecutorStatus(
            node_id=ray.get_runtime_context().get_node_id(),
            pid=os.getpid(),
            missing_layers=missing,
            reset_results_adopted=self._adopted,
        )

    async def _probe_sandbox(self, pool: SandboxPool) -> None:
        await probe_sandbox(pool)

    async def submit(self, tickets: list[EpisodeTicket], run_id: str) -> None:
        """Start these episodes; their trajectories come back through :meth:`collect`."""
        if self._pool is None or self._client is None:
            await self.ready()
        for ticket in tickets:
            if ticket.episode_id not in self._running:
                self._running[ticket.episode_id] = asyncio.create_task(self._run_submitted(ticket, run_id))

    async def _run_submitted(self, ticket: EpisodeTicket, run_id: str) -> None:
        try:
            payload = await self.run(ticket, run_id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug, not an episode failure (those are in the trajectory): the driver stops
            logger.exception("episode %s raised", ticket.episode_id)
            self._failure = self._failure or exc
        else:
            self._finished.append((ticket.episode_id, payload))
        finally:
            self._running.pop(ticket.episode_id, None)
            self._arrived.set()

    async def collect(self, wait_s: float) -> list[tuple[str, bytes]]:
        """Trajectories finished since the last call, as ``(episode_id, JSON)``: waits up to ``wait_s`` for the
        first (an empty list when none came), then briefly for others, so one answer carries several."""
        if not self._finished and self._failure is None:
            self._arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), wait_s)
        if self._finished and len(self._running) >= COLLECT_LINGER_MIN_RUNNING and len(self._finished) < COLLECT_BATCH:
            await asyncio.sleep(COLLECT_LINGER_S)
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure
        finished, self._finished = self._finished[:COLLECT_BATCH], self._finished[COLLECT_BATCH:]
        return finished

    async def run(self, ticket: EpisodeTicket, run_id: str) -> bytes:
        """Run one episode; the trajectory comes back as its JSON line."""
        if self._pool is None or self._client is None:
            await self.ready()
        assert self._pool is not None and self._client is not None
        plan = self.plan
        scenario = self.scenarios[(ticket.environment_id, ticket.scenario_id)]
        spec = EpisodeSpec(ticket.episode_id, scenario, ticket.mode, ticket.trial, ticket.seed)
        context = EpisodeContext.of(
            plan.config, self.library, self._pool, self._client, plan.agent_factory, plan.user_factory, run_id
        )
        trajectory = await run_one_episode(spec, context)
        return trajectory.model_dump_json().encode()

    async def shutdown(self) -> None:
        running = list(self._running.values())
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        await self._stack.aclose()
        self._pool = None
