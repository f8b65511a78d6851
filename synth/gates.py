"""Gates a synthesized scenario must pass before it is kept; each returns a :class:`GateOutcome` with its reason.

- ``state_conforms``: the initial state has exactly the environment's state keys, with collections of records.
- ``state_loads``: the environment is instantiated from it in the sandbox and gives the same state back.
- ``checks_run``: every check runs without error on the initial state.
- ``false_at_reset``: at least one check is false at reset (doing nothing must not succeed).
- ``single_call``: no check is true in every probed state the environment reaches in one call (and at reset),
  and no single call makes every check true (the task must combine sub-goals).
- ``teacher``: a teacher model reaches success within K attempts; its calls become the reference actions.
- ``reference``: ``harness.validate.validate_scenario`` accepts the scenario (its reference actions replay
  to success and its read-only calls alone do not).

Chain-made scenarios (:mod:`synth.queries`) also pass ``mentions`` (:mod:`synth.mentions`: the request names
every value the agent cannot find itself) and, with a solver model, ``rollouts`` (:mod:`synth.verification`).
"""

from __future__ import annotations

import ast
import logging
import random
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field

from harness.sandbox import EnvironmentLoadError, SandboxPool
from harness.schema import Check, CheckResult, Environment, ReferenceAction, Scenario, ToolCall, Trajectory
from harness.validate import validate_scenario
from synth.graph import configured_state_keys, state_changing_tools, state_keys

logger = logging.getLogger(__name__)

GATES: tuple[str, ...] = (
    "state_conforms",
    "state_loads",
    "chain_execution",
    "mentions",
    "checks_run",
    "false_at_reset",
    "single_call",
    "teacher",
    "reference",
    "rollouts",
)


class GateOutcome(BaseModel):
    gate: str
    passed: bool
    reason: str = ""
    details: dict[str, Any] = Field(default_factory=dict)


def gate_state_conforms(environment: Environment, state: Any) -> GateOutcome:
    """The state is a JSON object that gives every attribute the constructor reads from its configuration and no
    attribute the class does not have, and each collection holds records filed under their own id."""
    if not isinstance(state, dict):
        return GateOutcome(gate="state_conforms", passed=False, reason="the initial state is not a JSON object")
    expected = set(state_keys(environment))
    problems = []
    if missing := sorted(set(configured_state_keys(environment)) - state.keys()):
        problems.append(f"missing state keys {missing}")
    if unknown := sorted(state.keys() - expected):
        problems.append(f"unknown state keys {unknown}")
    for key, value in state.items():
        if not isinstance(value, dict) or not value:
            continue
        kinds = {isinstance(v, dict) for v in value.values()}
        if kinds == {True, False}:
            problems.append(f"collection {key!r} mixes records and plain values")
        elif kinds == {True}:
            bad = [k for k, record in value.items() if not _record_keyed(k, record)]
            if bad:
                problems.append(f"records of {key!r} stored under keys their id does not match: {bad[:5]}")
    if not any(isinstance(v, dict) and v for v in state.values()):
        problems.append("no collection holds any record")
    if problems:
        return GateOutcome(gate="state_conforms", passed=False, reason="; ".join(problems))
    return GateOutcome(gate="state_conforms", passed=True)


def _record_keyed(key: str, record: dict[str, Any]) -> bool:
    """A record stored under ``key`` carries that key in one of its id attributes (when it has any)."""
    ids = [v for name, v in record.items() if name == "id" or name.endswith("_id")]
    return not ids or key in ids


async def gate_state_loads(pool: SandboxPool, environment: Environment, state: dict[str, Any]) -> GateOutcome:
    try:
        session = await pool.open_session(environment, state)
    except EnvironmentLoadError as exc:
        return GateOutcome(gate="state_loads", passed=False, reason=f"the environment does not load it: {exc}")
    try:
        loaded = await session.state()
    finally:
        await session.close()
    changed = sorted(k for k in state if loaded.get(k) != state[k])
    if changed:
        return GateOutcome(
            gate="state_loads", passed=False, reason=f"the environment rewrites these keys when loading: {changed}"
        )
    return GateOutcome(gate="state_loads", passed=True)


