"""Scoring a scripted-turn episode as BFCL's multi-turn checker scores it: ``multi_turn_checker.py``, the same file
in the v3 (bfcl-eval 2025.6.16) and v4 (2026.3.23) releases; an import refuses a release whose checker is another
(:data:`MULTI_TURN_CHECKERS`). What differs between the releases is the classes it re-executes, and each
scenario's judge runs its own release's classes (its environment's code).

Like BFCL's checker, it re-executes: the agent's calls turn by turn on one instance, the ground truth on another,
both from the initial state. For each turn whose ground truth has calls:

- the agent must have made a decodable call in that turn;
- every public attribute of every API instance must equal the ground truth's, compared with Python's ``==``
  as BFCL compares them (``30 == 30.0 == True``; a dict key ``1.0`` finds the key ``1``; a list never equals a
  tuple; a ``File`` or ``Directory`` equals another of its class with equal public attributes, which is what
  BFCL's ``__eq__`` of those classes compares);
- each ground-truth result of the turn must appear among the results of all the agent's calls so far (any
  order; duplicates count), comparing result texts (``json.dumps`` of a dict, ``str()`` otherwise).

Both instances live in one confined process (a judge class appended to the environment's code) and are compared
there, on the live objects: the JSON state that crosses the sandbox boundary turns every dict key into text
(``1`` and ``1.0`` become ``"1"`` and ``"1.0"``) and so cannot decide ``==``.

Turns with an empty ground truth are not judged (BFCL imports its irrelevance checker but does not call it),
yet calls made there run and change the state checked next. An entry succeeds only if every judged turn does
and the conversation reached its end (BFCL fails a force-terminated entry whole). Unlike BFCL, which stops at
the first failing turn, every judged turn gets a result, so per-turn accuracy is reported too.
"""

from __future__ import annotations

import json
from collections import Counter
from hashlib import sha256
from typing import Any

from harness.benchmarks.bfcl.source import MULTI_TURN_CHECKER, BfclSource, BfclSourceError
from harness.episode.dispatch import DispatchSession
from harness.episode.turns import calls_by_turn
from harness.rules.protocols import ToolSession
from harness.sandbox import EnvSession, SandboxError, SandboxPool
from harness.schema import (
    CheckResult,
    Environment,
    FunctionSpec,
    Observation,
    ObservationKind,
    RewardBreakdown,
    Scenario,
    TerminationReason,
    ToolCall,
    ToolSpec,
)

ERROR_PREFIX = "Error during execution: "

GROUND_TRUTH_TURNS = "ground_truth_turns"
"""A scenario's provenance detail, present when BFCL's ground truth has another number of turns than the entry
has questions: BFCL's checker then fails the entry whatever the model does (its turn counts never match)."""

MULTI_TURN_CHECKERS: dict[str, tuple[str, ...]] = {
    "b3b787515eda3bf0e365e39634a8fc7f831763f010f716d35d86f96fd5aab1b5": ("2025.6.16", "2026.3.23"),
}
"""sha256 of a release's ``multi_turn_checker.py`` → the bfcl-eval releases known to ship it: the checkers
:func:`score_turns` scores as."""


def checker_digest(source: BfclSource) -> str:
    """The sha256 of the release's multi-turn checker; a checker this module does not score as is refused."""
    digest = sha256(source.read_text(MULTI_TURN_CHECKER).encode()).hexdigest()
    if digest not in MULTI_TURN_CHECKERS:
        known = ", ".join(version for versions in MULTI_TURN_CHECKERS.values() for version in versions)
        raise BfclSourceError(
            f"{source.where(MULTI_TURN_CHECKER)} (sha256 {digest[:12]}) is not a checker the harness scores as "
            f"(it scores as the one of bfcl-eval {known})"
        )
    return digest


async def result_text(session: ToolSession, call: ToolCall) -> str:
    """A call's result as BFCL's executor gives it: the dispatcher's text, or an error line."""
    if isinstance(session, DispatchSession):
        observation = await session.call_raw(call)
    else:
        observation, _ = await session.call(call)
    return _bfcl_result(observation)


