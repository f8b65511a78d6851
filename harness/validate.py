"""Validation of a library: every environment loads and every scenario is a sound training signal.

A scenario is invalid when its environment does not load from its initial state, a check cannot run at
reset, every check already holds at reset on an empty transcript (doing nothing would succeed; only a warning for
a released benchmark's task, which is kept as released), or its reference (actions, then reference reply) does not
reach success. The cheap part, without the reference replay (:func:`invalid_scenarios`), runs before
``harness run``, ``sft``, ``serve`` and the gym.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field

from harness.episode.dispatch import open_tool_session
from harness.episode.dual_control import UserToolSession, user_call_messages
from harness.episode.tool_messages import tool_message
from harness.library import Library
from harness.registry import released_sources
from harness.rules.protocols import openai_tool_call
from harness.sandbox.errors import EnvironmentFailed, EnvironmentLoadError, SandboxError
from harness.sandbox.pool import SandboxPool
from harness.schema import CheckResult, Environment, ReferenceAction, Scenario, Step, ToolCall, UserReferenceAction
from harness.scoring.checks import check_transcript, checks_at_reset, prepared_checks, reward_from_results
from harness.states.encodings import READ_ONLY_STATES
from harness.toolspec import ToolDerivationError, derive_tools

logger = logging.getLogger(__name__)


class RecordReport(BaseModel):
    kind: Literal["environment", "scenario"]
    id: str
    problems: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    details: dict[str, Any] = Field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems


class ValidationReport(BaseModel):
    source: str
    records: list[RecordReport]

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.records)

    @property
    def invalid(self) -> list[RecordReport]:
        return [r for r in self.records if not r.ok]


async def validate_environment(
    pool: SandboxPool, environment: Environment, sample_state: dict[str, Any]
) -> RecordReport:
    report = RecordReport(kind="environment", id=environment.id)
    report.problems.extend(f"static check: {p}" for p in pool.static_problems(environment.code))
    if report.problems:
        return report
    try:
        derived = {t.function.name: t for t in derive_tools(environment.code, environment.class_name)}
    except ToolDerivationError as exc:
        report.problems.append(str(exc))
        return report
    declared = {t.function.name: t for t in environment.tools}
    if environment.call_dispatcher is not None:
        # Every call goes through the dispatcher, which takes the tools' arguments unvalidated.
        if environment.call_dispatcher not in derived:
            report.problems.append(f"the call dispatcher {environment.call_dispatcher!r} is not a public method")
        derived = declared
    for name in sorted(declared.keys() - derived.keys()):
        report.problems.append(f"tool {name!r} has no public method")
    for name in sorted(derived.keys() - declared.keys()):
        report.warnings.append(f"public method {name!r} is not offered as a tool")
    for name in sorted(declared.keys() & derived.keys()):
        method_params = set((derived[name].function.parameters.get("properties") or {}).keys())
        tool_params = set((declared[name].function.parameters.get("properties") or {}).keys())
        if tool_params - method_params:
            report.problems.append(
                f"tool {name!r} declares parameters the method lacks: {sorted(tool_params - method_params)}"
            )
        method_required = set(derived[name].function.parameters.get("required") or [])
        if method_required - tool_params:
            report.problems.append(f"tool {name!r} omits required parameters {sorted(method_required - tool_params)}")
    report.details["tools"] = len(declared)
    try:
        session = await open_tool_session(pool, environment, sample_state)
        await session.close()
    except EnvironmentLoadError as exc:
        report.problems.append(str(exc))
    return report


@dataclass
class Replay:
    """What replaying actions in a fresh sandbox process gave."""

    final_state: dict[str, Any]
    changed: list[bool]
    errors: list[str]
    results: list[Any]
    transcript: list[dict[str, Any]] = field(default_factory=list)
    """The replay as a conversation: the task, one tool call per assistant turn with its result, then the
    scenario's reference reply (what transcript checks read)."""


