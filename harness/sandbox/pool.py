"""The sandbox's async API: environment sessions and check runs, each in a confined child process of its own.

A session's state lives in the one child that serves it (see ``harness.sandbox.zygote`` and ``docs/sandbox.md``).
Each session keeps a log of the calls it made; if its child dies (its CPU-time limit, a crash, a kill from
outside), the next use forks a fresh child that replays the log, which gives the same state because clocks and
random generators are seeded per session. Only the call that broke the child fails, with an observation that
says what happened. Checks run in a separate child that never ran environment code.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import itertools
import logging
import os
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from types import TracebackType
from typing import Any

import orjson

from harness.sandbox.arguments import CallRejected, check_arguments, validate_call
from harness.sandbox.check_batches import (
    SCENARIO_OF_CHECKS,
    CheckBatcher,
    ScoreExpected,
    encode_inputs,
)
from harness.sandbox.check_inputs import EpisodeInputs
from harness.sandbox.children import Child, ChildLost, Zygote, ZygoteFailed
from harness.sandbox.code_handover import CodeHandover
from harness.sandbox.confine import DISABLE_VARIABLE, disabled_layers, seccomp_filter
from harness.sandbox.errors import (
    EnvironmentFailed,
    EnvironmentLoadError,
    SandboxError,
    WeakSandbox,
    weak_sandbox_message,
)
from harness.sandbox.jail_environment import ensure_built, with_submodules
from harness.sandbox.limits import SandboxLimits
from harness.sandbox.load_gate import LoadGate
from harness.sandbox.replies import (
    OBSERVATION_KINDS,
    KnownStates,
    ReplyLimits,
    ReplyRefused,
    check_result,
    error_text,
    open_reply_bytes,
    read_batch_answers,
    read_call_reply,
    read_state_reply,
)
from harness.sandbox.static import StaticCheckError, check_code, find_problems
from harness.schema import (
    Check,
    CheckResult,
    DiffEntry,
    Environment,
    JailEnvironment,
    Observation,
    ObservationKind,
    ToolCall,
    ToolSpec,
)
from harness.states.encodings import READ_ONLY_STATES

logger = logging.getLogger(__name__)


_BYTECODE_CACHE_SIZE = 512


class EnvSession:
    """One environment instance, alive in one confined child process of its own."""

    def __init__(
        self,
        pool: SandboxPool,
        environment: Environment,
        initial_state: dict[str, Any],
        seed: int,
        record_diffs: bool,
    ):
        self.pool = pool
        self.environment = environment
        self.initial_state = initial_state
        self.seed = seed
        self.record_diffs = record_diffs
        self.tools: dict[str, ToolSpec] = {t.function.name: t for t in environment.tools}
        self._child: Child | None = None
        self._log: list[tuple[str, dict[str, Any]]] = []
        self._recoveries = 0
        self._starts = 0
        self._closed = False
        self._lock = asyncio.Lock()

    async def _ensure(self) -> Child:
        """The child holding this session, forking a new one and replaying the log if the last one died."""
        while True:
            if self._child is not None and self._child.alive:
                return self._child
            if self._child is not None and self._child.kind == "forbidden":
                # A process that forged or corrupted frames is hostile: replaying it would only repeat that.
                raise EnvironmentFailed(f"the session was ended: {self._child.reason}")
            if self._starts:
                self._recoveries += 1
                if self._recoveries > self.pool.limits.max_recoveries:
                    reason = self._child.reason if self._child is not None else "unknown"
                    message = f"the session lost its sandbox process {self._recoveries} times: {reason}"
                    if self._child is not None and _ended_by_itself(self._child.kind, self._child.timed_out):
                        raise EnvironmentFailed(message)
                    raise SandboxError(message)
                logger.info("restoring a sandbox session in a new process")
            self._starts += 1
            child = await self.pool._spawn("session")
            self._child = child
            try:
                await self._replay(child)
            except ChildLost as lost:
                if lost.timed_out:
                    child.close()
                    raise SandboxError(f"environment {self.environment.id!r} did not load: {lost.reason}") from lost
                if self._starts == 1 and _ended_by_itself(lost.kind, lost.timed_out):
                    child.close()  # the first load (nothing to replay yet) ended the process: the code did that
                    raise EnvironmentLoadError(
                        f"environment {self.environment.id!r} could not be loaded: {lost.reason}",
                        timed_out=lost.timed_out,
                    ) from lost
                logger.warning("a sandbox process died while its session was being restored: %s", lost.reason)
                continue
            except EnvironmentLoadError:
                child.close()
                raise
            return child

    async def _replay(self, child: Child) -> None:
        budget = self.pool._budget(self.pool.limits.call_timeout_s)
        call_reply_bytes = self.pool.reply_limits.call_reply_bytes(self.record_diffs)
        code_key = source_key(self.environment.code)
        preloaded = code_key in self.pool._handover
        bytecode = None if preloaded else self.pool._bytecode.get(code_key)
        opening = {
            "op": "open",
            # The child has the code from its zygote, or gets the bytecode: the source would only be decoded.
            "code": None if preloaded or bytecode else self.environment.code,
            "bytecode": bytecode,
            "code_key": code_key if preloaded else None,
            "class_name": self.environment.class_name,
            "seed": self.seed,
            "diffs": self.record_diffs,
        }
        # The state's JSON goes last, written from where it is (a held state's is written once per run).
        try:
            state = READ_ONLY_STATES.plain(self.initial_state)
        except (TypeError, orjson.JSONEncodeError) as exc:  # an integer beyond 64 bits, a value JSON cannot carry
            unsendable = f"the state of {self.environment.id!r} cannot be sent to its sandbox: {exc}"
            raise EnvironmentLoadError(unsendable) from None
        message = [orjson.dumps(opening)[:-1], b',"state":', state, b"}"]
        response = await child.request(message, budget, open_reply_bytes(len(self.environment.code)))
        if response.get("ok") is not True:
            raise EnvironmentLoadError(
                f"environment {self.environment.id!r} could not be instantiated: {error_text(response.get('error'))}",
                timed_out=response.get("kind") == "timeout",  # the child's own CPU timer
            )
        self.pool._remember_bytecode(code_key, response.get("bytecode"), len(self.environment.code))
        for name, arguments in self._log:
            await child.request({"op": "call", "name": name, "args": arguments}, budget, call_reply_bytes)

    async def start(self) -> None:
        async with self._lock:
            await self._ensure()

    @property
    def process_id(self) -> int | None:
        """The pid of the process serving the session, as this process sees it; None before it starts."""
        return self._child.pid if self._child is not None and self._child.alive else None

    async def call(self, call: ToolCall) -> tuple[Observation, list[DiffEntry]]:
        """Run one tool call. Every failure of the call itself comes back as an error observation."""
        if self._closed:
            raise SandboxError("the session is closed")
        try:
            arguments = validate_call(call, self.tools)
            check_arguments(arguments, self.pool.limits.max_result_depth)
        except CallRejected as rejected:
            return Observation(tool_call_id=call.id, name=call.name, kind=rejected.kind, error=str(rejected)), []
        budget = self.pool._budget(self.pool.limits.call_timeout_s)
        reply_limits = self.pool.reply_limits
        async with self._lock:
            while True:
                child = await self._ensure()
                try:
                    response = await child.request(
                        {"op": "call", "name": call.name, "args": arguments},
                        budget,
                        reply_limits.call_reply_bytes(self.record_diffs),
                    )
                except ChildLost as lost:
                    if lost.before_send:
                        continue
                    if lost.timed_out:  # the machine's doing, not the code's: the episode is an infrastructure error
                        error = f"the call of {call.name!r}: {lost.reason}"
                        return Observation(
                            tool_call_id=call.id, name=call.name, kind=ObservationKind.SANDBOX_ERROR, error=error
                        ), []
                    kind = OBSERVATION_KINDS.get(lost.kind, ObservationKind.SANDBOX_ERROR)
                    error = f"the call ended its sandbox process: {lost.reason}"
                    ended = _ended_by_itself(lost.kind, lost.timed_out)
                    observation = Observation(
                        tool_call_id=call.id, name=call.name, kind=kind, error=error, process_ended=ended
                    )
                    return observation, []
                self._log.append((call.name, arguments))
                return read_call_reply(
                    call, response, child.reply_bytes, child.reply_brackets, child.reply_string_bound, reply_limits
                )

    async def state(self, *, shared: bool = False) -> dict[str, Any]:
        """The session's state; :class:`EnvironmentFailed` with the reason when its process's reply is refused,
        :class:`SandboxError` when no process could be kept to read it. With
        ``shared`` the caller promises not to change it: a state equal to one a session of the pool started from
        lately is then that object, not decoded again (``KnownStates``), and a state read before this session's
        first call is remembered as one."""
        reply_limits = self.pool.reply_limits
        budget = self.pool._budget(self.pool.limits.call_timeout_s)
        known = self.pool.known_states if shared else None
        async with self._lock:
            while True:
                child = await self._ensure()
                try:
                    response = await child.request({"op": "state"}, budget, reply_limits.state_reply_bytes(), known)
                except ChildLost:
                    continue
                if known is not None and child.reply_known:
                    state: dict[str, Any] = response["state"]
                    return state
                try:
                    state = read_state_reply(response, child.reply_string_bound, reply_limits)
                except ReplyRefused as refused:
                    # The reply comes from a process the environment's code has run in: what it sends is its own.
                    raise EnvironmentFailed(f"reading the state failed: {refused}") from None
                if known is not None:
                    if not self._log:  # the state this session started from
                        known.remember(child.reply_body, state)
                        READ_ONLY_STATES.hold(state)
                    child.reply_body = b""
                return state

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._child is not None:
            self._child.close()
            self._child = None

    async def __aenter__(self) -> EnvSession:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()


@functools.lru_cache(maxsize=256)
def source_key(code: str) -> str:
    """An environment's source by its SHA-256 (computed once per source, not per session)."""
    return hashlib.sha256(code.encode("utf-8", "surrogatepass")).hexdigest()


