"""The driver side of a run on a Ray cluster: place executors, dispatch episodes, collect every result once.

The run's driver (``harness.run.driver``) plans episodes and owns the run folder as for a local run; this
backend only decides where each episode runs. Episodes go to an executor in batches (one ``submit`` call) and
come back in batches (a ``collect`` long poll that each executor always has one of outstanding), so a Ray
call's cost is shared by the episodes it carries. The driver remembers which episodes each executor holds.
When an executor or its node dies, its calls fail with a Ray error: every episode it held and had not returned
goes back to the front of the queue and runs on another executor (a replacement is started on the lost one's
node when the node is still there), and nothing more is accepted from it. So each planned episode gets exactly
one ``on_result``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.llm import LLMClient
from harness.llm.aliases import AliasEntry
from harness.llm.transport import DIRECT_ROUTE_VARIABLE, OPENAI_COMPATIBLE
from harness.run.backend import EpisodeJob
from harness.run.config import RunConfig
from harness.run.plan import EpisodeSpec
from harness.schema import ClusterInfo, ClusterNode, Trajectory

from .cluster import ClusterUnavailable, alive_nodes, check_nodes, import_ray, join, root_cause
from .executor import EpisodeExecutor, EpisodeTicket, ExecutorPlan, ExecutorStatus
from .limiter import ClusterLimiter

logger = logging.getLogger(__name__)

READY_TIMEOUT_S = 300.0
COLLECT_WAIT_S = 5.0
SHUTDOWN_TIMEOUT_S = 20.0
LIMITER_MAX_CONCURRENCY = 100_000
_shipped_libraries: dict[tuple[str, str], Any] = {}


@dataclass
class ExecutorHandle:
    name: str
    actor: Any
    node_id: str
    node_address: str
    pid: int = 0
    alive: bool = True
    held: dict[str, EpisodeSpec] = field(default_factory=dict)
    """Episodes submitted to this executor whose trajectories have not come back."""
    collecting: asyncio.Future[Any] | None = None

    @property
    def node(self) -> str:
        return f"{self.node_address} ({self.node_id[:8]})"


def models_of(config: RunConfig) -> list[str]:
    return sorted({config.model, config.user_model or config.model})


def alias_entries_for(client: LLMClient, models: list[str]) -> dict[str, AliasEntry]:
    """The driver's alias table, with the run's models fixed to what they resolve to here (environment
    overrides of api_base included), so executors resolve them exactly as the driver did."""
    entries = dict(client.aliases.entries)
    for model in models:
        resolved = client.resolve(model)
        if resolved.alias is not None:
            entries[model] = AliasEntry(
                model=resolved.provider_model,
                api_base=resolved.api_base,
                api_key_env=resolved.api_key_env,
                params=resolved.params,
                max_episodes=resolved.max_episodes,
            )
    return entries


def forwarded_variables(client: LLMClient, models: list[str]) -> list[str]:
    """Names of the environment variables executors need from the driver: the API keys the run's model
    aliases name, the providers' usual key variables, and the model-transport switch."""
    names = {DIRECT_ROUTE_VARIABLE}
    for model in models:
        resolved = client.resolve(model)
        if resolved.api_key_env:
            names.add(resolved.api_key_env)
        provider = resolved.provider
        names.update(OPENAI_COMPATIBLE.get(provider, ((), None))[0])
        if provider:
            names.add(f"{provider.upper()}_API_KEY")
    return sorted(names)


