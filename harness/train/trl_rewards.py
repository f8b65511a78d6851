"""One TRL reward function per reward component, so a trainer can log or weight each one on its own.

Each function takes TRL's keywords. With ``environment_factory`` it reads ``environments=`` (ending each rollout
with the agent's last reply, once); with :func:`harness.train.trl_rollout.rollout_func` it reads the
``reward_components`` column the rollout returned. A rollout that ended without a reward (a bad row, a rejected
call, a crashed environment) scores 0 in every component.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.registry import reward_components
from harness.schema import RewardBreakdown, Trajectory
from harness.train.jailed_episode import RolloutOutcome
from harness.train.trl_environment import finish_rollout

RewardFunction = Callable[..., list[float]]


def check_pass_rate(reward: RewardBreakdown, trajectory: Trajectory | None) -> float:
    """The share of the scenario's checks the final state passes."""
    if reward.checks_total:
        return reward.checks_passed / reward.checks_total
    return reward.state_reward


def state_reward(reward: RewardBreakdown, trajectory: Trajectory | None) -> float:
    """R_state of the composite: the check pass rate, or equality with the gold final state without checks."""
    if not reward.checks_total and reward.gold_state_match is not None:
        return 1.0 if reward.gold_state_match else 0.0
    return reward.state_reward


def trajectory_match(reward: RewardBreakdown, trajectory: Trajectory | None) -> float:
    """R_traj: the share of reference calls the agent's calls matched (1 without reference calls)."""
    return reward.trajectory_reward if reward.trajectory_reward is not None else 1.0


def length_penalty(reward: RewardBreakdown, trajectory: Trajectory | None) -> float:
    """Minus P_length (calls beyond the reference's length), so that a positive weight discourages them."""
    return -(reward.length_penalty or 0.0)


def composite(reward: RewardBreakdown, trajectory: Trajectory | None) -> float:
    """The rules' reward: EnvFactory's composite R under ``harness`` rules."""
    return reward.composite if reward.composite is not None else reward.state_reward


COMPONENTS: dict[str, Callable[[RewardBreakdown, Trajectory | None], float]] = {
    "check_pass_rate": check_pass_rate,
    "state_reward": state_reward,
    "trajectory_match": trajectory_match,
    "length_penalty": length_penalty,
    "composite": composite,
    # A benchmark's own rewards (upstream's reward of a benchmark whose rules the project reproduces).
    **reward_components(),
}


def component_values(outcome: RolloutOutcome) -> dict[str, float]:
    """Every component's value for one rollout (all 0 when it ended without a reward)."""
    if outcome.reward is None:
        return dict.fromkeys(COMPONENTS, 0.0)
    return {name: float(value(outcome.reward, outcome.trajectory)) for name, value in COMPONENTS.items()}


def final_reply(completion: Any) -> str:
    """The text of the last assistant message of a TRL completion (a message list, or plain text)."""
    if isinstance(completion, str):
        return completion
    for message in reversed(completion or []):
        if isinstance(message, dict) and message.get("role") == "assistant":
            content = message.get("content")
            return content if isinstance(content, str) else ""
    return ""


def _outcomes(environments: list[Any], completions: list[Any]) -> list[RolloutOutcome]:
    return [finish_rollout(env, final_reply(done)) for env, done in zip(environments, completions, strict=True)]


def _reward_function(name: str) -> RewardFunction:
    def reward(
        completions: list[Any],
        environments: list[Any] | None = None,
        reward_components: list[dict[str, float]] | None = None,
        log_extra: Callable[[str, list[Any]], None] | None = None,
        **_: Any,
    ) -> list[float]:
        if environments is not None:
            outcomes = _outcomes(environments, completions)
            if name == "composite" and log_extra is not None:
                log_extra("ending", [outcome.reason for outcome in outcomes])
            return [component_values(outcome)[name] for outcome in outcomes]
        if reward_components is None:
            raise ValueError(
                f"reward function {name!r} needs environments= (environment_factory) or the reward_components "
                "column (harness.train.trl_rollout.rollout_func)"
            )
        return [float(values.get(name, 0.0)) for values in reward_components]

    reward.__name__ = name
    reward.__qualname__ = name
    reward.__doc__ = COMPONENTS[name].__doc__
    return reward


def reward_functions(components: list[str] | None = None) -> list[RewardFunction]:
    """Reward functions for ``GRPOTrainer(reward_funcs=...)``, named after their components (TRL logs each as
    ``rewards/<name>``): ``check_pass_rate``, ``state_reward``, ``trajectory_match``, ``length_penalty``,
    ``composite`` and the rewards the installed benchmarks define by default, or those listed in ``components``."""
    chosen = list(COMPONENTS) if components is None else components
    unknown = [name for name in chosen if name not in COMPONENTS]
    if unknown:
        raise ValueError(f"unknown reward components {unknown}; choose from {', '.join(COMPONENTS)}")
    return [_reward_function(name) for name in chosen]
