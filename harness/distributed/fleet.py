"""One executor fleet on a Ray cluster, used by runs and synthesis alike: the only cluster dispatch loop.

:meth:`Fleet.start` joins (or starts) the cluster, places the cluster-wide rpm/tpm limiter on the driver's node,
starts executors on every node while the nodes are checked, and waits for their sandboxes. :meth:`Fleet.dispatch`
hands opaque work units out in batches (one ``submit`` call per executor) and takes results back in batches (a
``collect`` long poll that each executor always has one of outstanding), remembering which units each executor
holds. When an executor or its node dies, its calls fail with a Ray error: every unit it held and had not
returned goes back to the front of the queue and runs on another executor, a replacement is started on the lost
one's node when the node is still there, and nothing more is accepted from the lost one. So each unit's result
is handed over exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from harness.sandbox.check_batches import MAX_BATCH_EPISODES

from .cluster import ClusterUnavailable, alive_nodes, check_nodes, import_ray, join, root_cause
from .limiter import ClusterLimiter
from .settings import ExecutorConfig, WorkUnit
from .worker import ExecutorStatus, FleetExecutor

logger = logging.getLogger(__name__)

READY_TIMEOUT_S = 300.0
COLLECT_WAIT_S = 5.0
SHUTDOWN_TIMEOUT_S = 20.0
LIMITER_MAX_CONCURRENCY = 100_000
EXECUTOR_CALLS_IN_FLIGHT = 64
"""Ray calls an executor serves at once: its ready, submit and collect calls (units run as tasks inside it)."""


GROUP_ON_ONE_EXECUTOR = MAX_BATCH_EPISODES
"""Units of one group sent to one executor at most, while others of it are held there: as many as one check
process scores, so a task with many trials still spreads over the fleet."""


@dataclass
class ExecutorHandle:
    name: str
    actor: Any
    node_id: str
    node_address: str
    pid: int = 0
    alive: bool = True
    held: dict[str, WorkUnit] = field(default_factory=dict)
    """Units submitted to this executor whose results have not come back."""
    collecting: asyncio.Future[Any] | None = None

    @property
    def node(self) -> str:
        return f"{self.node_address} ({self.node_id[:8]})"


@dataclass(frozen=True)
class PlacedNode:
    """A node that passed its check, and how many executors became ready on it."""

    node: dict[str, Any]
    executors: int


class Fleet:
    """Executors of one kind (``body``, a :class:`FleetExecutor`) on the Ray cluster at ``address``.

    ``address``: ``local`` starts a Ray instance in this process, ``auto`` joins the cluster this machine belongs
    to, ``HOST:PORT`` or ``ray://HOST:PORT`` joins that one. ``what`` names the work in messages ("episode",
    "synthesis"), ``resume_hint`` says how to finish the work when no executor is left."""

    def __init__(
        self,
        address: str = "local",
        *,
        executors_per_node: int = 1,
        what: str = "work",
        resume_hint: str = "run again once nodes are back",
    ) -> None:
        self.address = address
        self.executors_per_node = executors_per_node
        self.what = what
        self.resume_hint = resume_hint
        self.executors: list[ExecutorHandle] = []
        self.limiter: Any = None
        self.statuses: list[ExecutorStatus] = []
        """One per executor that became ready, replacements included."""
        self._owns_ray = False
        self._joined = False
        self._token = uuid.uuid4().hex[:8]
        self._body: type[FleetExecutor] | None = None
        self._config: ExecutorConfig | None = None
        self._shared: tuple[Any, ...] = ()
        self._replacing: set[asyncio.Task[None]] = set()
        self._started = 0
        self._weak_nodes_reported: set[str] = set()

    def connect(self) -> None:
        """Join the cluster (once); ``ClusterUnavailable`` when it cannot be reached. Ray wants the main thread."""
        if not self._joined:
            self._owns_ray = join(self.address)
            self._joined = True

    async def start(
        self, body: type[FleetExecutor], config: ExecutorConfig, *, shared: tuple[Any, ...] = (), modules: list[str]
    ) -> list[PlacedNode]:
        """Start ``executors_per_node`` executors of ``body`` on every node that offers CPUs, each built from
        ``config``, the limiter and ``shared`` (object references every executor reads). The nodes are checked
        (``modules`` must import there) while the executors start; none gets a unit unless its node passed, and
        all are stopped if one did not. Raises ``ClusterUnavailable`` (one line) before any unit runs."""
        began = time.monotonic()
        self.connect()
        joined = time.monotonic()
        ray = import_ray()
        nodes = alive_nodes()
        if not nodes:
            raise ClusterUnavailable(f"the Ray cluster at {self.address} has no alive node")
        self._body, self._config, self._shared = body, config, shared
        if config.shares_a_limiter and self.limiter is None:
            self.limiter = self._start_limiter()
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
                self._stop_now(starting)
                raise outcome
        if not any(executor.alive for executor in starting):
            raise ClusterUnavailable(f"no {self.what} executor could start on the cluster at {self.address}: {lost}")
        logger.info(
            "cluster ready: joined in %.1fs, %d nodes checked in %.1fs, %d %s executors ready %.1fs later",
            joined - began,
            len(nodes),
            checked - joined,
            sum(executor.alive for executor in starting),
            self.what,
            time.monotonic() - checked,
        )
        placed: dict[str, int] = {}
        for executor in starting:
            if executor.alive:
                placed[executor.node_id] = placed.get(executor.node_id, 0) + 1
        return [PlacedNode(node, placed.get(node["NodeID"], 0)) for node in nodes]

    def _start_limiter(self) -> Any:
        """On the driver's node: the job ends with the driver anyway, while a limiter on a worker node that dies
        would fail every model call of every executor."""
        ray = import_ray()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        driver_node = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        return (
            ray.remote(ClusterLimiter)
            .options(
                num_cpus=0,
                max_concurrency=LIMITER_MAX_CONCURRENCY,
                name=f"harness-limiter-{self._token}",
                scheduling_strategy=driver_node,
            )
            .remote()
        )

    def _start_executor(self, node_id: str, node_address: str) -> ExecutorHandle:
        ray = import_ray()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self._started += 1
        name = f"harness-executor-{self._token}-{self._started}"
        actor = (
            ray.remote(self._body)
            .options(
                name=name,
                num_cpus=0,
                max_restarts=0,
                max_concurrency=EXECUTOR_CALLS_IN_FLIGHT,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            )
            .remote(self._config, self.limiter, *self._shared)
        )
        return ExecutorHandle(name=name, actor=actor, node_id=node_id, node_address=node_address)

    def _stop_now(self, executors: list[ExecutorHandle]) -> None:
        """Kill executors that must not run units (their node failed its check) without waiting for them."""
        ray = import_ray()
        for executor in executors:
            executor.alive = False
            with contextlib.suppress(Exception):  # already gone
                ray.kill(executor.actor, no_restart=True)

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
                f"node {executor.node}: no {self.what} executor started there within {READY_TIMEOUT_S:.0f}s"
            ) from None
        except ray.exceptions.RayTaskError as exc:
            raise ClusterUnavailable(
                f"node {executor.node}: the sandbox cannot start there: {root_cause(exc)}"
            ) from None
        executor.node_id, executor.pid = status.node_id, status.pid
        self.statuses.append(status)
        if status.missing_layers and executor.node_id not in self._weak_nodes_reported:
            self._weak_nodes_reported.add(executor.node_id)
            logger.warning(
                "node %s runs environment code without: %s (see `harness doctor` there)",
                executor.node,
                ", ".join(status.missing_layers),
            )

    async def dispatch(
        self,
        units: Iterable[WorkUnit],
        *,
        in_flight: int,
        on_result: Callable[[WorkUnit, bytes], None],
        may_start: Callable[[], bool] | None = None,
    ) -> int:
        """Run every unit once on the executors, at most ``in_flight`` at a time over the whole fleet;
        ``on_result`` gets each unit with its result, in this process. A unit that raises on its executor (a
        bug, not a failure its result records) stops the dispatch with that error. Once ``may_start`` says no
        (a spending limit), no unit is sent any more; those in flight finish. Returns how many were not run."""
        ray = import_ray()
        queue = deque(units)
        not_started = 0
        calls: dict[asyncio.Future[Any], ExecutorHandle] = {}
        try:
            while queue or any(executor.held for executor in self.executors):
                if queue and may_start is not None and not may_start():
                    not_started += len(queue)
                    queue.clear()
                    continue
                alive = [executor for executor in self.executors if executor.alive]
                if not alive:
                    if not self._replacing:
                        raise ClusterUnavailable(
                            f"no {self.what} executor is left on the cluster; {len(queue)} units did not run: "
                            f"{self.resume_hint}"
                        )
                    await asyncio.wait(set(self._replacing), return_when=asyncio.FIRST_COMPLETED)
                    continue
                self._submit(queue, alive, in_flight, calls)
                for handle in alive:
                    if handle.collecting is None:
                        reference = handle.actor.collect.remote(COLLECT_WAIT_S)
                        handle.collecting = asyncio.wrap_future(reference.future())
                        calls[handle.collecting] = handle
                done, _ = await asyncio.wait({*calls, *self._replacing}, return_when=asyncio.FIRST_COMPLETED)
                for future in done:
                    executor = calls.pop(future, None)
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
                        continue  # a lost executor's late answer: its units were re-queued already
                    for key, payload in answer:
                        unit = executor.held.pop(key, None)
                        if unit is not None:
                            on_result(unit, payload)
            return not_started
        finally:
            for future in calls:
                future.cancel()
            for executor in self.executors:
                executor.collecting = None
                executor.held.clear()

    def _submit(
        self,
        queue: deque[WorkUnit],
        alive: list[ExecutorHandle],
        in_flight: int,
        calls: dict[asyncio.Future[Any], ExecutorHandle],
    ) -> None:
        """Top every executor up, least loaded first, until ``in_flight`` units are held in all; a unit of a group
        goes where its group is held (``WorkUnit.group``)."""
        held = sum(len(executor.held) for executor in self.executors)
        batches: dict[str, list[WorkUnit]] = {}
        groups = groups_held(alive)
        while queue and held < in_flight:
            unit = queue.popleft()
            executor = min(alive, key=lambda e: len(e.held))
            if unit.group is not None:
                where, count = groups.get(unit.group, (None, 0))
                if where is not None and count < GROUP_ON_ONE_EXECUTOR:
                    executor = where
                groups[unit.group] = (executor, count + 1 if executor is where else 1)
            executor.held[unit.key] = unit
            batches.setdefault(executor.name, []).append(unit)
            held += 1
        for executor in alive:
            batch = batches.get(executor.name)
            if batch:
                reference = executor.actor.submit.remote(batch)
                calls[asyncio.wrap_future(reference.future())] = executor

    def _lose(self, executor: ExecutorHandle, error: BaseException) -> None:
        """An executor failed a call: stop using it, and start a replacement on its node if it is alive."""
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
        logger.warning("executor %s replaces %s on node %s", replacement.name, lost.name, lost.node)
        self.executors.append(replacement)

    async def stop_executors(self) -> None:
        """Shut the executors down (each closes its sandbox pool and client), then kill what is left of them."""
        if not self.executors:
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
        self.executors.clear()

    async def close(self) -> None:
        """Stop the executors and the limiter, and Ray itself when this fleet started it."""
        if not self.executors and self.limiter is None and not self._owns_ray:
            self._joined = False
            return
        ray = import_ray()
        await self.stop_executors()
        if self.limiter is not None:
            with contextlib.suppress(Exception):  # already gone
                ray.kill(self.limiter, no_restart=True)
            self.limiter = None
        if self._owns_ray:
            await asyncio.to_thread(ray.shutdown)
            self._owns_ray = False
        self._joined = False


def groups_held(executors: list[ExecutorHandle]) -> dict[str, tuple[ExecutorHandle, int]]:
    """Per group, an executor that holds units of it and how many it holds."""
    groups: dict[str, tuple[ExecutorHandle, int]] = {}
    for executor in executors:
        for unit in executor.held.values():
            if unit.group is not None:
                where, count = groups.get(unit.group, (executor, 0))
                if where is executor:
                    groups[unit.group] = (executor, count + 1)
    return groups
