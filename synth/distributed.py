"""``harness synth envs|scenarios|queries --ray``: synthesis on a Ray cluster, one writer of the output folder.

The driver plans the work exactly as a local run does and is the only writer of the output folder, so a re-run
over it resumes as a local one does. Independent units run on synthesis executors: Ray actors, one per node,
each with its own jailed sandbox pool and model client, that return each unit's result to the driver.

- ``scenarios`` and ``queries``: a unit is one attempt (one environment's variation, one chain). The driver
  skips what the journal holds, appends each finished attempt to it and writes the outputs at the end.
- ``envs``: a unit is one theme's environment (plan, model, assess and repair, validate). The driver discovers
  tasks and merges themes itself, sends each theme with the stage outputs it already has on disk, and writes
  the stage outputs the build computed when the theme's result comes back.

An executor that dies has its unfinished units re-queued on the others, so each unit's result is written once.

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
from typing import Any

import orjson

from harness.distributed.backend import alias_entries_for, forwarded_variables
from harness.distributed.cluster import ClusterUnavailable, alive_nodes, check_nodes, import_ray, join, root_cause
from harness.distributed.executor import ExecutorStatus, probe_sandbox
from harness.distributed.limiter import ClusterLimiter, ClusterLLMClient
from harness.llm import AliasTable, EndpointLimits, LLMClient, RetryPolicy
from harness.llm.aliases import AliasEntry
from harness.sandbox import SandboxPool
from harness.schema import Environment, Usage
from synth.cluster import AttemptKind, AttemptUnit
from synth.environment_build import COST_STAGES, EnvironmentBuild, SynthEnvsConfig
from synth.graph import ToolGraph
from synth.queries import QueryConfig, QuerySynthesizer
from synth.records import Rejection, Theme
from synth.scenarios import AttemptRecord, ScenarioSynthesisConfig, ScenarioSynthesizer
from synth.stages import MemoryStageStore

logger = logging.getLogger(__name__)

READY_TIMEOUT_S = 300.0
SHUTDOWN_TIMEOUT_S = 20.0
LIMITER_MAX_CONCURRENCY = 100_000


@dataclass(frozen=True)
class ThemeUnit:
    """One theme to build, with the stage outputs the driver already has for it."""

    position: int
    theme: Theme
    discovery_usage: Usage
    stages: dict[tuple[str, str], dict[str, Any]]


@dataclass(frozen=True)
class ModelAccess:
    """How an executor reaches models and runs code: the driver's aliases (resolved as the driver resolved
    them), retry policy, limits and timeout, and the sandbox pool's size."""

    aliases: dict[str, AliasEntry]
    retry: RetryPolicy
    default_limits: EndpointLimits
    timeout: float
    sandbox_workers: int | None


@dataclass(frozen=True)
class AttemptPlan:
    """What every attempt executor gets once, at start."""

    kind: AttemptKind
    config: ScenarioSynthesisConfig | QueryConfig
    environments: list[Environment]
    graph: ToolGraph | None


