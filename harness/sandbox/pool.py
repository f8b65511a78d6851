"""A pool of sandbox worker processes and the async API that the runner and everything else use.

Environment state lives in the worker that opened the session. Each session keeps a log of the calls it made;
if its worker dies (a timeout, a memory breach, a crash), the worker is replaced and the session replays its log
on the replacement, which gives the same state because clocks and random generators are seeded per session.
Only the call that broke the worker fails, with a clear error observation.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

import orjson
from pydantic import BaseModel, Field

from harness.sandbox.arguments import CallRejected, validate_call
from harness.sandbox.static import StaticCheckError, check_code, find_problems
from harness.schema import (
    Check,
    CheckResult,
    DiffEntry,
    Environment,
    Observation,
    ObservationKind,
    ToolCall,
    ToolSpec,
)

logger = logging.getLogger(__name__)

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
_WATCHDOG_PERIOD_S = 0.1


class SandboxLimits(BaseModel):
    call_timeout_s: float = Field(default=5.0, gt=0, description="Per tool call, and for loading a class.")
    check_timeout_s: float = Field(default=5.0, gt=0, description="Per check function.")
    memory_mb: int = Field(default=1024, ge=0, description="Address-space cap of each worker; 0 for none.")
    max_result_bytes: int = Field(default=1_000_000, gt=0)
    max_state_bytes: int = Field(default=64_000_000, gt=0)
    kill_grace_s: float = Field(default=2.0, ge=0, description="How long past a timeout before the worker is killed.")
    max_recoveries: int = Field(default=3, ge=0, description="Worker replacements one session may go through.")


class SandboxError(RuntimeError):
    """The sandbox itself failed (not the environment): the episode should end as an infrastructure error."""


class EnvironmentLoadError(ValueError):
    """The environment code is refused by the static checks, or its class cannot be built from the state."""


class WorkerLost(Exception):
    def __init__(self, culprit: bool, reason: str, timed_out: bool = False):
        self.culprit = culprit
        self.reason = reason
        self.timed_out = timed_out
        super().__init__(reason)


class _Pending:
    __slots__ = ("budget", "future", "started")

    def __init__(self, future: asyncio.Future[dict[str, Any]], budget: float):
        self.future = future
        self.budget = budget
        self.started: float | None = None


class _Worker:
    """One worker process; requests are pipelined and answered in order."""

    def __init__(self, limits: SandboxLimits):
        self.limits = limits
        self.process: asyncio.subprocess.Process | None = None
        self.pending: dict[int, _Pending] = {}
        self.order: list[int] = []
        self.ids = itertools.count(1)
        self.alive = False
        self.killed_for: int | None = None
        self.reason = ""
        self.stderr_tail: list[str] = []
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": _PACKAGE_ROOT,
            "PYTHONHASHSEED": "0",
            "TZ": "UTC",
            "LANG": "C.UTF-8",
            "HARNESS_SANDBOX_CALL_TIMEOUT": str(self.limits.call_timeout_s),
            "HARNESS_SANDBOX_MEMORY_MB": str(self.limits.memory_mb),
            "HARNESS_SANDBOX_MAX_RESULT_BYTES": str(self.limits.max_result_bytes),
            "HARNESS_SANDBOX_MAX_STATE_BYTES": str(self.limits.max_state_bytes),
        }
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-s",
            "-m",
            "harness.sandbox.worker",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            limit=2**26,
        )
        self.alive = True
        self._tasks = [
            asyncio.create_task(self._read_responses()),
            asyncio.create_task(self._read_stderr()),
            asyncio.create_task(self._watchdog()),
        ]
        await self.request({"op": "ping"}, budget=30.0)

    async def request(self, message: dict[str, Any], budget: float) -> dict[str, Any]:
        if not self.alive or self.process is None or self.process.stdin is None:
            raise WorkerLost(False, self.reason or "the worker is not running")
        request_id = next(self.ids) & 0xFFFFFFFF
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        entry = _Pending(future, budget)
        if not self.order:
            entry.started = time.monotonic()
        self.pending[request_id] = entry
        self.order.append(request_id)
        body = orjson.dumps(message)
        self.process.stdin.write(request_id.to_bytes(4, "little") + len(body).to_bytes(4, "little") + body)
        try:
            await self.process.stdin.drain()
        except (ConnectionError, BrokenPipeError) as exc:
            self._fail_all(f"the worker's input closed: {exc}")
        return await future

    @property
    def load(self) -> int:
        return len(self.order)

    async def _read_responses(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        stdout = self.process.stdout
        try:
            while True:
                header = await stdout.readexactly(8)
                request_id = int.from_bytes(header[:4], "little")
                body = await stdout.readexactly(int.from_bytes(header[4:], "little"))
                entry = self.pending.pop(request_id, None)
                if self.order and self.order[0] == request_id:
                    self.order.pop(0)
                    if self.order:
                        self.pending[self.order[0]].started = time.monotonic()
                elif request_id in self.order:
                    self.order.remove(request_id)
                if entry is not None and not entry.future.done():
                    entry.future.set_result(orjson.loads(body))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.exception("sandbox worker protocol error")
            self.reason = f"protocol error: {exc}"
        code = await self._wait_exit()
        if not self.reason:
            self.reason = _exit_reason(code, self.stderr_tail)
        self._fail_all(self.reason)

    async def _wait_exit(self) -> int | None:
        assert self.process is not None
        try:
            return await asyncio.wait_for(self.process.wait(), timeout=5)
        except TimeoutError:
            self.process.kill()
            return await self.process.wait()

    def _fail_all(self, reason: str) -> None:
        self.alive = False
        culprit = self.killed_for if self.killed_for is not None else (self.order[0] if self.order else None)
        timed_out = self.killed_for is not None
        for request_id, entry in list(self.pending.items()):
            if not entry.future.done():
                entry.future.set_exception(WorkerLost(request_id == culprit, reason, timed_out))
        self.pending.clear()
        self.order.clear()

    async def _read_stderr(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        while line := await self.process.stderr.readline():
            text = line.decode(errors="replace").rstrip()
            self.stderr_tail = [*self.stderr_tail[-19:], text]
            logger.debug("sandbox worker: %s", text)

    async def _watchdog(self) -> None:
        while self.alive:
            await asyncio.sleep(_WATCHDOG_PERIOD_S)
            if not self.order:
                continue
            head = self.pending.get(self.order[0])
            if head is None or head.started is None:
                continue
            if time.monotonic() - head.started > head.budget + self.limits.kill_grace_s:
                self.killed_for = self.order[0]
                self.reason = f"the call did not finish within {head.budget:g} s and its worker was stopped"
                self.kill()
                return

    def kill(self) -> None:
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()

    async def close(self) -> None:
        self.alive = False
        if self.process is not None and self.process.stdin is not None:
            with contextlib.suppress(Exception):
                self.process.stdin.close()
            try:
                await asyncio.wait_for(self.process.wait(), timeout=2)
            except TimeoutError:
                self.kill()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def _exit_reason(code: int | None, stderr_tail: list[str]) -> str:
    if code is not None and code < 0:
        reason = f"the worker crashed (signal {-code}), most likely by exhausting its memory limit"
    else:
        reason = f"the worker exited with status {code}"
    if stderr_tail:
        reason += f": {stderr_tail[-1][:300]}"
    return reason


class _Slot:
    """A place in the pool; its worker is replaced when it dies, and ``generation`` counts replacements."""

    def __init__(self, limits: SandboxLimits):
        self.limits = limits
        self.worker: _Worker | None = None
        self.generation = 0
        self.sessions = 0
        self._lock = asyncio.Lock()

    async def get(self) -> _Worker:
        if self.worker is not None and self.worker.alive:
            return self.worker
        async with self._lock:
            if self.worker is None or not self.worker.alive:
                if self.worker is not None:
                    logger.warning("replacing sandbox worker: %s", self.worker.reason)
                    await self.worker.close()
                worker = _Worker(self.limits)
                await worker.start()
                self.worker = worker
                self.generation += 1
            return self.worker

    @property
    def load(self) -> int:
        return self.worker.load if self.worker is not None and self.worker.alive else 0


_OBSERVATION_KINDS = {kind.value: kind for kind in ObservationKind}


class EnvSession:
    """One environment instance in the sandbox, created from an initial state."""

    def __init__(
        self,
        pool: SandboxPool,
        environment: Environment,
        initial_state: dict[str, Any],
        seed: int,
        record_diffs: bool,
        slot: _Slot,
        session_id: str,
    ):
        self.pool = pool
        self.environment = environment
        self.initial_state = initial_state
        self.seed = seed
        self.record_diffs = record_diffs
        self.tools: dict[str, ToolSpec] = {t.function.name: t for t in environment.tools}
        self._slot = slot
        self._id = session_id
        self._generation = -1
        self._log: list[tuple[str, dict[str, Any]]] = []
        self._recoveries = 0
        self._closed = False

    async def _open(self) -> _Worker:
        """The worker holding this session, reopening and replaying the log if the worker was replaced."""
        while True:
            worker = await self._slot.get()
            if self._generation == self._slot.generation:
                return worker
            if self._generation != -1:
                self._recoveries += 1
                if self._recoveries > self.pool.limits.max_recoveries:
                    raise SandboxError(f"session lost its worker {self._recoveries} times: {worker.reason}")
            try:
                await self._replay(worker)
            except WorkerLost as lost:
                logger.warning("sandbox worker lost while restoring a session: %s", lost.reason)
                continue
            self._generation = self._slot.generation
            return worker

    async def _replay(self, worker: _Worker) -> None:
        budget = self.pool.limits.call_timeout_s
        response = await worker.request(
            {
                "op": "open",
                "sid": self._id,
                "code": self.environment.code,
                "class_name": self.environment.class_name,
                "state": self.initial_state,
                "seed": self.seed,
                "diffs": self.record_diffs,
            },
            budget,
        )
        if not response.get("ok"):
            raise EnvironmentLoadError(
                f"environment {self.environment.id!r} could not be instantiated: {response.get('error')}"
            )
        for name, arguments in self._log:
            await worker.request({"op": "call", "sid": self._id, "name": name, "args": arguments}, budget)

    async def start(self) -> None:
        await self._open()

    async def call(self, call: ToolCall) -> tuple[Observation, list[DiffEntry]]:
        """Run one tool call. Every failure of the call itself comes back as an error observation."""
        if self._closed:
            raise SandboxError("the session is closed")
        try:
            arguments = validate_call(call, self.tools)
        except CallRejected as rejected:
            return Observation(tool_call_id=call.id, name=call.name, kind=rejected.kind, error=str(rejected)), []
        budget = self.pool.limits.call_timeout_s
        while True:
            worker = await self._open()
            try:
                response = await worker.request(
                    {"op": "call", "sid": self._id, "name": call.name, "args": arguments}, budget
                )
            except WorkerLost as lost:
                if lost.culprit:
                    kind = ObservationKind.TIMEOUT if lost.timed_out else ObservationKind.RESOURCE_LIMIT
                    return Observation(tool_call_id=call.id, name=call.name, kind=kind, error=lost.reason), []
                continue
            self._log.append((call.name, arguments))
            return _observation(call, response), [DiffEntry.model_validate(d) for d in response.get("diff", ())]

    async def state(self) -> dict[str, Any]:
        while True:
            worker = await self._open()
            try:
                response = await worker.request({"op": "state", "sid": self._id}, self.pool.limits.call_timeout_s)
            except WorkerLost:
                continue
            if not response.get("ok"):
                raise SandboxError(f"reading the state failed: {response.get('error')}")
            state: dict[str, Any] = response["state"]
            return state

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._slot.sessions -= 1
        worker = self._slot.worker
        if worker is not None and worker.alive and self._generation == self._slot.generation:
            with contextlib.suppress(WorkerLost):
                await worker.request({"op": "close", "sid": self._id}, self.pool.limits.call_timeout_s)

    async def __aenter__(self) -> EnvSession:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()


def _observation(call: ToolCall, response: dict[str, Any]) -> Observation:
    if response.get("ok"):
        result = response.get("result")
        if isinstance(result, dict) and result.get("success") is False:
            error = result.get("error") or result.get("message") or "the tool reported failure"
            return Observation(
                tool_call_id=call.id, name=call.name, kind=ObservationKind.TOOL_ERROR, content=result, error=str(error)
            )
        return Observation(tool_call_id=call.id, name=call.name, content=result)
    kind = _OBSERVATION_KINDS.get(str(response.get("kind")), ObservationKind.SANDBOX_ERROR)
    return Observation(tool_call_id=call.id, name=call.name, kind=kind, error=str(response.get("error")))


class SandboxPool:
    """Worker processes that run environment code and checks; never the main process."""

    def __init__(self, workers: int | None = None, limits: SandboxLimits | None = None):
        self.limits = limits or SandboxLimits()
        self.size = workers or max(1, os.cpu_count() or 1)
        self._slots: list[_Slot] = []
        self._session_ids = itertools.count(1)
        self._checked: dict[str, list[str]] = {}
        self._started = False
        self.reset_results: dict[tuple[str, int, tuple[str, ...]], tuple[Any, list[CheckResult]]] = {}
        """Check results on each scenario's initial state, computed once per scenario (see harness.scoring)."""

    async def start(self) -> None:
        if self._started:
            return
        self._slots = [_Slot(self.limits) for _ in range(self.size)]
        await asyncio.gather(*(slot.get() for slot in self._slots))
        self._started = True

    async def close(self) -> None:
        await asyncio.gather(*(slot.worker.close() for slot in self._slots if slot.worker is not None))
        self._slots = []
        self._started = False

    async def __aenter__(self) -> SandboxPool:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def static_problems(self, code: str) -> list[str]:
        if code not in self._checked:
            self._checked[code] = find_problems(code)
        return self._checked[code]

    async def open_session(
        self,
        environment: Environment,
        initial_state: dict[str, Any],
        *,
        seed: int = 0,
        record_diffs: bool = True,
    ) -> EnvSession:
        """An instance of ``environment`` built from ``initial_state`` in a worker."""
        problems = self.static_problems(environment.code)
        if problems:
            raise EnvironmentLoadError(f"environment {environment.id!r} fails the static checks: {problems}")
        if not self._started:
            await self.start()
        slot = min(self._slots, key=lambda s: (s.sessions, s.load))
        slot.sessions += 1
        session = EnvSession(self, environment, initial_state, seed, record_diffs, slot, f"s{next(self._session_ids)}")
        try:
            await session.start()
        except BaseException:
            slot.sessions -= 1
            raise
        return session

    async def run_checks(
        self,
        checks: Iterable[Check],
        initial_state: dict[str, Any],
        final_state: dict[str, Any],
        transcript: list[dict[str, Any]] | None = None,
    ) -> list[CheckResult]:
        """Each check run on (initial, final), or (initial, final, transcript) when it declares a third
        parameter. Only an exact True passes; errors are recorded, not raised."""
        checks = list(checks)
        results: list[CheckResult | None] = [None] * len(checks)
        runnable: list[int] = []
        for index, check in enumerate(checks):
            problems = self.static_problems(check.source)
            if problems:
                results[index] = CheckResult(
                    check_id=check.id, passed=False, error=f"refused by the static checks: {problems}"
                )
            else:
                runnable.append(index)
        if runnable:
            try:
                answers = await self._checks_request(
                    [checks[i] for i in runnable], initial_state, final_state, transcript
                )
            except WorkerLost:
                answers = []
                for index in runnable:  # isolate the check that broke the worker
                    try:
                        answers.extend(
                            await self._checks_request([checks[index]], initial_state, final_state, transcript)
                        )
                    except WorkerLost as lost:
                        answers.append({"passed": False, "value": None, "error": lost.reason})
            for index, answer in zip(runnable, answers, strict=True):
                results[index] = CheckResult(
                    check_id=checks[index].id,
                    passed=bool(answer["passed"]),
                    value=answer.get("value"),
                    error=answer.get("error"),
                )
        return [r for r in results if r is not None]

    async def _checks_request(
        self,
        checks: list[Check],
        initial_state: dict[str, Any],
        final_state: dict[str, Any],
        transcript: list[dict[str, Any]] | None,
    ) -> list[dict[str, Any]]:
        if not self._started:
            await self.start()
        slot = min(self._slots, key=lambda s: s.load)
        worker = await slot.get()
        timeout = self.limits.check_timeout_s
        response = await worker.request(
            {
                "op": "checks",
                "checks": [{"id": c.id, "source": c.source} for c in checks],
                "initial": initial_state,
                "final": final_state,
                "transcript": transcript or [],
                "timeout": timeout,
            },
            budget=timeout * len(checks) + self.limits.call_timeout_s,
        )
        if not response.get("ok"):
            raise SandboxError(f"running checks failed: {response.get('error')}")
        results: list[dict[str, Any]] = response["results"]
        return results


__all__ = [
    "EnvSession",
    "EnvironmentLoadError",
    "SandboxError",
    "SandboxLimits",
    "SandboxPool",
    "StaticCheckError",
    "check_code",
]