def _bfcl_result(observation: Observation) -> str:
    if observation.kind is ObservationKind.OK:
        content = observation.content
        return content if isinstance(content, str) else json.dumps(content)
    return ERROR_PREFIX + (observation.error or observation.kind.value)


JUDGE_CLASS = "BfclStateJudge"
_JUDGE_SOURCE = """


_BFCL_JUDGED = {{}}


def _bfcl_public_attributes(instance):
    # vars() is not available in the sandbox: an instance's own attributes are the names dir() lists that its
    # class does not define as a method.
    owner = type(instance)
    return [name for name in dir(instance) if not name.startswith('_') and not callable(getattr(owner, name, None))]


class {judge}:
    \"\"\"The model's and the ground truth's instances, side by side, compared with Python's ==.\"\"\"

    def __init__(self, init_config):
        _BFCL_JUDGED['truth'] = {environment}(deepcopy(init_config))
        _BFCL_JUDGED['model'] = {environment}(init_config)

    def run(self, side, name, arguments):
        return _BFCL_JUDGED[side].{dispatcher}(name, arguments)

    def differences(self):
        model, truth = _BFCL_JUDGED['model'], _BFCL_JUDGED['truth']
        found = []
        for name in _bfcl_public_attributes(truth):
            theirs, ours = getattr(truth, name), getattr(model, name)
            for attribute in _bfcl_public_attributes(theirs):
                if not hasattr(ours, attribute) or getattr(ours, attribute) != getattr(theirs, attribute):
                    found.append(name + '.' + attribute)
        return found
"""


def judge_environment(environment: Environment) -> Environment:
    """A class over two instances of ``environment`` (the model's and the ground truth's) that runs calls on
    either and lists the public attributes whose values differ under ``!=``, as BFCL's ``state_checker`` does."""
    assert environment.call_dispatcher is not None
    code = environment.code + _JUDGE_SOURCE.format(
        judge=JUDGE_CLASS, environment=environment.class_name, dispatcher=environment.call_dispatcher
    )
    tools = [
        ToolSpec(
            function=FunctionSpec(
                name="run",
                description="Runs one call on the model's or the ground truth's instance.",
                parameters={
                    "type": "object",
                    "properties": {
                        "side": {"type": "string", "enum": ["model", "truth"]},
                        "name": {"type": "string"},
                        "arguments": {"type": "object"},
                    },
                    "required": ["side", "name", "arguments"],
                },
            )
        ),
        ToolSpec(
            function=FunctionSpec(
                name="differences",
                description="Public attributes that differ.",
                parameters={"type": "object", "properties": {}},
            )
        ),
    ]
    return environment.model_copy(
        update={"class_name": JUDGE_CLASS, "code": code, "tools": tools, "call_dispatcher": None}
    )


class StateJudge:
    """The model's and the ground truth's instances of a BFCL environment in one confined process."""

    def __init__(self, session: EnvSession):
        self.session = session
        self._calls = 0

    @classmethod
    async def open(
        cls, pool: SandboxPool, environment: Environment, initial_state: dict[str, Any], *, seed: int = 0
    ) -> StateJudge:
        session = await pool.open_session(judge_environment(environment), initial_state, seed=seed, record_diffs=False)
        return cls(session)

    async def run(self, side: str, call: ToolCall) -> str:
        """A call's result as BFCL's executor gives it: the dispatcher's text, or an error line."""
        self._calls += 1
        arguments = {"side": side, "name": call.name, "arguments": call.arguments}
        observation, _ = await self.session.call(ToolCall(id=f"judge_{self._calls}", name="run", arguments=arguments))
        return _bfcl_result(observation)

    async def differences(self) -> list[str]:
        """``instance.attribute`` names of the ground truth's public attributes that the model's do not equal."""
        self._calls += 1
        call = ToolCall(id=f"judge_{self._calls}", name="differences", arguments={})
        observation, _ = await self.session.call(call)
        if observation.kind is not ObservationKind.OK or not isinstance(observation.content, list):
            raise SandboxError(f"comparing the states failed: {observation.error or observation.content!r}")
        return [str(item) for item in observation.content]

    async def close(self) -> None:
        await self.session.close()


