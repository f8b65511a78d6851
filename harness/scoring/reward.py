"""EnvFactory's composite reward: ``R = α·R_traj + (1−α)·R_state − γ·P_length``.

- ``R_state``: the scenario's check pass rate when it has checks (the checks are the definition of done, and
  they already ignore free text and the ids of records the agent creates). Without checks, equality with the
  gold final state, where any value equal to a masked (free-text) reference argument is not compared.
- ``R_traj``: the reference calls matched as a multiset by the agent's calls (name equal, masked arguments
  skipped, numbers equal within a relative tolerance), as the fraction of reference calls matched. A
  trajectory whose final state is fully correct took a valid path, so it gets full path credit: a shorter or
  different valid path is never marked down, only longer ones, by the length term.
- ``P_length``: ``per_extra_call`` for every call beyond the reference's length, capped at ``cap``.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, Field

from harness.schema import ReferenceAction, RewardBreakdown, Scenario, ToolCall, Trajectory
from harness.states.diff import apply_diff


class CompositeWeights(BaseModel):
    alpha: float = Field(default=0.5, ge=0, le=1, description="Weight of R_traj; 1 − alpha weighs R_state.")
    gamma: float = Field(default=1.0, ge=0, description="Weight of the length penalty.")
    per_extra_call: float = Field(default=0.05, ge=0)
    cap: float = Field(default=0.5, ge=0)
    rel_tol: float = Field(default=1e-6, ge=0, description="Relative tolerance for numbers in arguments.")


def values_match(expected: Any, actual: Any, rel_tol: float = 1e-6) -> bool:
    """JSON values equal, numbers within ``rel_tol`` (booleans are not numbers)."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return expected is actual
    if isinstance(expected, int | float) and isinstance(actual, int | float):
        return math.isclose(expected, actual, rel_tol=rel_tol, abs_tol=0.0 if expected or actual else 1e-12)
    if isinstance(expected, dict) and isinstance(actual, dict):
        return expected.keys() == actual.keys() and all(values_match(expected[k], actual[k], rel_tol) for k in expected)
    if isinstance(expected, list) and isinstance(actual, list):
        return len(expected) == len(actual) and all(
            values_match(e, a, rel_tol) for e, a in zip(expected, actual, strict=True)
        )
    return bool(expected == actual)


def call_matches(reference: ReferenceAction, call: ToolCall, rel_tol: float = 1e-6) -> bool:
    if reference.name != call.name or call.arguments is None:
        return False
    masked = set(reference.masked_arguments)
    expected = {k: v for k, v in reference.arguments.items() if k not in masked}
    actual = {k: v for k, v in call.arguments.items() if k not in masked}
    return values_match(expected, actual, rel_tol)


def trajectory_match(references: list[ReferenceAction], calls: list[ToolCall], rel_tol: float = 1e-6) -> float:
    """Fraction of reference calls matched, each agent call used at most once, in any order."""
    if not references:
        return 1.0
    unused = list(calls)
    matched = 0
    for reference in references:
        for index, call in enumerate(unused):
            if call_matches(reference, call, rel_tol):
                matched += 1
                del unused[index]
                break
    return matched / len(references)


def length_penalty(references: list[ReferenceAction], calls: list[ToolCall], weights: CompositeWeights) -> float:
    extra = max(0, len(calls) - len(references))
    return min(weights.cap, extra * weights.per_extra_call)


def _masked_values(references: list[ReferenceAction]) -> set[str]:
    return {
        value
        for reference in references
        for name, value in reference.arguments.items()
        if name in reference.masked_arguments and isinstance(value, str)
    }


def state_matches_gold(
    gold: Any, actual: Any, masked_values: set[str] | frozenset[str] = frozenset(), rel_tol: float = 1e-6
) -> bool:
    """``actual`` equals ``gold`` except where the gold value is masked free text (any value is accepted there)."""
    if isinstance(gold, str) and gold in masked_values:
        return True
    if isinstance(gold, dict) and isinstance(actual, dict):
        return gold.keys() == actual.keys() and all(
            state_matches_gold(gold[k], actual[k], masked_values, rel_tol) for k in gold
        )
    if isinstance(gold, list) and isinstance(actual, list):
        return len(gold) == len(actual) and all(
            state_matches_gold(g, a, masked_values, rel_tol) for g, a in zip(gold, actual, strict=True)
        )
    return values_match(gold, actual, rel_tol)


def composite(
    scenario: Scenario,
    calls: list[ToolCall],
    reward: RewardBreakdown,
    final_state: dict[str, Any] | None = None,
    weights: CompositeWeights | None = None,
) -> RewardBreakdown:
    """``reward`` (the check-based breakdown) completed with R_traj, P_length, gold-state match and R."""
    weights = weights or CompositeWeights()
    gold_match: bool | None = None
    r_state = reward.state_reward
    if scenario.gold_final_state is not None and final_state is not None:
        masked = _masked_values(scenario.reference_actions)
        gold_match = state_matches_gold(scenario.gold_final_state, final_state, masked, weights.rel_tol)
        if not scenario.checks:
            r_state = 1.0 if gold_match else 0.0
    if not scenario.reference_actions:
        # Without a reference there is nothing to match or to measure length against: R is R_state.
        return reward.model_copy(update={"gold_state_match": gold_match, "composite": r_state})
    r_traj = 1.0 if r_state == 1.0 else trajectory_match(scenario.reference_actions, calls, weights.rel_tol)
    penalty = length_penalty(scenario.reference_actions, calls, weights)
    value = weights.alpha * r_traj + (1 - weights.alpha) * r_state - weights.gamma * penalty
    return reward.model_copy(
        update={
            "trajectory_reward": r_traj,
            "length_penalty": penalty,
            "gold_state_match": gold_match,
            "composite": value,
        }
    )


def final_state_of(scenario: Scenario, trajectory: Trajectory) -> dict[str, Any]:
    # The diff is between two dict states, so it never replaces the root with another type.
    state: dict[str, Any] = apply_diff(scenario.initial_state, [d.model_dump() for d in trajectory.final_state_diff])
    return state


def trajectory_reward(scenario: Scenario, trajectory: Trajectory, weights: CompositeWeights | None = None) -> float:
    """The plain reward function a trainer calls: the composite reward of a finished trajectory.

    Infrastructure errors have no reward and raise; use ``trajectory.infra_error`` to filter them first. An
    episode its environment failed is worth 0, whatever its calls matched.
    """
    if trajectory.environment_error:
        return 0.0
    if trajectory.reward is None:
        raise ValueError(f"episode {trajectory.episode_id} has no reward ({trajectory.termination.value})")
    calls = [step.call for step in trajectory.steps]
    final_state = final_state_of(scenario, trajectory) if scenario.gold_final_state is not None else None
    result = composite(scenario, calls, trajectory.reward, final_state, weights)
    assert result.composite is not None
    return result.composite
