"""``harness synth envs|scenarios|queries --ray``: synthesis on a Ray cluster, one writer of the output folder.

The driver plans the work exactly as a local run does and is the only writer of the output folder, so a re-run
over it resumes as a local one does. Independent units run on synthesis executors: Ray actors, one per node,
each with its own jailed sandbox pool and model client, that return each unit's result to the driver.

- ``scenarios`` and ``queries``: a unit is one attempt (one environment's variation, one chain). The driver
  skips what the journal holds, appends each finished attempt to it and writes the outputs at the end.
- ``envs``: a unit is one theme's environment (plan, model, assess and repair, validate). The driver discovers
  tasks and merges themes itself, sends each theme with the stage outputs it already has on disk, and writes
  the stage outputs the build computed when the theme's result comes back.

The cluster plumbing is ``harness.distributed.fleet``'s, the same fleet a run's episodes use: joining, checking
nodes, the cluster-wide rpm/tpm limiter on the driver's node, settings reaching executors through one config, and
an executor that dies having its unfinished units re-queued and being replaced, so each unit's result is written
once. This module holds only what is specific to synthesis: its executors' work and the driver's side of it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import orjson

from harness.distributed.fleet import Fleet
from harness.distributed.settings import ExecutorConfig, WorkUnit, executor_config
from harness.distributed.worker import FleetExecutor
from harness.llm import LLMClient
from harness.sandbox.spec import CodeOrigin, JailSpec
from harness.schema import Environment, Usage
from synth.cluster import AttemptKind, AttemptUnit
from synth.environment_build import COST_STAGES, EnvironmentBuild, SynthEnvsConfig
from synth.graph import ToolGraph
from synth.queries import QueryConfig, QuerySynthesizer
from synth.records import Rejection, Theme
from synth.scenarios import AttemptRecord, ScenarioSynthesisConfig, ScenarioSynthesizer
from synth.stages import MemoryStageStore

logger = logging.getLogger(__name__)

RUN_ATTEMPT = "run_attempt"
BUILD_THEME = "build_theme"


@dataclass(frozen=True)
class ThemeUnit:
    """One theme to build, with the stage outputs the driver already has for it."""

    position: int
    theme: Theme
    discovery_usage: Usage
    stages: dict[tuple[str, str], dict[str, Any]]


@dataclass(frozen=True)
class AttemptPlan:
    """The job of attempt executors (``ExecutorConfig.job``)."""

    kind: AttemptKind
    config: ScenarioSynthesisConfig | QueryConfig
    environments: list[Environment]
    graph: ToolGraph | None


class AttemptExecutor(FleetExecutor):
    """Ray actor body for ``scenarios`` and ``queries``: runs attempts, returns their journal records as JSON."""

    WORK: ClassVar[frozenset[str]] = frozenset({RUN_ATTEMPT})

    def __init__(self, config: ExecutorConfig, limiter: Any | None) -> None:
        super().__init__(config, limiter)
        self.plan: AttemptPlan = config.job
        self.environments = {e.id: e for e in self.plan.environments}
        self._synthesizer: ScenarioSynthesizer | QuerySynthesizer | None = None

    async def run_attempt(self, unit: AttemptUnit) -> bytes:
        if self._synthesizer is None:
            plan = self.plan
            if isinstance(plan.config, QueryConfig):
                assert plan.graph is not None
                self._synthesizer = QuerySynthesizer(self.client, self.pool, plan.graph, plan.config)
            else:
                self._synthesizer = ScenarioSynthesizer(self.client, self.pool, plan.config)
        synthesizer = self._synthesizer
        if isinstance(synthesizer, QuerySynthesizer):
            record = await synthesizer.attempt(unit.index, self.environments, unit.key)
        else:
            record = await synthesizer.attempt(self.environments[unit.environment_id], unit.index)
        return record.model_dump_json().encode()


class EnvironmentExecutor(FleetExecutor):
    """Ray actor body for ``envs``: builds one theme's environment; returns it (or its rejection), what each
    stage spent, and the stage outputs it computed, as JSON. ``config.job`` is the run's ``SynthEnvsConfig``."""

    WORK: ClassVar[frozenset[str]] = frozenset({BUILD_THEME})

    async def build_theme(self, unit: ThemeUnit) -> bytes:
        config: SynthEnvsConfig = self.config.job
        store = MemoryStageStore(unit.stages)
        build = EnvironmentBuild(config, self.client, self.pool, store)
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


