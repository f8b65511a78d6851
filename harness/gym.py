"""A gymnasium-style environment for RL rollout loops, on the same episode machinery as ``harness run``.

    env = ToolEnv(library, pool=pool)                      # mode="conv" needs a simulated user
    messages, tools = await env.reset(scenario)
    while True:
        assistant = await my_policy(messages, tools)      # an OpenAI assistant message
        result = await env.step(assistant)
        messages = result.messages                        # the whole transcript so far
        if result.terminated or result.truncated:
            break
    result.reward, result.info["check_results"]           # the rules' reward, and each check's outcome

``rules`` picks the episode rules (:mod:`harness.rules.profiles`): ``harness`` (the default; the reward is EnvFactory's
composite) or a profile a benchmark declares (:func:`harness.registry.rules_profile`), whose reward is its own
(a benchmark's runtime: the fraction of checks passed, rounded as upstream rounds it, and 0 for the endings it
scores 0). ``reset`` refuses a scenario that
the cheap part of ``harness validate`` finds invalid (:class:`InvalidScenario`) unless ``include_invalid``.
A library from the Hub runs only in a pool with every confinement layer (:class:`WeakSandbox` otherwise) unless
``allow_weak_sandbox`` (the ``--allow-weak-sandbox`` of the CLI).

A rollout never dies of a bad value: ``reset`` with something that is not a scenario of the library or a seed that
is not a 64-bit integer (``harness.train.rows``) ends the episode at once, as does an environment that cannot be
loaded. ``reset`` then returns one user message saying the episode is void and why, and no tools; the next
``step`` returns ``terminated`` with reward 0 and ``info["termination"]`` giving the reason (``bad_row``,
``unknown_scenario``, ``environment_error``, ...; ``info["trajectory"]`` is None when no episode started).

In conv mode ``user`` is a user policy, or a function from the scenario to one (``ScriptedUser`` for scenarios
with scripted turns, a benchmark's); ``info["tools"]`` carries the tools visible after each step.

The methods are coroutines because environment code runs in sandboxed processes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.episode.loop import Episode
from harness.episode_factory import INVALID_SCENARIO, EpisodeFactory, EpisodeRecipe, Refusal
from harness.library import Library
from harness.registry import rules_profile
from harness.rules.profiles import DEFAULT_RULES, RulesName
from harness.rules.protocols import UserPolicy, agent_turn_from_message
from harness.sandbox import SandboxPool
from harness.schema import AgentSettings, Mode, ModelSettings, Scenario, TerminationReason
from harness.scoring.reward import CompositeWeights
from harness.train.jailed_episode import RolloutOutcome, void_outcome
from harness.train.rows import BAD_ROW, read_row, void_text


class InvalidScenario(ValueError):
    """The scenario fails the cheap validation (``include_invalid=True`` runs it anyway)."""


@dataclass
class StepResult:
    observations: list[dict[str, Any]]
    """The messages that followed the assistant message: tool results, and in conv mode the user's reply."""
    messages: list[dict[str, Any]]
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any] = field(default_factory=dict)


