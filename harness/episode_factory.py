"""The one place an episode is made: a serialisable recipe, and a factory that applies the trust rule, screens
the scenario and builds the :class:`~harness.episode.loop.Episode`.

Every site that plays episodes is an adapter over this: a run's local backend and its Ray executors
(:mod:`harness.run.episodes`), the gym (:mod:`harness.gym`), the trainers' rollouts and the OpenEnv server
(:mod:`harness.train.jailed_episode`), and synthesis's teacher and solver rollouts. What differs between them is
only how a refusal reaches their caller (a recorded trajectory, an outcome a trainer masks, an exception).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator

from harness.episode.config import EpisodeConfig
from harness.episode.loop import Episode, run_episode
from harness.library import Library
from harness.registry import rules_profile
from harness.rules.profiles import HARNESS_RULES, EpisodeRules
from harness.rules.protocols import AgentPolicy, UserPolicy
from harness.sandbox import SandboxError, SandboxPool, WeakSandbox
from harness.sandbox.spec import require_confinement
from harness.schema import AgentSettings, Mode, Scenario, TerminationReason, Trajectory
from harness.scoring.reward import CompositeWeights
from harness.toolspec import ToolDerivationError
from harness.validate import invalid_scenarios

UNKNOWN_SCENARIO = "unknown_scenario"
INVALID_SCENARIO = "invalid_scenario"


class EpisodeRecipe(BaseModel):
    """Everything but the scenario, seed and trial that decides how an episode of a library runs. Serialisable:
    a Ray executor receives it with its run's settings."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: Mode = "nonconv"
    max_steps: int | None = Field(default=None, ge=1, description="Agent turns; None takes the rules' default.")
    run_id: str | None = None
    reward_weights: CompositeWeights = Field(default_factory=CompositeWeights)
    rules: EpisodeRules = Field(default=HARNESS_RULES, description="A profile, or its name, resolved once here.")
    screen: bool = Field(
        default=True, description="Refuse a scenario the cheap part of `harness validate` finds invalid."
    )
    allow_weak_sandbox: bool = Field(
        default=False, description="Run code from the Hub or a benchmark's source without every jail layer."
    )

    @field_validator("rules", mode="before")
    @classmethod
    def _profile(cls, rules: Any) -> Any:
        return rules_profile(rules) if rules is None or isinstance(rules, str) else rules

    @field_serializer("rules")
    def _rules_name(self, rules: EpisodeRules) -> str:
        return rules.name  # a profile holds its components' functions: it travels by name, resolved on arrival

    def config(self, *, seed: int = 0, trial: int = 0, mode: Mode | None = None) -> EpisodeConfig:
        """The configuration of one episode of this recipe (in ``mode`` when given: a run plays each scenario in the
        mode its plan chose)."""
        return EpisodeConfig(
            mode=mode or self.mode,
            max_steps=self.max_steps,
            seed=seed,
            trial=trial,
            run_id=self.run_id,
            reward_weights=self.reward_weights,
            rules=self.rules,
        )


@dataclass(frozen=True)
class Refusal:
    """Why no episode was opened: an adapter's own reason (``unknown_scenario``, ``invalid_scenario``) or a
    termination reason (``environment_error``: its code declares no readable tool; ``infra_error``)."""

    scenario_id: str
    reason: str
    detail: str


@dataclass
class EpisodeFactory:
    """Opens the episodes of one library in one pool under one recipe. ``screened`` (the cheap validation's
    verdict per scenario) may be shared by the factories of every rollout slot."""

    recipe: EpisodeRecipe
    library: Library
    pool: SandboxPool
    screened: dict[str, tuple[Scenario, str | None]] = field(default_factory=dict)

    async def require_confinement(self) -> None:
        """The trust rule: code that did not come from this machine runs only with every jail layer, unless the
        recipe allows a weak sandbox (:class:`~harness.sandbox.WeakSandbox` before any of it runs)."""
        await require_confinement(self.pool, self.library.code_origin, self.recipe.allow_weak_sandbox)

    async def screen(self, scenario: Scenario) -> str | None:
        """The scenario's problem under the cheap validation (None: valid), once per scenario object."""
        cached = self.screened.get(scenario.id)
        if cached is None or cached[0] is not scenario:
            found = await invalid_scenarios(self.pool, self.library, [scenario])
            cached = self.screened[scenario.id] = (scenario, found.get(scenario.id))
        return cached[1]

    def episode(
        self,
        scenario: Scenario,
        *,
        seed: int,
        trial: int,
        episode_id: str,
        agent_settings: AgentSettings,
        user: UserPolicy | None,
        mode: Mode | None = None,
    ) -> Episode:
        """The episode, built without screening (a caller that screened the library up front, as a run does).
        Raises ``KeyError`` for an environment the library lacks and what the episode's set-up raises."""
        return Episode(
            scenario,
            self.library.environments[scenario.environment_id],
            pool=self.pool,
            config=self.recipe.config(seed=seed, trial=trial, mode=mode),
            episode_id=episode_id,
            agent_settings=agent_settings,
            user=user,
        )

    async def open(
        self,
        scenario: Scenario,
        *,
        seed: int,
        trial: int = 0,
        episode_id: str,
        agent_settings: AgentSettings,
        user: UserPolicy | Callable[[Scenario], UserPolicy] | None,
    ) -> Episode | Refusal:
        """The trust rule, the screening the recipe asks for, then the episode (``user`` may be a function from the
        scenario to its user). Every reason an episode cannot open is a :class:`Refusal`; a weak sandbox for code
        that needs every jail layer raises :class:`~harness.sandbox.WeakSandbox`."""
        await self.require_confinement()
        if scenario.environment_id not in self.library.environments:
            detail = f"environment {scenario.environment_id!r} is not in the library"
            return Refusal(scenario.id, UNKNOWN_SCENARIO, detail)
        if self.recipe.screen:
            try:
                problem = await self.screen(scenario)
            except WeakSandbox:
                raise
            except SandboxError as exc:
                return Refusal(scenario.id, TerminationReason.INFRA_ERROR.value, f"screening failed: {exc}")
            if problem is not None:
                return Refusal(scenario.id, INVALID_SCENARIO, problem)
        try:
            if user is not None and not isinstance(user, UserPolicy):
                user = user(scenario)  # a function from the scenario to its user (a benchmark's scripted user)
            return self.episode(
                scenario, seed=seed, trial=trial, episode_id=episode_id, agent_settings=agent_settings, user=user
            )
        except ToolDerivationError as exc:  # the environment's code declares no tool that can be read
            return Refusal(scenario.id, TerminationReason.ENVIRONMENT_ERROR.value, str(exc))
        except Exception as exc:
            detail = f"the episode could not be set up: {type(exc).__name__}: {exc}"
            return Refusal(scenario.id, TerminationReason.INFRA_ERROR.value, detail)

    async def play(
        self,
        scenario: Scenario,
        agent: AgentPolicy,
        *,
        user: UserPolicy | None = None,
        seed: int = 0,
        trial: int = 0,
        mode: Mode | None = None,
        episode_id: str,
    ) -> Trajectory:
        """Run one episode with ``agent`` to its end (no screening: see :meth:`episode`); per-episode failures
        end the trajectory, never raise."""
        return await run_episode(
            scenario,
            self.library.environments[scenario.environment_id],
            pool=self.pool,
            agent=agent,
            user=user,
            config=self.recipe.config(seed=seed, trial=trial, mode=mode),
            episode_id=episode_id,
        )