def ground_truth_turns(scenario: Scenario) -> int:
    """How many turns BFCL's ground truth has (the scenario's turns unless its import recorded another count)."""
    recorded = scenario.provenance.details.get(GROUND_TRUTH_TURNS)
    return recorded if isinstance(recorded, int) and recorded >= 0 else len(scenario.turns)


def missing_results(truth: list[str], model: list[str]) -> list[str]:
    """Ground-truth results not found among the model's (each model result matches at most one)."""
    available = Counter(model)
    missing = []
    for item in truth:
        if available[item] > 0:
            available[item] -= 1
        else:
            missing.append(item)
    return missing


async def score_turns(
    pool: SandboxPool,
    scenario: Scenario,
    environment: Environment,
    messages: list[dict[str, Any]],
    termination: TerminationReason,
    *,
    seed: int = 0,
) -> tuple[list[CheckResult], RewardBreakdown]:
    """One check result per judged turn (``turn_<i>``) and the reward: the share of judged turns passed as
    ``state_reward`` (per-turn accuracy) and BFCL's entry verdict as ``success``."""
    steps_by_turn = calls_by_turn(messages, scenario.turns)
    judge = await StateJudge.open(pool, environment, scenario.initial_state, seed=seed)
    try:
        results = await _judge(scenario, steps_by_turn, judge)
    finally:
        await judge.close()
    expected = ground_truth_turns(scenario)
    for index in range(len(scenario.turns), expected):
        value = f"BFCL's ground truth has {expected} turns for the entry's {len(scenario.turns)} questions"
        results.append(CheckResult(check_id=f"turn_{index}", passed=False, value=value))
    finished = (
        termination is TerminationReason.USER_STOP
        and len(steps_by_turn) == len(scenario.turns)
        and len(scenario.turns) == expected
    )
    passed = sum(result.passed for result in results)
    total = len(results)
    reward = RewardBreakdown(
        state_reward=passed / total if total else 1.0,
        success=finished and passed == total,
        checks_passed=passed,
        checks_total=total,
    )
    return results, reward


async def _judge(scenario: Scenario, steps_by_turn: list[list[list[ToolCall]]], judge: StateJudge) -> list[CheckResult]:
    results: list[CheckResult] = []
    model_results: list[str] = []
    for index, turn in enumerate(scenario.turns):
        check_id = f"turn_{index}"
        reached = index < len(steps_by_turn)
        steps = steps_by_turn[index] if reached else []
        for step in steps:
            for call in step:
                model_results.append(await judge.run("model", call))
        truth_results = []
        for number, action in enumerate(turn.reference_actions):
            call = ToolCall(id=f"truth_{index}_{number}", name=action.name, arguments=dict(action.arguments))
            truth_results.append(await judge.run("truth", call))
        if not turn.reference_actions:
            continue
        if not reached:
            value = "the conversation ended before this turn"
            results.append(CheckResult(check_id=check_id, passed=False, value=value))
            continue
        if not steps:
            results.append(CheckResult(check_id=check_id, passed=False, value="no function call in this turn"))
            continue
        differences = await judge.differences()
        if differences:
            value = "state differs from the ground truth's: " + ", ".join(differences[:10])
            results.append(CheckResult(check_id=check_id, passed=False, value=value[:500]))
            continue
        missing = missing_results(truth_results, model_results)
        if missing:
            value = f"{len(missing)} ground-truth result(s) missing, e.g. {missing[0][:200]!r}"
            results.append(CheckResult(check_id=check_id, passed=False, value=value))
            continue
        results.append(CheckResult(check_id=check_id, passed=True))
    return results
