"""The executor side of the fleet: a Ray actor on one node with its own sandbox pool and model client.

Work units arrive in batches (:meth:`FleetExecutor.submit`) and their results leave in batches
(:meth:`FleetExecutor.collect`, a long poll), so the cost of a Ray call is shared by the units it carries rather
than paid twice by each one. A unit names the method that runs it; a kind of executor (episodes, synthesis
attempts, environment builds) is a subclass that lists its methods in ``WORK`` and returns each result as bytes.
An executor never writes a result itself: the driver does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, ClassVar

from harness.llm import AliasTable
from harness.sandbox import SandboxError, SandboxPool
from harness.schema import Environment, ToolCall
from harness.toolspec import derive_tools

from .limiter import ClusterLLMClient
from .settings import ExecutorConfig, WorkUnit

logger = logging.getLogger(__name__)

COLLECT_LINGER_S = 0.05
"""Once a result is ready, :meth:`FleetExecutor.collect` waits this long for others to join it, when at least
``COLLECT_LINGER_MIN_RUNNING`` units are still running: a busy executor saves Ray calls (CPU it would take from
the work), a quiet one answers at once (the wait would hold a slot idle)."""
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
class ExecutorStatus:
    node_id: str
    pid: int
    missing_layers: tuple[str, ...] = ()
    """Confinement layers the sandbox runs without on this node, each as ``name (why)``."""
    reset_results_adopted: int = 0
    """Scenarios whose reset results this executor took from the driver's screening instead of computing."""


class FleetExecutor:
    """Ray actor body (``ray.remote(SomeExecutor)``) of every kind of executor; subclasses add the work."""

    WORK: ClassVar[frozenset[str]] = frozenset()
    """The methods a unit may name: each takes the unit's payload and returns its result as bytes."""

    def __init__(self, config: ExecutorConfig, limiter: Any | None) -> None:
        os.environ.update(config.environment)
        self.config = config
        self.limiter = limiter
        self._stack = AsyncExitStack()
        self._pool: SandboxPool | None = None
        self._client: ClusterLLMClient | None = None
        self._running: dict[str, asyncio.Task[None]] = {}
        self._finished: list[tuple[str, bytes]] = []
        self._failure: BaseException | None = None
        self._arrived = asyncio.Event()
        self._adopted = 0

    @property
    def pool(self) -> SandboxPool:
        assert self._pool is not None, "ready() starts the pool"
        return self._pool

    @property
    def client(self) -> ClusterLLMClient:
        assert self._client is not None, "ready() starts the client"
        return self._client

    async def ready(self) -> ExecutorStatus:
        """Start the sandbox pool and open one session in it, so a node that cannot confine code is known before
        any unit is sent to it; then the model client."""
        import ray

        if self._pool is None:
            config = self.config
            pool = await self._stack.enter_async_context(config.jail.pool())
            self._client = ClusterLLMClient(
                cache_dir=config.cache_dir,
                default_limits=config.default_limits,
                retry=config.retry,
                timeout=config.timeout,
                aliases=AliasTable(config.aliases, environ={}),
                limiter=self.limiter,
            )
            self._pool = pool
            self._adopted = await self.prepare(pool)
            await probe_sandbox(pool)
            self.started()
        missing = tuple(f"{layer['name']} ({layer['detail']})" for layer in self.pool.missing_layers)
        return ExecutorStatus(
            node_id=ray.get_runtime_context().get_node_id(),
            pid=os.getpid(),
            missing_layers=missing,
            reset_results_adopted=self._adopted,
        )

    async def prepare(self, pool: SandboxPool) -> int:
        """A kind of executor's own start-up, once the pool runs; returns the reset results it adopted."""
        return 0

    def started(self) -> None:
        """Called once the executor is ready, before any unit runs."""

    async def submit(self, units: list[WorkUnit]) -> None:
        """Start these units; their results come back through :meth:`collect`."""
        if self._pool is None:
            await self.ready()
        for unit in units:
            if unit.key not in self._running:
                self._running[unit.key] = asyncio.create_task(self._run_submitted(unit))

    def _work(self, name: str) -> Callable[[Any], Awaitable[bytes]]:
        if name not in self.WORK:
            raise ValueError(f"{type(self).__name__} does not run {name!r} units")
        method: Callable[[Any], Awaitable[bytes]] = getattr(self, name)
        return method

    async def _run_submitted(self, unit: WorkUnit) -> None:
        try:
            payload = await self._work(unit.work)(unit.payload)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug, not a unit's failure (those are in its result): the driver stops
            logger.exception("unit %s raised", unit.key)
            self._failure = self._failure or exc
        else:
            self._finished.append((unit.key, payload))
        finally:
            self._running.pop(unit.key, None)
            self._arrived.set()

    async def collect(self, wait_s: float) -> list[tuple[str, bytes]]:
        """Results finished since the last call, as ``(key, bytes)``: waits up to ``wait_s`` for the first (an
        empty list when none came), then briefly for others, so one answer carries several."""
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