async def _replay(
    pool: SandboxPool,
    environment: Environment,
    scenario: Scenario,
    actions: list[ReferenceAction],
) -> Replay:
    """Final state, whether each agent call changed the state, error observations, every call's result, and the
    transcript of the replay. The user's reference calls (dual control) run on the user's side, each before the
    agent call it precedes in the reference; the checks see them as the user's calls, as in an episode."""
    session = await open_tool_session(pool, environment, scenario.initial_state, record_diffs=True)
    replay = Replay({}, [], [], [], [{"role": "user", "content": scenario.task}])
    pending: list[UserReferenceAction] = list(scenario.user_reference_actions)
    user_steps: list[Step] = []

    async def play_user_calls(before: int) -> None:
        while pending and pending[0].after_agent_actions <= before:
            action = pending.pop(0)
            call = ToolCall(id=f"ref_user_{len(user_steps) + 1}", name=action.name, arguments=action.arguments)
            if not isinstance(session, UserToolSession):
                replay.errors.append(f"user reference call {action.name}: the environment has no user side")
                continue
            observation, _ = await session.call_as_user(call)
            user_steps.append(Step(index=len(user_steps), turn=len(user_steps), call=call, observation=observation))
            replay.results.append(["user", observation.kind.value, observation.content, observation.error])
            if not observation.ok:
                replay.errors.append(f"user reference call {len(user_steps)} ({action.name}): {observation.error}")

    try:
        for number, action in enumerate(actions, start=1):
            await play_user_calls(number - 1)
            call = ToolCall(id=f"ref_{number}", name=action.name, arguments=action.arguments)
            observation, diff = await session.call(call)
            replay.changed.append(bool(diff))
            replay.results.append([observation.kind.value, observation.content, observation.error])
            if not observation.ok:
                replay.errors.append(f"reference call {number} ({action.name}): {observation.error}")
            replay.transcript.append({"role": "assistant", "content": None, "tool_calls": [openai_tool_call(call)]})
            replay.transcript.append(tool_message(observation))
        await play_user_calls(len(scenario.reference_actions))
        while pending:  # a shortened replay (the read-only calls alone) plays the rest of the user's part last
            await play_user_calls(pending[0].after_agent_actions)
        if scenario.reference_reply:
            replay.transcript.append({"role": "assistant", "content": scenario.reference_reply})
        replay.transcript.extend(user_call_messages(user_steps))
        replay.final_state = await session.state()
        return replay
    finally:
        await session.close()


def _first_difference(first: Any, second: Any, path: str = "") -> str:
    """Where two JSON values first differ, as a path (``$`` for the root)."""
    if isinstance(first, dict) and isinstance(second, dict):
        for key in sorted(first.keys() | second.keys(), key=str):
            if first.get(key, _MISSING) != second.get(key, _MISSING):
                return _first_difference(first.get(key), second.get(key), f"{path}.{key}")
    elif isinstance(first, list) and isinstance(second, list) and len(first) == len(second):
        for index, (a, b) in enumerate(zip(first, second, strict=True)):
            if a != b:
                return _first_difference(a, b, f"{path}[{index}]")
    return path or "$"


_MISSING = object()


async def initial_snapshot(pool: SandboxPool, environment: Environment, scenario: Scenario) -> dict[str, Any]:
    """The instance's state right after construction from the scenario's initial state (what checks see)."""
    session = await open_tool_session(pool, environment, scenario.initial_state)
    try:
        return await session.state(shared=True)
    finally:
        await session.close()


class ResetSnapshots:
    """The reset snapshots of one screening, one per environment and initial state: scenarios that start alike
    (a benchmark domain's tasks mostly share one database) are screened on one session's snapshot instead of a
    session each. A snapshot depends only on the environment's code, the initial state and the seed, which are
    the same; and whether the state loads is the same answer for all of them. The last ``capacity`` are kept
    (a library's scenarios of one start are usually neighbours), so a library of many large, different states
    holds no more snapshots than the screenings in flight do."""

    def __init__(self, capacity: int = 16) -> None:
        self.capacity = capacity
        self._snapshots: OrderedDict[tuple[str, str], asyncio.Task[dict[str, Any]]] = OrderedDict()

    async def snapshot(self, pool: SandboxPool, environment: Environment, scenario: Scenario) -> dict[str, Any]:
        state = READ_ONLY_STATES.canonical(scenario.initial_state)
        key = (environment.id, hashlib.sha256(environment.code.encode() + b"\0" + state).hexdigest())
        task = self._snapshots.get(key)
        if task is None:
            task = asyncio.ensure_future(initial_snapshot(pool, environment, scenario))
            self._snapshots[key] = task
            while len(self._snapshots) > self.capacity:
                self._snapshots.popitem(last=False)
        self._snapshots.move_to_end(key)
        return await asyncio.shield(task)