def _ended_by_itself(kind: str, timed_out: bool) -> bool:
    """Whether a lost process ended by its own code's doing (a crash, an exit, a stop, a run past its CPU-time
    limit, a protocol violation, after it confirmed its confinement), rather than from outside the environment's
    reach (``sandbox_error``: a SIGKILL the harness did not send, an ending before the confirmation, an unknown
    exit; ``timed_out``: the wall-clock backstop, which a loaded machine reaches before the code's CPU time runs
    out)."""
    return not timed_out and kind != "sandbox_error"


class SandboxPool:
    """Forks a confined process per environment session and per check run; never runs their code itself.

    ``workers`` is the number of zygotes (fork servers) the pool spreads its processes over. With
    ``require_full_confinement`` the pool refuses to start when any confinement layer is missing: the CLI asks
    for it whenever the code comes from the Hub (see ``--allow-weak-sandbox``). ``jail_modules`` names the
    third-party modules code in the jail may import (by default those the installed benchmarks declare:
    ``harness.registry.jail_modules``; only the names reach the zygote); ``optional_modules`` those of them its
    zygotes import ahead (``policy.optional_modules_named_in`` of the code it will run), by default all that are
    installed, at some CPU per session. ``environment``: the jail environment those modules come from (built when
    the pool starts). ``code_to_lint`` (sources it will run) gets its static checks while the first zygote boots.
    """

    def __init__(
        self,
        workers: int | None = None,
        limits: SandboxLimits | None = None,
        *,
        require_full_confinement: bool = False,
        optional_modules: Iterable[str] | None = None,
        code_to_lint: Iterable[str] = (),
        jail_modules: Iterable[str] | None = None,
        environment: JailEnvironment | None = None,
    ):
        self.limits = limits or SandboxLimits()
        self.reply_limits = ReplyLimits(self.limits)
        self.known_states = KnownStates()
        """States read lately, shared by the readers that promise not to change them (``EnvSession.state``)."""
        self.size = max(1, workers or 1)
        self.require_full_confinement = require_full_confinement
        self.environment = environment
        self._jail_site: str | None = None
        """The environment's package folder once built (its children's only third-party readable root)."""
        if jail_modules is None:
            from harness.registry import jail_modules as registered

            jail_modules = environment.modules if environment is not None else registered()
        self.jail_modules = frozenset(jail_modules)
        """The third-party modules code in the jail may import (names; ``harness.sandbox.policy``)."""
        self.optional_modules = with_submodules(optional_modules, environment)
        """The jail modules its zygotes load ahead; None: all."""
        self._zygotes: list[Zygote] = []
        self._next = itertools.count()
        self._checked: dict[str, list[str]] = {}
        self._code_to_lint = list(code_to_lint)
        """Sources the static checks read while the zygote boots (``static_problems`` then answers from memory)."""
        self._bytecode: OrderedDict[str, str] = OrderedDict()
        self._handover = CodeHandover(lambda: self._zygotes)
        self._loads = LoadGate()
        self._started = False
        self._start_lock: asyncio.Lock | None = None
        self.layers: list[dict[str, Any]] = []
        self.reset_results: dict[tuple[str, int, tuple[str, ...]], tuple[Any, list[CheckResult]]] = {}
        """Check results on each scenario's initial state, computed once per scenario (see harness.scoring.checks)."""
        self.reset_pending: dict[tuple[str, int, tuple[str, ...]], asyncio.Event] = {}
        """Keys of ``reset_results`` being computed, each set when its computation ends (stored or not)."""
        self._batcher = CheckBatcher(
            self._spawn_checks,
            self._checks_request,
            self._score_alone,
            max_bytes=self.limits.max_state_bytes,
            closed=lambda: SandboxError("the sandbox pool was closed before the checks ran"),
            gather_seconds=self.limits.check_gather_s,
        )

    def _options(self) -> dict[str, Any]:
        limits = self.limits
        return {
            "call_timeout": limits.call_timeout_s,
            "memory_mb": limits.memory_mb,
            "max_result_bytes": limits.max_result_bytes,
            "max_state_bytes": limits.max_state_bytes,
            "disabled_env": {DISABLE_VARIABLE: os.environ.get(DISABLE_VARIABLE, "")},
            "seccomp": seccomp_filter(),
            "optional_modules": None if self.optional_modules is None else sorted(self.optional_modules),
            "jail_modules": sorted(self.jail_modules),
            "jail_site": self._jail_site,
        }

    def _new_zygote(self) -> Zygote:
        return Zygote(self._options(), reply_timeout=self.limits.zygote_timeout_s)

    @property
    def max_frame(self) -> int:
        return 2 * self.limits.max_state_bytes + self.limits.max_result_bytes + (1 << 20)

    def _budget(self, timeout: float) -> float:
        """The wall-clock backstop of work whose CPU-time limit is ``timeout`` (the child enforces that one)."""
        return timeout * self.limits.wall_clock_factor + self.limits.kill_grace_s

    @property
    def missing_layers(self) -> list[dict[str, Any]]:
        return [layer for layer in self.layers if not layer["active"]]

    async def start(self) -> None:
        if self._started:
            return
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._started:
                return
            disabled_layers()  # a typo in HARNESS_SANDBOX_DISABLE is an error, not a silent full jail
            if self.environment is not None and self._jail_site is None:
                built = await asyncio.to_thread(ensure_built, self.environment)
                self._jail_site = str(built.site)
            zygotes = [self._new_zygote() for _ in range(self.size)]
            try:
                await asyncio.gather(*(z.start(self._lint_ahead if i == 0 else None) for i, z in enumerate(zygotes)))
            except ZygoteFailed as exc:
                await asyncio.gather(*(zygote.close() for zygote in zygotes))
                raise SandboxError(str(exc)) from exc
            self._zygotes = zygotes
            for zygote in zygotes:
                await self._handover.hand_all(zygote)
            self.layers = zygotes[0].layers
            missing = self.missing_layers
            if missing:
                names = ", ".join(f"{layer['name']} ({layer['detail']})" for layer in missing)
                if self.require_full_confinement:
                    await self.close()
                    raise WeakSandbox(weak_sandbox_message(missing))
                logger.warning("sandbox running without: %s (see `harness doctor`)", names)
            self._started = True

    async def close(self) -> None:
        await self._batcher.close()
        zygotes, self._zygotes = self._zygotes, []
        await asyncio.gather(*(zygote.close() for zygote in zygotes))
        self._started = False

    async def __aenter__(self) -> SandboxPool:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def _spawn(self, kind: str) -> Child:
        if not self._started:
            await self.start()
        failures: list[str] = []
        for _ in range(len(self._zygotes) + 1):
            index = next(self._next) % len(self._zygotes)
            zygote = self._zygotes[index]
            if not zygote.alive:
                logger.warning("replacing the sandbox zygote: %s", zygote.lost_reason or "it is not running")
                with contextlib.suppress(Exception):
                    await zygote.close()
                zygote = self._new_zygote()
                try:
                    await zygote.start()
                except ZygoteFailed as exc:
                    replaced = "; ".join(failures) or zygote.lost_reason or "not running"
                    raise SandboxError(f"{exc} (replacing one that failed: {replaced})") from exc
                await self._handover.hand_all(zygote)
                self._zygotes[index] = zygote
            try:
                return await zygote.spawn(kind, self.max_frame)
            except ZygoteFailed as exc:
                logger.warning("sandbox zygote failed: %s", exc)
                failures.append(str(exc))
        raise SandboxError(f"no sandbox zygote could fork a process: {'; '.join(failures)}")

    def _remember_bytecode(self, code_key: str, bytecode: object, source_size: int) -> None:
        """Keep what an environment's process compiled, for that environment's later processes only (the key is
        a hash of the source). The harness never unmarshals it; a hostile process can only hand its own
        environment's later sessions code that environment could run anyway."""
        if not isinstance(bytecode, str) or len(bytecode) > 8 * source_size + 100_000:
            return
        self._bytecode[code_key] = bytecode
        self._bytecode.move_to_end(code_key)
        while len(self._bytecode) > _BYTECODE_CACHE_SIZE:
            self._bytecode.popitem(last=False)

    def _lint_ahead(self) -> None:
        code, self._code_to_lint = self._code_to_lint, []
        for source in code:
            self.static_problems(source)

    def static_problems(self, code: str) -> list[str]:
        if code not in self._checked:
            self._checked[code] = find_problems(code, self.jail_modules)
        return self._checked[code]

    async def open_session(
        self,
        environment: Environment,
        initial_state: dict[str, Any],
        *,
        seed: int = 0,
        record_diffs: bool = True,
    ) -> EnvSession:
        """An instance of ``environment`` built from ``initial_state`` in a confined process of its own."""
        problems = self.static_problems(environment.code)
        if problems:
            raise EnvironmentLoadError(f"environment {environment.id!r} fails the static checks: {problems}")
        await self._handover.hand(source_key(environment.code), environment.code)
        session = EnvSession(self, environment, initial_state, seed, record_diffs)
        try:
            async with self._loads.load():
                await session.start()
        except EnvironmentLoadError as exc:
            code_key = source_key(environment.code)
            if not exc.timed_out or code_key in self._loads.slow:
                raise
            logger.info("environment %s: its load ran out of time among others; trying it alone", environment.id)
            session = EnvSession(self, environment, initial_state, seed, record_diffs)
            async with self._loads.alone():
                try:
                    await session.start()
                except EnvironmentLoadError as again:
                    if again.timed_out:
                        self._loads.slow.add(code_key)
                    raise
        return session

    def scores_expected(
        self, scenario: Hashable, on_arrival: Callable[[], None] | None = None
    ) -> contextlib.AbstractContextManager[ScoreExpected]:
        """Announce, for the block, an episode of ``scenario`` (the key ``checks_of_scenario`` names it by) that
        will ask ``run_checks`` to score it: a check process for the scenario waits for it, so that episodes of one
        scenario that run together are scored by one process (``CheckBatcher.expecting``). ``on_arrival`` is called
        once, when the episode asks or the block ends."""
        return self._batcher.expecting(scenario, on_arrival)

    async def run_checks(
        self,
        checks: Iterable[Check],
        initial_state: dict[str, Any],
        final_state: dict[str, Any],
        transcript: list[dict[str, Any]] | None = None,
        *,
        scenario: Hashable | None = None,
    ) -> list[CheckResult]:
        """Each check run on (initial, final), or (initial, final, transcript) when it declares a third
        parameter, in a process that never ran environment code. Only an exact True passes; errors are recorded,
        not raised.

        ``scenario`` (any key naming the scenario the checks belong to; by default the one set with
        ``checks_of_scenario``) lets one check process score this episode together with other episodes of the same
        scenario and the same checks that are waiting at the same time (``harness.sandbox.check_batches``); without
        one the checks get a process of their own."""
        if scenario is None:
            scenario = SCENARIO_OF_CHECKS.get()
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
            batch = [checks[i] for i in runnable]
            inputs = encode_inputs(initial_state, final_state, transcript or [])
            if scenario is None:
                answers = await self._score_alone(batch, inputs, True)
            else:
                key = (scenario, tuple((c.id, c.source) for c in batch))
                answers = await self._batcher.score(key, batch, inputs, scenario)
            for index, answer in zip(runnable, answers, strict=True):
                results[index] = check_result(checks[index].id, answer)
        return [r for r in results if r is not None]

    async def _score_alone(self, checks: list[Check], inputs: EpisodeInputs, whole_first: bool) -> list[dict[str, Any]]:
        """One episode's answers in processes of its own: all its checks in one (when ``whole_first``), then, if
        that process fails, each check in a process of its own, so that the check that ended it fails alone."""
        if whole_first:
            try:
                return (await self._checks_request(await self._spawn("checks"), checks, [inputs]))[0]
            except ChildLost as lost:
                if lost.timed_out:
                    raise SandboxError(f"a check process: {lost.reason}") from lost
        answers: list[dict[str, Any]] = []
        for check in checks:
            try:
                answers.extend((await self._checks_request(await self._spawn("checks"), [check], [inputs]))[0])
            except ChildLost as lost:
                if lost.timed_out:  # a loaded machine, not a failed check: the episode is re-run, never scored 0
                    raise SandboxError(f"a check process: {lost.reason}") from lost
                answers.append({"passed": False, "value": None, "error": lost.reason})
        return answers

    async def _spawn_checks(self) -> Child:
        return await self._spawn("checks")

    async def _checks_request(
        self, child: Child, checks: list[Check], episodes: list[EpisodeInputs]
    ) -> list[list[dict[str, Any]]]:
        """The answers of ``checks`` on each episode's inputs, from ``child`` (closed afterwards)."""
        timeout = self.limits.check_timeout_s
        try:
            response = await child.request(
                {"op": "checks", "checks": [{"id": c.id, "source": c.source} for c in checks], "timeout": timeout},
                budget=self._budget((timeout * len(checks) + self.limits.call_timeout_s) * len(episodes)),
                reply_limit=self.reply_limits.checks_reply_bytes(len(checks) * len(episodes)),
                inputs=episodes,
            )
        finally:
            child.close()
        try:
            return read_batch_answers(response, len(episodes), len(checks))
        except ReplyRefused as refused:
            raise ChildLost(str(refused)) from None


__all__ = [
    "EnvSession",
    "SandboxLimits",
    "SandboxPool",
    "StaticCheckError",
    "check_code",
]