class ToolEnv:
    """One episode at a time; make one ``ToolEnv`` per concurrent rollout (they can share a pool)."""

    def __init__(
        self,
        library: Library,
        *,
        pool: SandboxPool,
        mode: Mode = "nonconv",
        user: UserPolicy | Callable[[Scenario], UserPolicy] | None = None,
        max_steps: int | None = None,
        weights: CompositeWeights | None = None,
        policy_name: str = "external",
        rules: RulesName = DEFAULT_RULES,
        include_invalid: bool = False,
        allow_weak_sandbox: bool = False,
    ):
        if mode == "conv" and user is None:
            raise ValueError("conversational mode needs a simulated user policy")
        self.library = library
        self.pool = pool
        self.user = user
        recipe = EpisodeRecipe(
            mode=mode,
            max_steps=max_steps,
            reward_weights=weights or CompositeWeights(),
            rules=rules_profile(rules),
            screen=not include_invalid,
            allow_weak_sandbox=allow_weak_sandbox,
        )
        self.factory = EpisodeFactory(recipe, library, pool)
        self.rules = recipe.rules.name
        self.settings = AgentSettings(kind=policy_name, model=ModelSettings(model=policy_name))
        self._episode: Episode | None = None
        self._void: RolloutOutcome | None = None
        """How the episode ended before it started (a bad value given to ``reset``), until the next ``step``."""
        self._count = 0

    async def reset(self, scenario: Scenario, *, seed: int = 0) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Start an episode on ``scenario``: the opening messages and the tools (OpenAI function schemas). A value
        that cannot start one ends it at once (see above): one message saying why, and no tools."""
        await self.close()
        if not isinstance(scenario, Scenario):
            return self._refuse(None, BAD_ROW, f"scenario: not a Scenario but {type(scenario).__name__}")
        row = read_row({"scenario_id": scenario.id, "seed": seed})
        if isinstance(row, str):
            return self._refuse(scenario.id, BAD_ROW, row)
        episode_id = f"{scenario.id}-{self._count + 1}"
        episode = await self.factory.open(
            scenario, seed=row.seed, episode_id=episode_id, agent_settings=self.settings, user=self.user
        )
        if isinstance(episode, Refusal):
            if episode.reason == INVALID_SCENARIO:
                raise InvalidScenario(f"scenario {scenario.id!r} is invalid: {episode.detail}")
            return self._refuse(scenario.id, episode.reason, episode.detail)
        self._count += 1
        self._episode = episode
        try:
            await episode.start()
        except Exception as exc:
            episode.fail(exc)
        if episode.termination is not None:  # its environment did not load: the next step records the episode
            return [{"role": "user", "content": void_text(episode.termination.value, episode.termination_detail)}], []
        return list(episode.messages), list(episode.tools)

    async def step(self, assistant_message: dict[str, Any]) -> StepResult:
        """Apply one assistant message. The reward is 0 until the episode ends, then the composite reward. After
        an episode that ended at ``reset``, the step ends it: ``terminated``, reward 0 and why in ``info``."""
        void, self._void = self._void, None
        if void is not None:
            return self._void_result(void, assistant_message)
        episode = self._episode
        if episode is None:
            raise RuntimeError("call reset() before step()")
        before = len(episode.messages)
        observations: list[dict[str, Any]] = []
        if not episode.done:  # else it ended at reset (its environment did not load): the step only ends it
            try:
                await episode.apply(agent_turn_from_message(assistant_message))
            except Exception as exc:
                episode.fail(exc)
            observations = episode.messages[before + 1 :]
        if not episode.done:
            # Scripted turns can add tools as the conversation goes on: the current list rides along.
            return StepResult(observations, list(episode.messages), 0.0, False, False, {"tools": list(episode.tools)})
        trajectory = await episode.finish()
        self._episode = None
        reward = None
        if trajectory.reward is not None:
            # Turn-scored scenarios (a benchmark's scripted turns) have no composite: their reward is the share of
            # turns passed.
            reward = trajectory.reward.composite
            if reward is None:
                reward = trajectory.reward.state_reward
        truncated = trajectory.termination is TerminationReason.MAX_STEPS
        info = {
            "trajectory": trajectory,
            "termination": trajectory.termination.value,
            "termination_detail": trajectory.termination_detail,
            "rules": self.rules,
            "check_results": [r.model_dump(mode="json") for r in trajectory.check_results],
            "reward_breakdown": trajectory.reward.model_dump(mode="json") if trajectory.reward is not None else None,
        }
        return StepResult(observations, list(trajectory.messages), reward or 0.0, not truncated, truncated, info)

    def _refuse(
        self, scenario_id: str | None, reason: str, detail: str
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        self._void = void_outcome(scenario_id, reason, detail)
        return [{"role": "user", "content": void_text(reason, detail)}], []

    def _void_result(self, void: RolloutOutcome, assistant_message: dict[str, Any]) -> StepResult:
        messages = [{"role": "user", "content": void_text(void.reason, void.detail)}, assistant_message]
        info: dict[str, Any] = {
            "trajectory": None,
            "termination": void.reason,
            "termination_detail": void.detail,
            "rules": self.rules,
            "check_results": [],
            "reward_breakdown": None,
        }
        return StepResult([], messages, 0.0, True, False, info)

    async def close(self) -> None:
        self._void = None
        if self._episode is not None:
            await self._episode.close()
            self._episode = None