async def screen_scenario(
    pool: SandboxPool,
    scenario: Scenario,
    environment: Environment | None,
    snapshots: ResetSnapshots | None = None,
) -> tuple[RecordReport, dict[str, Any] | None, list[CheckResult]]:
    """The cheap part of validation (no reference replay): the environment exists and loads from the initial
    state, every check runs at reset, and not every check already holds at reset on an empty transcript.

    Returns the report, the reset snapshot and the checks' results at reset. With ``snapshots``, scenarios that
    start alike share one snapshot (:class:`ResetSnapshots`).
    """
    report = RecordReport(kind="scenario", id=scenario.id)
    if environment is None:
        report.problems.append(f"environment {scenario.environment_id!r} is not in the library")
        return report, None, []
    try:
        if snapshots is not None:
            snapshot = await snapshots.snapshot(pool, environment, scenario)
        else:
            snapshot = await initial_snapshot(pool, environment, scenario)
    except EnvironmentLoadError as exc:
        report.problems.append(f"initial state does not load: {exc}")
        return report, None, []
    if not scenario.checks:
        if scenario.turns:
            report.details["turns"] = len(scenario.turns)  # scored turn by turn against the reference actions
        else:
            report.warnings.append("no checks: usable for rollouts but cannot be scored")
        return report, snapshot, []
    at_reset = await checks_at_reset(pool, scenario, snapshot)  # cached: scoring reuses them
    for result in at_reset:
        if result.error:
            report.problems.append(f"check {result.check_id} fails to run on the initial state: {result.error}")
    if all(r.passed for r in at_reset):
        finding = "every check already holds at reset and on an empty transcript: doing nothing would succeed"
        if scenario.provenance.source in released_sources():
            # A released benchmark's task is kept as released (often one whose right answer is a refusal): the
            # benchmark's own score counts it, so leaving it out would change the denominator.
            report.warnings.append(f"{finding} (a {scenario.provenance.source} task, kept as released)")
        else:
            report.problems.append(finding)
    report.details["true_at_reset"] = sum(r.passed for r in at_reset)
    report.details["checks"] = len(at_reset)
    return report, snapshot, at_reset


async def validate_scenario(pool: SandboxPool, scenario: Scenario, environment: Environment | None) -> RecordReport:
    report, snapshot, at_reset = await screen_scenario(pool, scenario, environment)
    if environment is None or snapshot is None or not scenario.checks:
        return report
    if not scenario.reference_actions and not scenario.user_reference_actions and not scenario.reference_reply:
        report.warnings.append("no reference actions: solvability not proven")
        return report
    replay = await _replay(pool, environment, scenario, scenario.reference_actions)
    # Determinism is verified, not assumed: a second replay in another fresh process must agree exactly.
    again = await _replay(pool, environment, scenario, scenario.reference_actions)
    if again.final_state != replay.final_state:
        where = _first_difference(replay.final_state, again.final_state)
        report.problems.append(
            f"nondeterministic: two replays of the reference actions in fresh processes end in different states "
            f"(first difference at {where}); the environment reads a clock or randomness the sandbox does not seed"
        )
    elif again.results != replay.results:
        report.problems.append(
            "nondeterministic: two replays of the reference actions in fresh processes return different results"
        )
    final, changed, errors = replay.final_state, replay.changed, replay.errors
    checks = prepared_checks(scenario.checks)
    results = await pool.run_checks(checks, snapshot, final, transcript=check_transcript(replay.transcript))
    reward = reward_from_results(_with_reset(results, at_reset))
    report.details["reference_state_reward"] = reward.state_reward
    report.warnings.extend(errors)
    if not reward.success:
        failed = [r.check_id + (f" ({r.error})" if r.error else "") for r in results if not r.passed]
        report.problems.append(f"reference actions do not reach success; failing checks: {', '.join(failed)}")
    read_only = [a for a, did_change in zip(scenario.reference_actions, changed, strict=True) if not did_change]
    if read_only and len(read_only) < len(scenario.reference_actions):
        read_only_replay = await _replay(pool, environment, scenario, read_only)
        read_only_results = await pool.run_checks(
            checks, snapshot, read_only_replay.final_state, transcript=check_transcript(read_only_replay.transcript)
        )
        if all(r.passed for r in read_only_results):
            report.problems.append("the reference's read-only calls alone reach success")
    return report


