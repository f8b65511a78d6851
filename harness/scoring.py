"""Scoring of a final state by a scenario's checks (run in the sandbox)."""

from __future__ import annotations

from typing import Any

from harness.sandbox.pool import SandboxPool
from harness.schema import CheckResult, RewardBreakdown, Scenario


class ScenarioWithoutChecks(ValueError):
    """A scenario with no checks cannot be scored."""


def reward_from_results(results: list[CheckResult]) -> RewardBreakdown:
    """state_reward over all checks, delta_reward over the checks that were false at reset, success if all pass."""
    if not results:
        raise ScenarioWithoutChecks("a scenario with no checks cannot be scored")
    passed = sum(r.passed for r in results)
    open_at_reset = [r for r in results if r.passed_at_reset is False]
    delta = sum(r.passed for r in open_at_reset) / len(open_at_reset) if open_at_reset else None
    return RewardBreakdown(
        state_reward=passed / len(results),
        delta_reward=delta,
        success=passed == len(results),
        checks_passed=passed,
        checks_total=len(results),
    )


async def score_final_state(
    pool: SandboxPool,
    scenario: Scenario,
    final_state: dict[str, Any],
    *,
    reset_results: list[CheckResult] | None = None,
) -> tuple[list[CheckResult], RewardBreakdown]:
    """Run the scenario's checks on (initial, final) and on (initial, initial) to know what held at reset."""
    if not scenario.checks:
        raise ScenarioWithoutChecks(f"scenario {scenario.id!r} has no checks and cannot be scored")
    if reset_results is None:
        # Trials of one scenario share its reset results. The key includes the state object's identity (the entry
        # keeps the object alive, so the identity cannot be reused) so that two scenarios sharing an id but not
        # a state never share an entry.
        key = (scenario.id, id(scenario.initial_state), tuple(c.source for c in scenario.checks))
        cached = pool.reset_results.get(key)
        if cached is None:
            reset_results = await pool.run_checks(scenario.checks, scenario.initial_state, scenario.initial_state)
            pool.reset_results[key] = (scenario.initial_state, reset_results)
        else:
            reset_results = cached[1]
    results = await pool.run_checks(scenario.checks, scenario.initial_state, final_state)
    at_reset = {r.check_id: r.passed for r in reset_results}
    results = [r.model_copy(update={"passed_at_reset": at_reset.get(r.check_id)}) for r in results]
    return results, reward_from_results(results)
