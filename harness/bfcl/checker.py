"""Scoring a scripted-turn episode as BFCL's multi-turn checker (bfcl-eval 2026.3.23) scores it.

Like BFCL's checker, it re-executes: the agent's calls turn by turn on one instance, the ground truth on another,
both from the initial state. For each turn whose ground truth has calls:

- the agent must have made a decodable call in that turn;
- every public attribute of every API instance must equal the ground truth's (compared as values, so ``30``
  equals ``30.0``);
- each ground-truth result of the turn must appear among the results of all the agent's calls so far (any
  order; duplicates count), comparing result texts (``json.dumps`` of a dict, ``str()`` otherwise).

Turns with an empty ground truth are not judged (BFCL imports its irrelevance checker but does not call it),
yet calls made there run and change the state checked next. An entry succeeds only if every judged turn does
and the conversation reached its end (BFCL fails a force-terminated entry whole). Unlike BFCL, which stops at
the first failing turn, every judged turn gets a result, so per-turn accuracy is reported too.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from harness.dispatch import DispatchSession, open_tool_session
from harness.protocols import ToolSession
from harness.sandbox import SandboxPool
from harness.schema import (
    CheckResult,
    Environment,
    ObservationKind,
    RewardBreakdown,
    Scenario,
    TerminationReason,
    ToolCall,
)
from harness.turns import calls_by_turn

ERROR_PREFIX = "Error during execution: "


async def result_text(session: ToolSession, call: ToolCall) -> str:
    """A call's result as BFCL's executor gives it: the dispatcher's text, or an error line."""
    if isinstance(session, DispatchSession):
        observation = await session.call_raw(call)
    else:
        observation, _ = await session.call(call)
    if observation.kind is ObservationKind.OK:
        content = observation.content
        return content if isinstance(content, str) else json.dumps(content)
    return ERROR_PREFIX + (observation.error or observation.kind.value)


def state_differences(model: dict[str, Any], truth: dict[str, Any]) -> list[str]:
    """Public attributes (``instance.attribute``) of the ground truth's instances whose values differ; like
    BFCL's checker, attributes only the model's instance has are not compared."""
    differences: list[str] = []
    for name in sorted(truth):
        if name.startswith("_"):
            continue
        ours, theirs = model.get(name), truth[name]
        if ours == theirs:
            continue
        if isinstance(ours, dict) and isinstance(theirs, dict):
            keys = sorted(k for k in theirs if k not in ours or ours[k] != theirs[k])
            differences.extend(f"{name}.{key}" for key in keys)
        else:
            differences.append(name)
    return differences


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
    model = await open_tool_session(pool, environment, scenario.initial_state, seed=seed, record_diffs=False)
    try:
        truth = await open_tool_session(pool, environment, scenario.initial_state, seed=seed, record_diffs=False)
        try:
            results = await _judge(scenario, steps_by_turn, model, truth)
        finally:
            await truth.close()
    finally:
        await model.close()
    finished = termination is TerminationReason.USER_STOP and len(steps_by_turn) == len(scenario.turns)
    passed = sum(result.passed for result in results)
    total = len(results)
    reward = RewardBreakdown(
        state_reward=passed / total if total else 1.0,
        success=finished and passed == total,
        checks_passed=passed,
        checks_total=total,
    )
    return results, reward


async def _judge(
    scenario: Scenario, steps_by_turn: list[list[list[ToolCall]]], model: ToolSession, truth: ToolSession
) -> list[CheckResult]:
    results: list[CheckResult] = []
    model_results: list[str] = []
    for index, turn in enumerate(scenario.turns):
        check_id = f"turn_{index}"
        reached = index < len(steps_by_turn)
        steps = steps_by_turn[index] if reached else []
        for step in steps:
            for call in step:
                model_results.append(await result_text(model, call))
        truth_results = []
        for number, action in enumerate(turn.reference_actions):
            call = ToolCall(id=f"truth_{index}_{number}", name=action.name, arguments=dict(action.arguments))
            truth_results.append(await result_text(truth, call))
        if not turn.reference_actions:
            continue
        if not reached:
            value = "the conversation ended before this turn"
            results.append(CheckResult(check_id=check_id, passed=False, value=value))
            continue
        if not steps:
            results.append(CheckResult(check_id=check_id, passed=False, value="no function call in this turn"))
            continue
        differences = state_differences(await model.state(), await truth.state())
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
