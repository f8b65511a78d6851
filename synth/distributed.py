"""``harness synth scenarios|queries --ray``: synthesis attempts on a Ray cluster, one writer of the output folder.

The driver plans the attempts exactly as a local run does (their content keys, and which of them the journal
already holds) and is the only writer of the output folder: it appends each finished attempt to the journal
and writes the outputs at the end, so ``--resume`` semantics (a re-run skips what the journal holds) are the
local ones. Each attempt (one environment's variation for ``scenarios``, one chain for ``queries``) runs on a
synthesis executor: a Ray actor on a node, with its own jailed sandbox pool and model client, that returns the
attempt's journal record. An executor that dies has its unfinished attempts re-queued on the others, so each
planned attempt is journaled once.

The cluster plumbing (joining, checking nodes, the cluster-wide rpm/tpm limiter, forwarding API-key variables)
is ``harness.distributed``'s; this module holds only what is specific to synthesis.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from harness.distributed.backend import alias_entries_for, forwarded_variables
from harness.distributed.cluster import ClusterUnavailable, alive_nodes, check_nodes, import_ray, join, root_cause
from harness.distributed.executor import probe_sandbox
from harness.distributed.limiter import ClusterLimiter, ClusterLLMClient
from harness.llm import AliasTable, EndpointLimits, LLMClient, RetryPolicy
from harness.llm.aliases import AliasEntry
from harness.sandbox import SandboxPool
from harness.schema import Environment
from synth.graph import ToolGraph
from synth.queries import QueryConfig, QuerySynthesizer
from synth.scenarios import AttemptRecord, ScenarioSynthesisConfig, ScenarioSynthesizer

logger = logging.getLogger(__name__)

READY_TIMEOUT_S = 300.0
SHUTDOWN_TIMEOUT_S = 20.0
LIMITER_MAX_CONCURRENCY = 100_000

Kind = Literal["scenarios", "queries"]


@dataclass(frozen=True)
class AttemptUnit:
    """One planned attempt as sent over the wire: the environment travels by id (every executor holds them)."""

    environment_id: str
    index: int
    key: str


@dataclass(frozen=True)
class SynthPlan:
    """What every synthesis executor gets once, at start."""

    kind: Kind
    config: ScenarioSynthesisConfig | QueryConfig
    environments: list[Environment]
    graph: ToolGraph | None
    aliases: dict[str, AliasEntry]
    retry: RetryPolicy
    default_limits: EndpointLimits
    timeout: float
    sandbox_workers: int | None


class SynthExecutor:
    """Ray actor body (``ray.remote(SynthExecutor)``): runs attempts with its own sandbox pool and model client.
    ``environment`` holds the variables the driver forwards (API keys named by the models' aliases)."""

    def __init__(self, plan: SynthPlan, limiter: Any | None, environment: dict[str, str]) -> None:
        os.environ.update(environment)
        self.plan = plan
        self.limiter = limiter
        self.environments = {e.id: e for e in plan.environments}
        self._pool: SandboxPool | None = None
        self._client: LLMClient | None = None
        self._synthesizer: ScenarioSynthesizer | QuerySynthesizer | None = None

    async def ready(self) -> str:
        """Start the sandbox pool and run one session in it, so a node that cannot confine the model's code is
        known before any attempt is sent to it. Returns the node id."""
        import ray

        if self._synthesizer is None:
            plan = self.plan
            self._pool = SandboxPool(workers=plan.sandbox_workers)
            await self._pool.start()
            await probe_sandbox(self._pool)
            self._client = ClusterLLMClient(
                None,  # answers are not cached on executors: the driver alone writes the output folder
                plan.default_limits,
                retry=plan.retry,
                timeout=plan.timeout,
                aliases=AliasTable(plan.aliases, environ={}),
                limiter=self.limiter,
            )
            if isinstance(plan.config, QueryConfig):
                assert plan.graph is not None
                self._synthesizer = QuerySynthesizer(self._client, self._pool, plan.graph, plan.config)
            else:
                self._synthesizer = ScenarioSynthesizer(self._client, self._pool, plan.config)
        return str(ray.get_runtime_context().get_node_id())

    async def attempt(self, unit: AttemptUnit) -> bytes:
        """Run one attempt; its journal record comes back as JSON."""
        if self._synthesizer is None:
            await self.ready()
        synthesizer = self._synthesizer
        if isinstance(synthesizer, QuerySynthesizer):
            record = await synthesizer.attempt(unit.index, self.environments, unit.key)
        else:
            assert synthesizer is not None
            record = await synthesizer.attempt(self.environments[unit.environment_id], unit.index)
        return record.model_dump_json().encode()

    async def shutdown(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
        self._synthesizer = None


@dataclass
class _Executor:
    name: str
    actor: Any
    node: str
    load: int = 0
    alive: bool = True


class RaySynthesis:
    """Runs synthesis attempts on the Ray cluster at ``address`` (``local`` starts one in this process, ``auto``
    joins the cluster this machine belongs to, ``HOST:PORT`` or ``ray://HOST:PORT`` joins that one). One
    executor per node that offers CPUs, each with ``concurrency`` attempts in flight."""

    def __init__(self, address: str = "local", *, sandbox_workers: int | None = None) -> None:
        self.address = address
        self.sandbox_workers = sandbox_workers
        self.executors: list[_Executor] = []
        self.limiter: Any = None
        self.concurrency = 1
        self._owns_ray = False
        self._joined = False
        self._token = uuid.uuid4().hex[:8]

    def connect(self) -> None:
        """Join the cluster (once); ``ClusterUnavailable`` when it cannot be reached."""
        if not self._joined:
            self._owns_ray = join(self.address)
            self._joined = True

    async def start(
        self,
        kind: Kind,
        config: ScenarioSynthesisConfig | QueryConfig,
        environments: list[Environment],
        client: LLMClient,
        *,
        graph: ToolGraph | None = None,
    ) -> None:
        """Join the cluster, check its nodes and start one executor on each; ``client`` is the driver's, whose
        aliases and limits the executors take. Raises ``ClusterUnavailable`` (one line) before any attempt."""
        self.connect()
        ray = import_ray()
        nodes = alive_nodes()
        if not nodes:
            raise ClusterUnavailable(f"the Ray cluster at {self.address} has no alive node")
        nodes = await asyncio.to_thread(check_nodes, nodes, ["synth"])
        models = sorted({config.model, *([config.solve_with] if config.solve_with else [])})
        if client.default_limits.rpm or client.default_limits.tpm:
            self.limiter = (
                ray.remote(ClusterLimiter)
                .options(num_cpus=0, max_concurrency=LIMITER_MAX_CONCURRENCY, name=f"synth-limiter-{self._token}")
                .remote()
            )
        plan = SynthPlan(
            kind=kind,
            config=config,
            environments=environments,
            graph=graph,
            aliases=alias_entries_for(client, models),
            retry=client.retry,
            default_limits=client.default_limits,
            timeout=client.timeout,
            sandbox_workers=self.sandbox_workers,
        )
        names = forwarded_variables(client, models)
        environment = {name: os.environ[name] for name in names if name in os.environ}
        if environment:
            logger.info("executors get these variables from the driver: %s", ", ".join(sorted(environment)))
        self.concurrency = config.concurrency
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        for number, node in enumerate(nodes, start=1):
            name = f"synth-executor-{self._token}-{number}"
            actor = (
                ray.remote(SynthExecutor)
                .options(
                    name=name,
                    num_cpus=0,
                    max_restarts=0,
                    max_concurrency=config.concurrency + 8,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False),
                )
                .remote(plan, self.limiter, environment)
            )
            label = f"{node['NodeManagerAddress']} ({node['NodeID'][:8]})"
            self.executors.append(_Executor(name=name, actor=actor, node=label))
        outcomes = await asyncio.gather(*(self._ready(e) for e in self.executors), return_exceptions=True)
        for executor, outcome in zip(self.executors, outcomes, strict=True):
            if isinstance(outcome, ray.exceptions.RayActorError):  # its process or node died: not the sandbox
                executor.alive = False
                logger.warning("executor on node %s was lost while starting; running without it", executor.node)
            elif isinstance(outcome, BaseException):
                raise outcome
        if not any(e.alive for e in self.executors):
            raise ClusterUnavailable(f"no synthesis executor could start on the cluster at {self.address}")
        logger.info("%d synthesis executors ready", sum(e.alive for e in self.executors))

    async def _ready(self, executor: _Executor) -> None:
        ray = import_ray()
        try:
            await asyncio.wait_for(asyncio.wrap_future(executor.actor.ready.remote().future()), READY_TIMEOUT_S)
        except TimeoutError:
            raise ClusterUnavailable(
                f"node {executor.node}: no synthesis executor started there within {READY_TIMEOUT_S:.0f}s"
            ) from None
        except ray.exceptions.RayTaskError as exc:
            raise ClusterUnavailable(
                f"node {executor.node}: the sandbox cannot start there: {root_cause(exc)}"
            ) from None

    async def execute(self, units: list[AttemptUnit], on_record: Callable[[AttemptRecord], None]) -> None:
        """Run every unit once on the executors; ``on_record`` gets each finished attempt, in this process."""
        ray = import_ray()
        queue = deque(units)
        running: dict[asyncio.Future[bytes], tuple[AttemptUnit, _Executor]] = {}
        try:
            while queue or running:
                alive = [e for e in self.executors if e.alive]
                if not alive and not running:
                    raise ClusterUnavailable(
                        f"no synthesis executor is left on the cluster; {len(queue)} attempts did not run: "
                        "run again over the same --out once nodes are back"
                    )
                while queue and alive and len(running) < self.concurrency * len(alive):
                    executor = min(alive, key=lambda e: e.load)
                    unit = queue.popleft()
                    running[asyncio.wrap_future(executor.actor.attempt.remote(unit).future())] = (unit, executor)
                    executor.load += 1
                done, _ = await asyncio.wait(set(running), return_when=asyncio.FIRST_COMPLETED)
                for future in done:
                    unit, executor = running.pop(future)
                    executor.load -= 1
                    try:
                        payload = future.result()
                    except ray.exceptions.RayTaskError as exc:
                        raise exc.as_instanceof_cause() from None
                    except ray.exceptions.RayError as exc:
                        queue.appendleft(unit)
                        self._lose(executor, exc)
                        continue
                    on_record(AttemptRecord.model_validate_json(payload))
        finally:
            for future in running:
                future.cancel()

    def _lose(self, executor: _Executor, error: BaseException) -> None:
        if not executor.alive:
            return
        executor.alive = False
        logger.warning(
            "executor %s on node %s was lost (%s); its unfinished attempts are re-queued",
            executor.name,
            executor.node,
            type(error).__name__,
        )
        ray = import_ray()
        with contextlib.suppress(Exception):  # already gone
            ray.kill(executor.actor, no_restart=True)

    async def close(self) -> None:
        if not self.executors and self.limiter is None and not self._owns_ray:
            return
        ray = import_ray()
        alive = [e for e in self.executors if e.alive]
        if alive:
            await asyncio.wait(
                [asyncio.wrap_future(e.actor.shutdown.remote().future()) for e in alive], timeout=SHUTDOWN_TIMEOUT_S
            )
        for executor in self.executors:
            with contextlib.suppress(Exception):  # already gone
                ray.kill(executor.actor, no_restart=True)
        if self.limiter is not None:
            ray.kill(self.limiter, no_restart=True)
        self.executors.clear()
        self.limiter = None
        if self._owns_ray:
            await asyncio.to_thread(ray.shutdown)
            self._owns_ray = False
        self._joined = False
