"""Scoring of a final state (and what the agent said) by a scenario's checks, run in the sandbox.

Checks see the instance's state as it was right after construction (``initial_state``: the snapshot taken at
reset, not the raw ``init_config``: a constructor may add containers and defaults) and the final state; a
check that declares a third parameter also gets the transcript. What held "at reset" is the checks run on
(snapshot, snapshot, empty transcript).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from harness.rules.profiles import HARNESS_RULES, EpisodeRules
from harness.sandbox.check_batches import checks_of_scenario
from harness.sandbox.pool import SandboxPool
from harness.schema import Check, CheckResult, RewardBreakdown, Scenario
from harness.scoring.transcript_checks import with_helpers


class ScenarioWithoutChecks(ValueError):
    """A scenario with no checks cannot be scored."""


def prepared_checks(checks: list[Check]) -> list[Check]:
    """The checks as sent to the sandbox: the transcript helpers appended to those that call them."""
    prepared = []
    for check in checks:
        source = with_helpers(check.source)
        prepared.append(check if source == check.source else check.model_copy(update={"source": source}))
    return prepared


def check_transcript(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What checks see of an episode's messages: everything after the system prompt."""
    return [m for m in messages if m.get("role") != "system"]


def reward_from_results(results: list[CheckResult], rules: EpisodeRules = HARNESS_RULES) -> RewardBreakdown:
    """state_reward over all checks, delta_reward over the checks that were false at reset, success if all pass;
    rounded as the rules say."""
    if not results:
        raise ScenarioWithoutChecks("a scenario with no checks cannot be scored")
    passed = sum(r.passed for r in results)
    open_at_reset = [r for r in results if r.passed_at_reset is False]
    delta = sum(r.passed for r in open_at_reset) / len(open_at_reset) if open_at_reset else None
    digits = rules.reward_decimals
    return RewardBreakdown(
        state_reward=round(passed / len(results), digits) if digits is not None else passed / len(results),
        delta_reward=round(delta, digits) if digits is not None and delta is not None else delta,
        success=passed == len(results),
        checks_passed=passed,
        checks_total=len(results),
    )


def zero_reward(scenario: Scenario) -> RewardBreakdown:
    """The reward of an episode the rules give 0 without running its checks (under rules that end on a raising
    tool, or cut at the step limit without a score)."""
    return RewardBreakdown(
        state_reward=0.0, success=False, checks_passed=0, checks_total=len(scenario.checks), composite=0.0
    )


ResetKey = tuple[str, int, tuple[str, ...]]
SharedResetResults = dict[tuple[str, str], tuple[tuple[str, ...], list[CheckResult]]]
"""Reset results by (environment id, scenario id), with the check sources they were computed for."""


def _reset_key(scenario: Scenario) -> ResetKey:
    # The key includes the scenario's state object's identity (the entry keeps the object alive, so the identity
    # cannot be reused) so that two scenarios sharing an id but not a state never share an entry.
    return (scenario.id, id(scenario.initial_state), tuple(c.source for c in scenario.checks))


def batch_key(scenario: Scenario) -> tuple[str, str]:
    """The key under which the sandbox scores episodes of one scenario in one check process (never two scenarios'
    episodes: the pool adds the checks themselves to the key)."""
    return (scenario.environment_id, scenario.id)


def known_reset_results(pool: SandboxPool, scenarios: Iterable[Scenario]) -> SharedResetResults:
    """What the pool already computed as holding at reset for these scenarios (repeats are fine), for another
    pool to start from (a Ray executor reuses the driver's screening, as a local run does)."""
    known: SharedResetResults = {}
    for scenario in scenarios:
        identity = (scenario.environment_id, scenario.id)
        if identity in known:
            continue
        key = _reset_key(scenario)
        cached = pool.reset_results.get(key)
        if cached is not None:
            known[identity] = (key[2], cached[1])
    return known


def adopt_reset_results(pool: SandboxPool, scenarios: list[Scenario], known: SharedResetResults) -> int:
    """Store ``known`` in this pool for these scenarios (only where the checks are the ones they were computed
    for); returns how many were adopted."""
    adopted = 0
    for scenario in scenarios:
        entry = known.get((scenario.environment_id, scenario.id))
        key = _reset_key(scenario)
        if entry is not None and entry[0] == key[2] and key not in pool.reset_results:
            pool.reset_results[key] = (scenario.initial_state, entry[1])
            adopted += 1
    return adopted


async def checks_at_reset(
    pool: SandboxPool, scenario: Scenario, initial_state: dict[str, Any] | None = None
) -> list[CheckResult]:
    """The checks on (snapshot, snapshot, empty transcript), computed once per scenario and pool (concurrent callers
    share one computation).

    ``initial_state`` is the snapshot taken at reset; without one the scenario's raw state stands in.
    """
    state = initial_state if initial_state is not None else scenario.initial_state
    key = _reset_key(scenario)
    # Episodes of one scenario usually start together: the first computes, the others wait for its result
    # instead of each paying for a check process. If the first fails, the next waiter computes.
    while (pending := pool.reset_pending.get(key)) is not None:
        await pending.wait()
    cached = pool.reset_results.get(key)
    if cached is not None:
        return cached[1]
    done = pool.reset_pending[key] = asyncio.Event()
    try:
        with checks_of_scenario(batch_key(scenario)):
            results = await pool.run_checks(prepared_checks(scenario.checks), state, state, transcript=[])
        pool.reset_results[key] = (scenario.initial_state, results)
    finally:
        del pool.reset_pending[key]
        done.set()
    return results


async def score_final_state(
    pool: SandboxPool,
    scenario: Scenario,
    final_state: dict[str, Any],
    *,
    initial_state: dict[str, Any] | None = None,
    transcript: list[dict[str, Any]] | None = None,
    rules: EpisodeRules = HARNESS_RULES,
    reset_results: list[CheckResult] | None = None,
) -> tuple[list[CheckResult], RewardBreakdown]:
    """Run the scenario's checks on (initial, final, transcript), and mark what already held at reset.

    ``initial_state`` is the state snapshot taken at reset (None: the scenario's raw state, for callers that
    have no session); ``transcript`` the episode's messages after the system prompt.
    """
    if not scenario.checks:
        raise ScenarioWithoutChecks(f"scenario {scenario.id!r} has no checks and cannot be scored")
    initial = initial_state if initial_state is not None else scenario.initial_state
    with checks_of_scenario(batch_key(scenario)):
        # Asked for together with the reset results (when those are still to compute), so that one check process
        # scores both.
        final_run = asyncio.ensure_future(
            pool.run_checks(prepared_checks(scenario.checks), initial, final_state, transcript=transcript or [])
        )
    try:
        if reset_results is None:
            reset_results = await checks_at_reset(pool, scenario, initial)
        results = await final_run
    finally:
        if not final_run.done():
            final_run.cancel()  # the reset results failed: its answer would go nowhere
        elif not final_run.cancelled():
            final_run.exception()  # retrieved, whatever it was: the exception that ends this call is the reset's
    at_reset = {r.check_id: r.passed for r in reset_results}
    results = [r.model_copy(update={"passed_at_reset": at_reset.get(r.check_id)}) for r in results]
    return results, reward_from_results(results, rules)