def check_defines_function(source: str) -> str | None:
    """None if ``source`` defines ``check(initial_state, final_state)`` or ``check_func(final_state)``."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return f"syntax error: {exc.msg} (line {exc.lineno})"
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            arity = len(node.args.args)
            if (node.name == "check" and arity == 2) or (node.name == "check_func" and arity == 1):
                return None
    return "defines neither check(initial_state, final_state) nor check_func(final_state)"


async def gate_checks_run(
    pool: SandboxPool, checks: list[Check], initial_state: dict[str, Any]
) -> tuple[GateOutcome, list[CheckResult]]:
    if not checks:
        return GateOutcome(gate="checks_run", passed=False, reason="the scenario has no checks"), []
    for check in checks:
        problem = check_defines_function(check.source)
        if problem:
            return GateOutcome(gate="checks_run", passed=False, reason=f"check {check.id}: {problem}"), []
    results = await pool.run_checks(checks, initial_state, initial_state)
    errors = [f"{r.check_id}: {r.error}" for r in results if r.error]
    if errors:
        return GateOutcome(gate="checks_run", passed=False, reason="checks fail to run: " + "; ".join(errors)), results
    return GateOutcome(gate="checks_run", passed=True), results


def gate_false_at_reset(reset_results: list[CheckResult]) -> GateOutcome:
    held = sum(r.passed for r in reset_results)
    details = {"true_at_reset": held, "checks": len(reset_results)}
    if reset_results and held == len(reset_results):
        return GateOutcome(
            gate="false_at_reset",
            passed=False,
            reason="every check holds at reset: doing nothing succeeds",
            details=details,
        )
    return GateOutcome(gate="false_at_reset", passed=True, details=details)


# ------------------------------------------------------------------------------------------ one-call probes


def _string_literals(sources: list[str]) -> set[str]:
    found: set[str] = set()
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        found.update(n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str))
    return found


def _values_by_field(state: dict[str, Any]) -> dict[str, list[Any]]:
    """Every value each record field takes in the state, and the ids each collection is keyed by."""
    values: dict[str, list[Any]] = {}
    for collection in state.values():
        if not isinstance(collection, dict):
            continue
        for key, record in collection.items():
            if not isinstance(record, dict):
                continue
            for name, value in record.items():
                if isinstance(value, str | int | float | bool) and value not in values.setdefault(name, []):
                    values[name].append(value)
                    if value == key:
                        values.setdefault(f"__key__{name}", []).append(key)
    return values


_DEFAULTS: dict[str, Any] = {"string": "probe", "integer": 1, "number": 1.0, "boolean": True, "array": [], "object": {}}


def guess_arguments(
    schema: dict[str, Any],
    state: dict[str, Any],
    rng: random.Random,
    preferred: set[str] | None = None,
    values: dict[str, list[Any]] | None = None,
) -> dict[str, Any]:
    """Plausible arguments for a call: values the state holds under the parameter's name (ids the scenario's
    checks mention first), else a value of the parameter's type. ``values`` is ``_values_by_field(state)`` when
    the caller has it already."""
    if values is None:
        values = _values_by_field(state)
    arguments: dict[str, Any] = {}
    for name, prop in (schema.get("properties") or {}).items():
        candidates = values.get(name) or values.get(name.removesuffix("s")) or []
        if candidates:
            liked = [c for c in candidates if preferred and isinstance(c, str) and c in preferred]
            arguments[name] = rng.choice(liked or candidates)
            continue
        if prop.get("enum"):
            arguments[name] = rng.choice(prop["enum"])
            continue
        type_name = prop.get("type") if isinstance(prop.get("type"), str) else "string"
        default = _DEFAULTS.get(type_name, "probe")
        arguments[name] = (
            list(default) if isinstance(default, list) else dict(default) if isinstance(default, dict) else default
        )
    return arguments


def probe_calls(environment: Environment, scenario: Scenario, count: int, seed: int = 0) -> list[ToolCall]:
    """Single calls to probe with: state-changing tools first, aimed at the records the checks mention."""
    rng = random.Random(seed)
    state_changing = state_changing_tools(environment)
    changing = [t for t in environment.tools if state_changing.get(t.name, True)]
    others = [t for t in environment.tools if t not in changing]
    rng.shuffle(changing)
    rng.shuffle(others)
    ordered = changing + others
    mentioned = _string_literals([c.source for c in scenario.checks])
    calls: list[ToolCall] = []
    # A first pass aims every tool at the records the checks mention; a second picks records at random.
    plan = [(tool, True) for tool in ordered] + [(tool, False) for tool in ordered]
    values = _values_by_field(scenario.initial_state)
    for index, (tool, aimed) in enumerate(plan[:count]):
        arguments = guess_arguments(
            tool.function.parameters, scenario.initial_state, rng, mentioned if aimed else None, values
        )
        calls.append(ToolCall(id=f"probe_{index}", name=tool.name, arguments=arguments))
    return calls


async def gate_single_call(
    pool: SandboxPool,
    environment: Environment,
    scenario: Scenario,
    reset_results: list[CheckResult],
    *,
    probes: int = 8,
    seed: int = 0,
) -> GateOutcome:
    calls = probe_calls(environment, scenario, probes, seed)
    always_true = {r.check_id for r in reset_results if r.passed}
    changed_states = 0
    for call in calls:
        session = await pool.open_session(environment, scenario.initial_state, seed=seed)
        try:
            _observation, diff = await session.call(call)
            final = await session.state() if diff else None
        finally:
            await session.close()
        if final is None:
            continue
        changed_states += 1
        results = await pool.run_checks(scenario.checks, scenario.initial_state, final)
        if all(r.passed for r in results):
            return GateOutcome(
                gate="single_call",
                passed=False,
                reason=f"one call ({call.name} {call.arguments}) makes every check true",
                details={"probes": len(calls), "changed_states": changed_states},
            )
        always_true &= {r.check_id for r in results if r.passed}
    details = {"probes": len(calls), "changed_states": changed_states}
    if changed_states and always_true:
        return GateOutcome(
            gate="single_call",
            passed=False,
            reason=f"checks {sorted(always_true)} hold at reset and after every probed call",
            details=details,
        )
    return GateOutcome(gate="single_call", passed=True, details=details)


# ------------------------------------------------------------------------------------------------ teacher

EpisodeRunner = Callable[[Scenario, int], Any]


def reference_actions_from(trajectory: Trajectory) -> list[ReferenceAction]:
    """The calls of a successful trajectory that the environment accepted, in order."""
    return [
        ReferenceAction(name=step.call.name, arguments=dict(step.call.arguments or {}))
        for step in trajectory.steps
        if step.observation.ok
    ]


async def gate_teacher(
    run_attempt: EpisodeRunner, scenario: Scenario, attempts: int
) -> tuple[GateOutcome, list[ReferenceAction]]:
    """``run_attempt(scenario, attempt)`` runs one episode and returns its trajectory."""
    outcomes: list[str] = []
    for attempt in range(attempts):
        trajectory: Trajectory = await run_attempt(scenario, attempt)
        reward = trajectory.reward
        if reward is not None and reward.success:
            actions = reference_actions_from(trajectory)
            return GateOutcome(gate="teacher", passed=True, details={"attempts": attempt + 1}), actions
        outcomes.append(
            f"{trajectory.termination.value}"
            + (f" {reward.checks_passed}/{reward.checks_total}" if reward is not None else "")
        )
    return (
        GateOutcome(
            gate="teacher",
            passed=False,
            reason=f"the teacher did not succeed in {attempts} attempts ({', '.join(outcomes)})",
        ),
        [],
    )


async def gate_reference(pool: SandboxPool, scenario: Scenario, environment: Environment) -> GateOutcome:
    report = await validate_scenario(pool, scenario, environment)
    if report.problems:
        return GateOutcome(gate="reference", passed=False, reason="; ".join(report.problems), details=report.details)
    return GateOutcome(gate="reference", passed=True, details=report.details)