class RaySynthesis:
    """Runs synthesis on the executor fleet of the Ray cluster at ``address`` (``local`` starts one in this
    process, ``auto`` joins the cluster this machine belongs to, ``HOST:PORT`` or ``ray://HOST:PORT`` joins that
    one). One executor per node that offers CPUs, each with ``concurrency`` units in flight and a sandbox pool
    made from ``jail`` (``Library.jail`` of the library synthesized from, so Hub code is refused on a node missing a
    confinement layer unless the user allowed it; by default a local library's)."""

    def __init__(self, address: str = "local", *, jail: JailSpec | None = None) -> None:
        self.address = address
        self.jail = jail or JailSpec.for_code(CodeOrigin.LOCAL)
        self.fleet = Fleet(address, what="synthesis", resume_hint="run again over the same --out once nodes are back")
        self.concurrency = 1

    def connect(self) -> None:
        """Join the cluster (once); ``ClusterUnavailable`` when it cannot be reached."""
        self.fleet.connect()

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

    async def execute(
        self,
        units: list[AttemptUnit],
        on_record: Callable[[AttemptRecord], None],
        may_start: Callable[[], bool] | None = None,
    ) -> int:
        """Run every attempt once on the executors; ``on_record`` gets each finished one, in this process. Returns
        how many ``may_start`` kept from starting."""
        work = [WorkUnit(f"{unit.environment_id}/{unit.index}/{unit.key}", RUN_ATTEMPT, unit) for unit in units]
        return await self._dispatch(
            work, lambda payload: on_record(AttemptRecord.model_validate_json(payload)), may_start
        )

    async def build_environments(
        self,
        run: EnvironmentBuild,
        themes: list[Theme],
        discovery_usage: list[Usage],
        may_start: Callable[[], bool] | None = None,
    ) -> list[tuple[Environment | Rejection, dict[str, Usage]]]:
        """Build each theme's environment on the executors; ``run`` is the driver's, whose stage store gets the
        stage outputs the builds computed. Results come back in the order of ``themes``; a theme ``may_start`` kept
        from starting has none."""
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
            WorkUnit(str(position), BUILD_THEME, ThemeUnit(position, theme, usage, run.stored_stages(theme)))
            for position, (theme, usage) in enumerate(zip(themes, discovery_usage, strict=True))
        ]
        await self._dispatch(units, arrived, may_start)
        return [built[position] for position in range(len(themes)) if position in built]

    async def _start(
        self, body: type[FleetExecutor], job: Any, client: LLMClient, models: list[str], concurrency: int
    ) -> None:
        """Start the fleet's executors (``body``, one per node); ``client`` is the driver's, whose aliases, limits
        and timeout the executors take. Raises ``ClusterUnavailable`` (one line) before any unit runs."""
        settings = executor_config(
            client,
            models,
            job,
            cache_dir=None,  # answers are not cached on executors: the driver alone writes the output folder
            jail=self.jail,
        )
        if settings.environment:
            logger.info("executors get these variables from the driver: %s", ", ".join(sorted(settings.environment)))
        self.concurrency = concurrency
        await self.fleet.stop_executors()  # a second build on the same fleet starts its own kind of executors
        await self.fleet.start(body, settings, modules=["synth"])

    async def _dispatch(
        self, units: list[WorkUnit], on_result: Callable[[bytes], None], may_start: Callable[[], bool] | None = None
    ) -> int:
        """Run every unit once; ``on_result`` gets each unit's answer, in this process. Returns how many units
        ``may_start`` kept from starting."""
        executors = sum(executor.alive for executor in self.fleet.executors)
        return await self.fleet.dispatch(
            units,
            in_flight=self.concurrency * max(executors, 1),
            on_result=lambda _unit, payload: on_result(payload),
            may_start=may_start,
        )

    async def close(self) -> None:
        await self.fleet.close()
