"""The ``envscaler`` episode rules: upstream EnvScaler's runtime (``interact_with_env/`` in RUC-NLPIR/EnvScaler),
rule by rule, so that a trainer on the gym API or a leaderboard gets the reward of the paper."""

from __future__ import annotations

from harness.rules.profiles import EpisodeRules, RulesPrompts
from harness.schema import RewardBreakdown, TerminationReason, Trajectory

from .prompts import agent_system_prompt

ENVSCALER_RULES = EpisodeRules(
    name="envscaler",
    first_call_only=True,
    pass_arguments_through=True,
    raising_tool_ends_episode=True,
    truncation_scores=False,
    empty_turn_is_parse_error=True,
    parse_error_limit=False,
    reward_decimals=4,
    composite_reward=False,
    tool_result_format="python",
    errors_as_user_messages=True,
    stop_tokens=("###STOP###",),
    reply_tool="chat_with_user",
    # Upstream builds the class in `reset` and calls tools in its own process: a class that does not build
    # raises out of `reset`, and a tool that ends the process ends the whole run, so the episode gets no reward.
    environment_failure="not_scored",
    prompts=RulesPrompts(agent=agent_system_prompt),
)


def upstream_reward(reward: RewardBreakdown, trajectory: Trajectory | None) -> float:
    """Upstream EnvScaler's reward: the check pass rate to 4 decimals, 0 when a tool raised or the step limit cut
    the episode (whatever rules the episode ran under)."""
    if trajectory is not None:
        if trajectory.termination in (TerminationReason.TOOL_EXCEPTION, TerminationReason.MAX_STEPS):
            return 0.0
        if any(step.observation.kind == "tool_exception" for step in trajectory.steps):
            return 0.0
    passed = reward.checks_passed / reward.checks_total if reward.checks_total else reward.state_reward
    return round(passed, 4)
