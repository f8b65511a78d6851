"""An ended episode's verdict from its final state: the one decision a run and ``harness rescore`` both make.

Which scoring applies: a scripted conversation without checks is judged turn by turn, by the turn scorer of the
benchmark its scenario comes from (``Benchmark.turn_scorer``); an ending the rules score 0 skips the checks (a
raising tool or the step limit under rules that end there; any ending but the user's stop under rules that score
only that); otherwise the checks run in the sandbox and the rules say whether the reward is EnvFactory's composite,
the checks' pass rate, all-or-nothing, or one check's verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.registry import benchmark_for_source
from harness.rules.profiles import EpisodeRules
from harness.sandbox.pool import SandboxPool
from harness.schema import CheckResult, Environment, RewardBreakdown, Scenario, TerminationReason, ToolCall
from harness.scoring.checks import check_transcript, score_final_state, zero_reward
from harness.scoring.reward import CompositeWeights, composite


@dataclass(frozen=True)
class EndedEpisode:
    """What the verdict reads of an episode that ended with a final state."""

    scenario: Scenario
    environment: Environment
    rules: EpisodeRules
    termination: TerminationReason
    messages: list[dict[str, Any]]
    calls: list[ToolCall]
    seed: int
    scripted: bool
    """The episode played the scenario's scripted turns with a user (a benchmark's conversation)."""
    weights: CompositeWeights
    user_calls: list[dict[str, Any]] = field(default_factory=list)
    """Dual control: the simulated user's calls as messages, added to what the checks read of the transcript."""


def rules_give_zero(rules: EpisodeRules, termination: TerminationReason) -> bool:
    """Whether the rules score this ending 0 without running the checks: an ending outside the rules' scored
    endings, a raising tool under rules it ends, the step limit under rules that do not score a truncation."""
    if rules.scored_endings is not None and termination not in rules.scored_endings:
        return True
    if termination is TerminationReason.TOOL_EXCEPTION:
        return rules.raising_tool_ends_episode
    return termination is TerminationReason.MAX_STEPS and not rules.truncation_scores


async def episode_verdict(
    pool: SandboxPool, ended: EndedEpisode, final_state: dict[str, Any], start_state: dict[str, Any] | None
) -> tuple[list[CheckResult], RewardBreakdown | None]:
    """The check results and the reward of ``ended`` (no reward when the scenario has nothing to score with)."""
    scenario = ended.scenario
    if ended.scripted and not scenario.checks:
        owner = benchmark_for_source(scenario.provenance.source)
        if owner is not None and owner.turn_scorer is not None:
            return await owner.turn_scorer(
                pool, scenario, ended.environment, ended.messages, ended.termination, seed=ended.seed
            )
    if not scenario.checks:
        return [], None
    if rules_give_zero(ended.rules, ended.termination):
        return [], zero_reward(scenario)
    check_results, reward = await score_final_state(
        pool,
        scenario,
        final_state,
        initial_state=start_state,
        transcript=check_transcript(ended.messages) + ended.user_calls,
        rules=ended.rules,
    )
    return check_results, rules_reward(reward, check_results, ended, final_state)


def rules_reward(
    reward: RewardBreakdown, results: list[CheckResult], ended: EndedEpisode, final_state: dict[str, Any] | None
) -> RewardBreakdown:
    """The reward the rules make of the check-based breakdown: one check's verdict, EnvFactory's composite,
    all-or-nothing, or the pass rate."""
    if ended.rules.reward_check is not None:
        return reward_of_check(reward, results, ended.rules)
    if ended.rules.composite_reward:
        return composite(ended.scenario, ended.calls, reward, final_state, ended.weights)
    if ended.rules.all_or_nothing_reward:
        whole = 1.0 if reward.success else 0.0
        return reward.model_copy(update={"state_reward": whole, "composite": whole})
    return reward.model_copy(update={"composite": reward.state_reward})


def reward_of_check(reward: RewardBreakdown, results: list[CheckResult], rules: EpisodeRules) -> RewardBreakdown:
    """The reward of the rules' one reward check (1 or 0), with the process check's fraction beside it."""
    by_id = {result.check_id: result for result in results}
    held = rules.reward_check in by_id and by_id[str(rules.reward_check)].passed
    whole = 1.0 if held else 0.0
    process: float | None = None
    if rules.process_check is not None and rules.process_check in by_id:
        result = by_id[rules.process_check]
        process = 1.0 if held or result.passed else _fraction(result.value)
    update = {"state_reward": whole, "composite": whole, "success": held, "process_accuracy": process}
    return reward.model_copy(update=update)


def _fraction(value: str | None) -> float:
    try:
        return float(value) if value is not None else 0.0
    except ValueError:
        return 0.0
