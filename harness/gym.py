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

from harness.episode.config import EpisodeConfig
from harness.episode.loop import Episode
from harness.library import Library
from harness.registry import rules_profile
from harness.rules.profiles import DEFAULT_RULES, RulesName
from harness.rules.protocols import UserPolicy, agent_turn_from_message
from harness.sandbox import SandboxPool
from harness.sandbox.spec import require_confinement
from harness.schema import AgentSettings, Mode, ModelSettings, Scenario, TerminationReason
from harness.scoring.reward import CompositeWeights
from harness.toolspec import ToolDerivationError
from harness.train.jailed_episode import UNKNOWN_SCENARIO, RolloutOutcome, void_outcome
from harness.train.rows import BAD_ROW, read_row, void_text
from harness.validate import invalid_scenarios


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
        self.profile = rules_profile(rules)
        self.rules = self.profile.name
        self.include_invalid = include_invalid
        self.allow_weak_sandbox = allow_weak_sandbox
        self._screened: dict[str, tuple[Scenario, str | None]] = {}
        self.library = library
        self.pool = pool
        self.mode = mode
        self.user = user
        self.max_steps = max_steps
        self.weights = weights or CompositeWeights()
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
        await self._require_confinement()
        environment = self.library.environments.get(scenario.environment_id)
        if environment is None:
            detail = f"environment {scenario.environment_id!r} is not in the library"
            return self._refuse(scenario.id, UNKNOWN_SCENARIO, detail)
        if not self.include_invalid:
            problem = await self._screen(scenario)
            if problem is not None:
                raise InvalidScenario(f"scenario {scenario.id!r} is invalid: {problem}")
        self._count += 1
        config = EpisodeConfig(
            mode=self.mode, max_steps=self.max_steps, seed=row.seed, reward_weights=self.weights, rules=self.profile
        )
        try:
            episode = Episode(
                scenario,
                environment,
                pool=self.pool,
                config=config,
                episode_id=f"{scenario.id}-{self._count}",
                agent_settings=self.settings,
                user=self.user if self.user is None or isinstance(self.user, UserPolicy) else self.user(scenario),
            )
        except ToolDerivationError as exc:  # the environment's code declares no tool that can be read
            return self._refuse(scenario.id, TerminationReason.ENVIRONMENT_ERROR.value, str(exc))
        except Exception as exc:
            detail = f"the episode could not be set up: {type(exc).__name__}: {exc}"
            return self._refuse(scenario.id, TerminationReason.INFRA_ERROR.value, detail)
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

    async def _require_confinement(self) -> None:
        """Hub code runs only with every confinement layer, unless ``allow_weak_sandbox``: :class:`WeakSandbox`
        before any of it runs."""
        await require_confinement(self.pool, self.library.code_origin, self.allow_weak_sandbox)

    async def _screen(self, scenario: Scenario) -> str | None:
        """The scenario's problems under the cheap validation, once per scenario object."""
        cached = self._screened.get(scenario.id)
        if cached is None or cached[0] is not scenario:
            found = await invalid_scenarios(self.pool, self.library, [scenario])
            cached = self._screened[scenario.id] = (scenario, found.get(scenario.id))
        return cached[1]

    async def close(self) -> None:
        self._void = None
        if self._episode is not None:
            await self._episode.close()
            self._episode = None