async def invalid_scenarios(
    pool: SandboxPool, library: Library, scenarios: list[Scenario], concurrency: int = 16
) -> dict[str, str]:
    """The cheap validation of ``scenarios`` (see :func:`screen_scenario`): the invalid ones, id → problems.

    Scenarios whose environment is not in the library are left to the caller (they may be served over MCP).
    """
    limit = asyncio.Semaphore(concurrency)
    snapshots = ResetSnapshots(concurrency)

    async def one(scenario: Scenario) -> tuple[str, list[str]]:
        async with limit:
            try:
                environment = library.environments[scenario.environment_id]
                report, _, _ = await screen_scenario(pool, scenario, environment, snapshots)
            except (EnvironmentLoadError, EnvironmentFailed) as exc:
                return scenario.id, [f"sandbox: {exc}"]
            except SandboxError as exc:
                # The jail failed, not the scenario: it is not left out for it. Its episodes meet the same failure
                # and are recorded as infrastructure errors, which --retry-errors re-runs.
                logger.warning("scenario %s could not be screened, the sandbox failed: %s", scenario.id, exc)
                return scenario.id, []
            return scenario.id, report.problems

    candidates = [s for s in scenarios if s.environment_id in library.environments]
    results = await asyncio.gather(*(one(s) for s in candidates))
    return {scenario_id: "; ".join(problems) for scenario_id, problems in results if problems}


def _with_reset(results: list[CheckResult], at_reset: list[CheckResult]) -> list[CheckResult]:
    held = {r.check_id: r.passed for r in at_reset}
    return [r.model_copy(update={"passed_at_reset": held.get(r.check_id)}) for r in results]


async def validate_library(library: Library, pool: SandboxPool, concurrency: int = 16) -> ValidationReport:
    """Check every environment and scenario; problems make a record invalid, warnings do not."""
    limit = asyncio.Semaphore(concurrency)
    records: list[RecordReport] = [
        RecordReport(kind="scenario" if ".jsonl" in p else "environment", id=p.split(":")[0], problems=[p])
        for p in library.problems
    ]

    async def guarded(kind: Literal["environment", "scenario"], record_id: str, work: Any) -> RecordReport:
        async with limit:
            try:
                result: RecordReport = await work
                return result
            except (SandboxError, EnvironmentLoadError) as exc:
                return RecordReport(kind=kind, id=record_id, problems=[f"sandbox: {exc}"])

    samples: dict[str, dict[str, Any]] = {}
    for scenario in library.scenarios:
        samples.setdefault(scenario.environment_id, scenario.initial_state)
    jobs = [
        guarded("environment", env.id, validate_environment(pool, env, samples.get(env.id, {})))
        for env in library.environments.values()
    ]
    jobs += [
        guarded("scenario", s.id, validate_scenario(pool, s, library.environments.get(s.environment_id)))
        for s in library.scenarios
    ]
    # A load that runs out of time among many (large states on few cores) is tried again alone by the pool
    # (harness.sandbox.load_gate), so a busy machine does not make a sound scenario invalid.
    records.extend(await asyncio.gather(*jobs))
    return ValidationReport(source=library.source.source, records=records)