class RayBackend:
    """Runs a run's episodes on a Ray cluster (``harness run --ray ADDRESS``).

    ``address``: ``local`` starts a Ray instance in this process, ``auto`` joins the cluster this machine
    belongs to, ``HOST:PORT`` or ``ray://HOST:PORT`` joins that one. ``executors_per_node`` episode executors
    are placed on every node that offers CPUs, each with its own sandbox pool (``--workers`` processes, by
    default one per core of its node) and model client.
    """

    def __init__(self, address: str = "local", *, executors_per_node: int = 1) -> None:
        self.address = address
        self.executors_per_node = executors_per_node
        self.executors: list[ExecutorHandle] = []
        self.limiter: Any = None
        self._owns_ray = False
        self._token = uuid.uuid4().hex[:8]
        self._plan: ExecutorPlan | None = None
        self._library_ref: Any = None
        self._environment: dict[str, str] = {}
        self._max_concurrency = 1000
        self._replacing: set[asyncio.Task[None]] = set()
        self._started = 0
        self._weak_nodes_reported: set[str] = set()
        self.reset_results_adopted: list[int] = []
        """Per executor that became ready: scenarios it took the driver's reset results for."""

    async def start(self, job: EpisodeJob) -> ClusterInfo:
        began = time.monotonic()
        self._owns_ray = join(self.address)  # blocks briefly, before any episode; Ray wants the main thread
        joined = time.monotonic()
        ray = import_ray()
        nodes = alive_nodes()
        if not nodes:
            raise ClusterUnavailable(f"the Ray cluster at {self.address} has no alive node")
        factories = [job.agent_factory, job.user_factory]
        modules = sorted({f.__module__ for f in factories if f is not None and f.__module__ != "__main__"})

        client, config = job.client, job.config
        models = models_of(config)
        if client.default_limits.rpm or client.default_limits.tpm:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            # On the driver's node: the run ends with the driver anyway, while a limiter on a worker node that
            # dies would fail every episode's model call.
            driver_node = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)
            self.limiter = (
                ray.remote(ClusterLimiter)
                .options(
                    num_cpus=0,
                    max_concurrency=LIMITER_MAX_CONCURRENCY,
                    name=f"harness-limiter-{self._token}",
                    scheduling_strategy=driver_node,
                )
                .remote()
            )
        self._plan = ExecutorPlan(
            config=config,
            agent_factory=job.agent_factory,
            user_factory=job.user_factory,
            aliases=alias_entries_for(client, models),
            retry=client.retry,
            default_limits=client.default_limits,
            sandbox_limits=job.sandbox_limits,
            sandbox_workers=config.workers,
            reset_results=job.reset_results,
        )
        self._library_ref = self._ship_library(job)
        names = forwarded_variables(client, models)
        self._environment = {name: os.environ[name] for name in names if name in os.environ}
        if self._environment:
            logger.info("executors get these variables from the driver: %s", ", ".join(sorted(self._environment)))
        self._max_concurrency = config.concurrency + 8

        # Executors start (each imports the package, seconds) while the nodes are checked; none gets an episode
        # unless its node passed, and all are stopped if one did not.
        starting = [
            self._start_executor(node["NodeID"], node["NodeManagerAddress"])
            for node in nodes
            for _ in range(self.executors_per_node)
        ]
        self.executors.extend(starting)
        try:
            passed = {node["NodeID"] for node in await asyncio.to_thread(check_nodes, nodes, modules)}
        except BaseException:
            self._stop_now(starting)
            raise
        self._stop_now([executor for executor in starting if executor.node_id not in passed])
        starting = [executor for executor in starting if executor.alive]
        nodes = [node for node in nodes if node["NodeID"] in passed]
        checked = time.monotonic()
        outcomes = await asyncio.gather(*(self._await_ready(executor) for executor in starting), return_exceptions=True)
        lost = ""
        for executor, outcome in zip(starting, outcomes, strict=True):
            if isinstance(outcome, ray.exceptions.RayActorError):  # its process or node died: not the sandbox
                executor.alive = False
                lost = root_cause(outcome)
                logger.warning(
                    "executor on node %s was lost while starting (%s); running without it", executor.node, lost
                )
            elif isinstance(outcome, BaseException):
                raise outcome
        if not any(executor.alive for executor in starting):
            raise ClusterUnavailable(f"no episode executor could start on the cluster at {self.address}: {lost}")
        logger.info(
            "cluster ready: joined in %.1fs, %d nodes checked in %.1fs, executors ready %.1fs later",
            joined - began,
            len(nodes),
            checked - joined,
            time.monotonic() - checked,
        )
        placed: dict[str, int] = {}
        for executor in starting:
            if executor.alive:
                placed[executor.node_id] = placed.get(executor.node_id, 0) + 1
        return ClusterInfo(
            address=self.address,
            ray_version=ray.__version__,
            nodes=[
                ClusterNode(
                    node_id=node["NodeID"],
                    address=node["NodeManagerAddress"],
                    resources={k: float(v) for k, v in node.get("Resources", {}).items() if not k.startswith("node:")},
                    executors=placed.get(node["NodeID"], 0),
                )
                for node in nodes
            ],
        )

    def _stop_now(self, executors: list[ExecutorHandle]) -> None:
        """Kill executors that must not run episodes (their node failed its check) without waiting for them."""
        ray = import_ray()
        for executor in executors:
            executor.alive = False
            with contextlib.suppress(Exception):  # already gone
                ray.kill(executor.actor, no_restart=True)

    def _ship_library(self, job: EpisodeJob) -> Any:
        """Put the library in the object store once per Ray job and fingerprint."""
        ray = import_ray()
        key = (ray.get_runtime_context().get_job_id(), job.library.source.fingerprint or self._token)
        reference = _shipped_libraries.get(key)
        if reference is None:
            reference = _shipped_libraries[key] = ray.put(job.library)
        return reference

    def _start_executor(self, node_id: str, node_address: str) -> ExecutorHandle:
        ray = import_ray()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self._started += 1
        name = f"harness-executor-{self._token}-{self._started}"
        actor = (
            ray.remote(EpisodeExecutor)
            .options(
                name=name,
                num_cpus=0,
                max_restarts=0,
                max_concurrency=self._max_concurrency,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            )
            .remote(self._plan, self._library_ref, self.limiter, self._environment)
        )
        return ExecutorHandle(name=name, actor=actor, node_id=node_id, node_address=node_address)

    async def _await_ready(self, executor: ExecutorHandle) -> None:
        """Wait for an executor's sandbox to start. Raises ``ClusterUnavailable`` when it cannot start there,
        and Ray's ``RayActorError`` when the executor's process or node died meanwhile."""
        ray = import_ray()
        try:
            status: ExecutorStatus = await asyncio.wait_for(
                asyncio.wrap_future(executor.actor.ready.remote().future()), READY_TIMEOUT_S
            )
        except TimeoutError:
            raise ClusterUnavailable(
                f"node {executor.node}: no episode executor started there within {READY_TIMEOUT_S:.0f}s"
            ) from None
        except ray.exceptions.RayTaskError as exc:
            raise ClusterUnavailable(
                f"node {executor.node}: the sandbox cannot start there: {root_cause(exc)}"
            ) from None
        executor.node_id, executor.pid = status.node_id, status.pid
        self.reset_results_adopted.append(status.reset_results_adopted)
        if status.missing_layers and executor.node_id not in self._weak_nodes_reported:
            self._weak_nodes_reported.add(executor.node_id)
            logger.warning(
                "node %s runs environment code without: %s (see `harness doctor` there)",
                executor.node,
                ", ".join(status.missing_layers),
            )

    async def execute(
        self, specs: list[EpisodeSpec], *, run_id: str, in_flight: int, on_result: Callable[[Trajectory], None]
    ) -> None:
        ray = import_ray()
        queue = deque(specs)
        calls: dict[asyncio.Future[Any], ExecutorHandle] = {}
        try:
            while queue or any(executor.held for executor in self.executors):
                alive = [executor for executor in self.executors if executor.alive]
                if not alive:
                    if not self._replacing:
                        raise ClusterUnavailable(
                            f"no episode executor is left on the cluster; {len(queue)} episodes did not run: "
                            "run again with --resume once nodes are back"
                        )
                    await asyncio.wait(set(self._replacing), return_when=asyncio.FIRST_COMPLETED)
                    continue
                self._submit(queue, alive, in_flight, run_id, calls)
                for executor in alive:
                    if executor.collecting is None:
                        reference = executor.actor.collect.remote(COLLECT_WAIT_S)
                        executor.collecting = asyncio.wrap_future(reference.future())
                        calls[executor.collecting] = executor
                done, _ = await asyncio.wait({*calls, *self._replacing}, return_when=asyncio.FIRST_COMPLETED)
                for future in done:
                    executor = calls.pop(future, None)  # type: ignore[arg-type]
                    if executor is None:
                        continue  # a replacement finished starting: it is picked up above
                    if future is executor.collecting:
                        executor.collecting = None
                    try:
                        answer = future.result()
                    except ray.exceptions.RayTaskError as exc:
                        raise exc.as_instanceof_cause() from None
                    except ray.exceptions.RayError as exc:
                        if executor.alive:
                            queue.extendleft(reversed(list(executor.held.values())))
                            executor.held.clear()
                        self._lose(executor, exc)
                        continue
                    if not executor.alive or answer is None:
                        continue  # a lost executor's late answer: its episodes were re-queued already
                    for episode_id, payload in answer:
                        if executor.held.pop(episode_id, None) is not None:
                            on_result(Trajectory.model_validate_json(payload))
        finally:
            for future in calls:
                future.cancel()
            for executor in self.executors:
                executor.collecting = None
                executor.held.clear()

    def _submit(
        self,
        queue: deque[EpisodeSpec],
        alive: list[ExecutorHandle],
        in_flight: int,
        run_id: str,
        calls: dict[asyncio.Future[Any], ExecutorHandle],
    ) -> None:
        """Top every executor up, least loaded first, until ``in_flight`` episodes are held in all."""
        held = sum(len(executor.held) for executor in self.executors)
        batches: dict[str, list[EpisodeSpec]] = {}
        while queue and held < in_flight:
            executor = min(alive, key=lambda e: len(e.held))
            spec = queue.popleft()
            executor.held[spec.episode_id] = spec
            batches.setdefault(executor.name, []).append(spec)
            held += 1
        for executor in alive:
            batch = batches.get(executor.name)
            if batch:
                reference = executor.actor.submit.remote([EpisodeTicket.of(spec) for spec in batch], run_id)
                calls[asyncio.wrap_future(reference.future())] = executor

    def _lose(self, executor: ExecutorHandle, error: BaseException) -> None:
        """An executor failed a call: stop using it, and start a replacement on its node if it is alive."""
        if not executor.alive:
            return
        executor.alive = False
        logger.warning(
            "executor %s on node %s was lost (%s); its unfinished episodes are re-queued",
            executor.name,
            executor.node,
            type(error).__name__,
        )
        ray = import_ray()
        with contextlib.suppress(Exception):  # already gone
            ray.kill(executor.actor, no_restart=True)
        nodes = {node["NodeID"]: node for node in alive_nodes()}
        if executor.node_id not in nodes:
            return
        task = asyncio.create_task(self._replace(executor))
        self._replacing.add(task)
        task.add_done_callback(self._replacing.discard)

    async def _replace(self, lost: ExecutorHandle) -> None:
        ray = import_ray()
        replacement = self._start_executor(lost.node_id, lost.node_address)
        try:
            await self._await_ready(replacement)
        except (ClusterUnavailable, ray.exceptions.RayError) as exc:
            logger.warning("executor on node %s not replaced: %s", lost.node, exc)
            with contextlib.suppress(Exception):
                ray.kill(replacement.actor, no_restart=True)
            return
        self.executors.append(replacement)

    async def close(self) -> None:
        if not self.executors and self.limiter is None and not self._owns_ray:
            return
        ray = import_ray()
        for task in list(self._replacing):
            task.cancel()
        alive = [executor for executor in self.executors if executor.alive]
        if alive:
            shutdowns = [asyncio.wrap_future(e.actor.shutdown.remote().future()) for e in alive]
            await asyncio.wait(shutdowns, timeout=SHUTDOWN_TIMEOUT_S)
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