class _SynthExecutor:
    """A synthesis executor's sandbox pool and model client, started once. ``environment`` holds the variables
    the driver forwards (API keys named by the models' aliases); they are set here and never logged."""

    def __init__(self, access: ModelAccess, limiter: Any | None, environment: dict[str, str]) -> None:
        os.environ.update(environment)
        self.access = access
        self.limiter = limiter
        self._pool: SandboxPool | None = None
        self._client: LLMClient | None = None

    async def _services(self) -> tuple[SandboxPool, LLMClient]:
        """Start the sandbox pool and run one session in it, so a node that cannot confine the model's code is
        known before any unit is sent to it; then the model client."""
        if self._pool is None or self._client is None:
            access = self.access
            pool = SandboxPool(workers=access.sandbox_workers)
            await pool.start()
            self._pool = pool
            await probe_sandbox(pool)
            self._client = ClusterLLMClient(
                None,  # answers are not cached on executors: the driver alone writes the output folder
                access.default_limits,
                retry=access.retry,
                timeout=access.timeout,
                aliases=AliasTable(access.aliases, environ={}),
                limiter=self.limiter,
            )
        return self._pool, self._client

    async def ready(self) -> ExecutorStatus:
        """Start this executor's services; returns where it runs and the confinement layers missing there."""
        import ray

        pool, _ = await self._services()
        missing = tuple(f"{layer['name']} ({layer['detail']})" for layer in pool.missing_layers)
        return ExecutorStatus(node_id=ray.get_runtime_context().get_node_id(), pid=os.getpid(), missing_layers=missing)

    async def shutdown(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        if self._pool is not None:
            await self._pool.close()
            self._pool = None


class AttemptExecutor(_SynthExecutor):
    """Ray actor body for ``scenarios`` and ``queries``: runs attempts, returns their journal records as JSON."""

    def __init__(
        self, plan: AttemptPlan, access: ModelAccess, limiter: Any | None, environment: dict[str, str]
    ) -> None:
        super().__init__(access, limiter, environment)
        self.plan = plan
        self.environments = {e.id: e for e in plan.environments}
        self._synthesizer: ScenarioSynthesizer | QuerySynthesizer | None = None

    async def run(self, unit: AttemptUnit) -> bytes:
        pool, client = await self._services()
        if self._synthesizer is None:
            plan = self.plan
            if isinstance(plan.config, QueryConfig):
                assert plan.graph is not None
                self._synthesizer = QuerySynthesizer(client, pool, plan.graph, plan.config)
            else:
                self._synthesizer = ScenarioSynthesizer(client, pool, plan.config)
        synthesizer = self._synthesizer
        if isinstance(synthesizer, QuerySynthesizer):
            record = await synthesizer.attempt(unit.index, self.environments, unit.key)
        else:
            record = await synthesizer.attempt(self.environments[unit.environment_id], unit.index)
        return record.model_dump_json().encode()


class EnvironmentExecutor(_SynthExecutor):
    """Ray actor body for ``envs``: builds one theme's environment; returns it (or its rejection), what each
    stage spent, and the stage outputs it computed, as JSON."""

    def __init__(
        self, config: SynthEnvsConfig, access: ModelAccess, limiter: Any | None, environment: dict[str, str]
    ) -> None:
        super().__init__(access, limiter, environment)
        self.config = config

    async def run(self, unit: ThemeUnit) -> bytes:
        pool, client = await self._services()
        store = MemoryStageStore(unit.stages)
        build = EnvironmentBuild(self.config, client, pool, store)
        item, costs = await build.build(unit.theme, unit.discovery_usage)
        answer = {
            "position": unit.position,
            "environment": item.model_dump(mode="json") if isinstance(item, Environment) else None,
            "rejection": item.model_dump(mode="json") if isinstance(item, Rejection) else None,
            "costs": {stage: usage.model_dump(mode="json") for stage, usage in costs.items()},
            "stages": [[stage, key, data] for stage, key, data in store.saved],
            "fresh": build.fresh.model_dump(mode="json"),
        }
        return orjson.dumps(answer)


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

    def __init__(
        self, address: str = "local", *, sandbox_workers: int | None = None, require_full_confinement: bool = False
    ) -> None:
        self.address = address
        self.sandbox_workers = sandbox_workers
        self.require_full_confinement = require_full_confinement
        """Hub code: a node missing a confinement layer is refused instead of used (no --allow-weak-sandbox)."""
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
        kind: AttemptKind,
        config: ScenarioSynthesisConfig | QueryConfig,
        environments: list[Environment],
        client: LLMClient,
        *,
        graph: ToolGraph | None = None,
    ) -> None:
        """Start the attempt executors of ``scenarios`` or ``queries`` (see ``_start``)."""
        models = [config.model, *([config.solve_with] if config.solve_with else [])]
        plan = AttemptPlan(kind=kind, config=config, environments=environments, graph=graph)
        await self._start(AttemptExecutor, plan, client, models, config.concurrency)

    async def execute(self, units: list[AttemptUnit], on_record: Callable[[AttemptRecord], None]) -> None:
        """Run every attempt once on the executors; ``on_record`` gets each finished one, in this process."""
        await self._execute(list(units), lambda payload: on_record(AttemptRecord.model_validate_json(payload)))

    async def build_environments(
        self, run: EnvironmentBuild, themes: list[Theme], discovery_usage: list[Usage]
    ) -> list[tuple[Environment | Rejection, dict[str, Usage]]]:
        """Build each theme's environment on the executors; ``run`` is the driver's, whose stage store gets the
        stage outputs the builds computed. Results come back in the order of ``themes``."""
        if not themes:
            return []
        await self._start(EnvironmentExecutor, run.config, run.client, [run.config.model], run.config.concurrency)
        built: dict[int, tuple[Environment | Rejection, dict[str, Usage]]] = {}

        def arrived(payload: bytes) -> None:
            answer = orjson.loads(payload)
            for stage, key, data in answer["stages"]:
                run.store.save(stage, key, data)
            run.fresh.add(Usage.model_validate(answer["fresh"]))
            item: Environment | Rejection
            if answer["environment"] is not None:
                item = Environment.model_validate(answer["environment"])
            else:
                item = Rejection.model_validate(answer["rejection"])
            costs = {stage: Usage.model_validate(answer["costs"].get(stage) or {}) for stage in COST_STAGES}
            built[answer["position"]] = item, costs

        units = [
            ThemeUnit(position, theme, usage, run.stored_stages(theme))
            for position, (theme, usage) in enumerate(zip(themes, discovery_usage, strict=True))
        ]
        await self._execute(units, arrived)
        return [built[position] for position in range(len(themes))]

    async def _start(self, body: type, plan: Any, client: LLMClient, models: list[str], concurrency: int) -> None:
        """Join the cluster, check its nodes and start one executor (``body``) on each; ``client`` is the
        driver's, whose aliases and limits the executors take. Raises ``ClusterUnavailable`` (one line) before
        any unit runs."""
        self.connect()
        ray = import_ray()
        nodes = alive_nodes()
        if not nodes:
            raise ClusterUnavailable(f"the Ray cluster at {self.address} has no alive node")
        nodes = await asyncio.to_thread(check_nodes, nodes, ["synth"])
        models = sorted(set(models))
        if client.default_limits.rpm or client.default_limits.tpm:
            self.limiter = (
                ray.remote(ClusterLimiter)
                .options(num_cpus=0, max_concurrency=LIMITER_MAX_CONCURRENCY, name=f"synth-limiter-{self._token}")
                .remote()
            )
        access = ModelAccess(
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
        self.concurrency = concurrency
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        for number, node in enumerate(nodes, start=1):
            name = f"synth-executor-{self._token}-{number}"
            actor = (
                ray.remote(body)
                .options(
                    name=name,
                    num_cpus=0,
                    max_restarts=0,
                    max_concurrency=concurrency + 8,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False),
                )
                .remote(plan, access, self.limiter, environment)
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
            status: ExecutorStatus = await asyncio.wait_for(
                asyncio.wrap_future(executor.actor.ready.remote().future()), READY_TIMEOUT_S
            )
        except TimeoutError:
            raise ClusterUnavailable(
                f"node {executor.node}: no synthesis executor started there within {READY_TIMEOUT_S:.0f}s"
            ) from None
        except ray.exceptions.RayTaskError as exc:
            raise ClusterUnavailable(
                f"node {executor.node}: the sandbox cannot start there: {root_cause(exc)}"
            ) from None
        if status.missing_layers and self.require_full_confinement:
            raise ClusterUnavailable(
                f"node {executor.node}: confinement layers missing there: {', '.join(status.missing_layers)}; "
                "refusing to run code from the Hub (pass --allow-weak-sandbox to run it anyway)"
            )
        if status.missing_layers:
            logger.warning(
                "node %s runs the model's code without: %s (see `harness doctor` there)",
                executor.node,
                ", ".join(status.missing_layers),
            )

    async def _execute(self, units: list[Any], on_result: Callable[[bytes], None]) -> None:
        """Run every unit once on the executors; ``on_result`` gets each unit's answer, in this process."""
        ray = import_ray()
        queue = deque(units)
        running: dict[asyncio.Future[bytes], tuple[Any, _Executor]] = {}
        try:
            while queue or running:
                alive = [e for e in self.executors if e.alive]
                if not alive and not running:
                    raise ClusterUnavailable(
                        f"no synthesis executor is left on the cluster; {len(queue)} units did not run: "
                        "run again over the same --out once nodes are back"
                    )
                while queue and alive and len(running) < self.concurrency * len(alive):
                    executor = min(alive, key=lambda e: e.load)
                    unit = queue.popleft()
                    running[asyncio.wrap_future(executor.actor.run.remote(unit).future())] = (unit, executor)
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
                    on_result(payload)
        finally:
            for future in running:
                future.cancel()

    def _lose(self, executor: _Executor, error: BaseException) -> None:
        if not executor.alive:
            return
        executor.alive = False
        logger.warning(
            "executor %s on node %s was lost (%s); its unfinished units are re-queued",
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
