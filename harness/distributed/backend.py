"""``harness run --ray``: the run's episodes on the executor fleet.

The run's driver (``harness.run.driver``) plans episodes and owns the run folder as for a local run; this
backend only turns each planned episode into a work unit for the fleet (``harness.distributed.fleet``), which
decides where it runs, re-queues it when its executor or node is lost, and hands each trajectory back once.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

from harness.run.backend import EpisodeJob
from harness.run.config import RunConfig
from harness.run.plan import EpisodeSpec
from harness.run.spending import SpendLimit
from harness.schema import ClusterInfo, ClusterNode, Trajectory
from harness.scoring.checks import batch_key

from .cluster import import_ray
from .executor import RUN_EPISODE, EpisodeExecutor, EpisodeTicket, ExecutorPlan
from .fleet import ExecutorHandle, Fleet
from .settings import WorkUnit, executor_config

logger = logging.getLogger(__name__)

_shipped_libraries: dict[tuple[str, str], Any] = {}


def batch_group(spec: EpisodeSpec) -> str:
    """The group of an episode's unit: its task, as the pool's check batches key it."""
    return "/".join(batch_key(spec.scenario))


def models_of(config: RunConfig) -> list[str]:
    return sorted({config.model, config.user_model or config.model})


class RayBackend:
    """Runs a run's episodes on a Ray cluster (``harness run --ray ADDRESS``).

    ``address``: ``local`` starts a Ray instance in this process, ``auto`` joins the cluster this machine
    belongs to, ``HOST:PORT`` or ``ray://HOST:PORT`` joins that one. ``executors_per_node`` episode executors
    are placed on every node that offers CPUs, each with its own sandbox pool (``--workers`` processes, by
    default one per core of its node) and model client.
    """

    def __init__(self, address: str = "local", *, executors_per_node: int = 1) -> None:
        self.spend_limit: SpendLimit | None = None
        self.address = address
        self._token = uuid.uuid4().hex[:8]
        self.fleet = Fleet(
            address,
            executors_per_node=executors_per_node,
            what="episode",
            resume_hint="run again with --resume once nodes are back",
        )

    @property
    def executors(self) -> list[ExecutorHandle]:
        return self.fleet.executors

    @property
    def limiter(self) -> Any:
        return self.fleet.limiter

    @property
    def reset_results_adopted(self) -> list[int]:
        """Per executor that became ready: scenarios it took the driver's reset results for."""
        return [status.reset_results_adopted for status in self.fleet.statuses]

    async def start(self, job: EpisodeJob) -> ClusterInfo:
        self.spend_limit = job.spend_limit
        self.fleet.connect()  # blocks briefly, before any episode; Ray wants the main thread
        ray = import_ray()
        config = job.config
        factories = [job.agent_factory, job.user_factory]
        modules = sorted({f.__module__ for f in factories if f is not None and f.__module__ != "__main__"})
        plan = ExecutorPlan(config, job.agent_factory, job.user_factory, job.reset_results)
        settings = executor_config(
            job.client,
            models_of(config),
            plan,
            timeout=config.timeout,
            cache_dir=config.cache_dir,
            jail=job.library.jail(
                allow_weak_sandbox=config.allow_weak_sandbox, workers=config.workers, limits=job.sandbox_limits
            ),
        )
        if settings.environment:
            logger.info("executors get these variables from the driver: %s", ", ".join(sorted(settings.environment)))
        placed = await self.fleet.start(EpisodeExecutor, settings, shared=(self._ship_library(job),), modules=modules)
        return ClusterInfo(
            address=self.address,
            ray_version=ray.__version__,
            nodes=[
                ClusterNode(
                    node_id=place.node["NodeID"],
                    address=place.node["NodeManagerAddress"],
                    resources={
                        k: float(v) for k, v in place.node.get("Resources", {}).items() if not k.startswith("node:")
                    },
                    executors=place.executors,
                )
                for place in placed
            ],
        )

    def _ship_library(self, job: EpisodeJob) -> Any:
        """Put the library in the object store once per Ray job and fingerprint."""
        ray = import_ray()
        fingerprint = job.library.source.fingerprint or self._token
        key = (ray.get_runtime_context().get_job_id(), fingerprint)
        reference = _shipped_libraries.get(key)
        if reference is None:
            reference = _shipped_libraries[key] = ray.put(job.library)
        return reference

    async def execute(
        self, specs: list[EpisodeSpec], *, run_id: str, in_flight: int, on_result: Callable[[Trajectory], None]
    ) -> None:
        def arrived(_unit: WorkUnit, payload: bytes) -> None:
            on_result(Trajectory.model_validate_json(payload))

        # A task's trials go to one executor, whose pool scores them in one check process (``run_one_episode``
        # announces each episode there, as the local backend's do).
        units = [
            WorkUnit(spec.episode_id, RUN_EPISODE, EpisodeTicket.of(spec, run_id), group=batch_group(spec))
            for spec in specs
        ]
        limit = self.spend_limit
        not_started = await self.fleet.dispatch(
            units,
            in_flight=in_flight,
            on_result=arrived,
            may_start=None if limit is None else lambda: not limit.reached(),
        )
        if limit is not None:
            limit.not_started += not_started

    async def close(self) -> None:
        await self.fleet.close()
