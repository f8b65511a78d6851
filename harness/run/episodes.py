"""One episode of a run: the policies built for it and the episode loop run, in the run's sandbox pool or
through its MCP server. The local backend and the Ray executors both run episodes with this code, so both announce
each episode to their pool's check batches: the trials of one task running together are scored by one check
process (``harness.sandbox.check_batches``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from harness.episode.judging import Judge, judged_trajectory
from harness.episode_factory import EpisodeFactory, EpisodeRecipe
from harness.library import Library
from harness.llm import LLMClient
from harness.records.versions import record_versions
from harness.registry import rules_profile
from harness.rules.protocols import AgentPolicy, UserPolicy
from harness.sandbox import SandboxPool
from harness.schema import AgentSettings, RecordVersions, Scenario, Trajectory
from harness.scoring.checks import batch_key

from .config import RunConfig, agent_settings, user_settings
from .plan import EpisodeSpec

AgentFactory = Callable[[Scenario, LLMClient, AgentSettings], AgentPolicy]
UserFactory = Callable[[Scenario, LLMClient, AgentSettings], UserPolicy]


@dataclass(frozen=True)
class EpisodeContext:
    """What every episode of one run shares, wherever it runs."""

    config: RunConfig
    factory: EpisodeFactory
    """Opens the run's episodes: its library, pool and recipe (the rules resolved once from ``config.rules``)."""
    client: LLMClient
    agent_factory: AgentFactory
    user_factory: UserFactory | None
    agent: AgentSettings
    user: AgentSettings
    judge: Judge | None = None
    """The judge of the scenarios' judged checks (``--judge-model``), asked after each episode in this process."""
    versions: dict[tuple[str, str], RecordVersions] = field(default_factory=dict, compare=False)
    """What graded each scenario's episodes, by (environment, scenario) id: hashed once per scenario, not per
    episode (the library does not change during a run)."""

    def versions_of(self, scenario: Scenario) -> RecordVersions:
        key = (scenario.environment_id, scenario.id)
        versions = self.versions.get(key)
        if versions is None:
            environment = self.library.environments.get(scenario.environment_id)
            versions = self.versions[key] = record_versions(environment, scenario, self.factory.recipe.rules.name)
        return versions.model_copy()  # each trajectory its own: one may be changed without the others

    @property
    def library(self) -> Library:
        return self.factory.library

    @property
    def pool(self) -> SandboxPool:
        return self.factory.pool

    @property
    def run_id(self) -> str:
        return self.factory.recipe.run_id or ""

    @classmethod
    def of(
        cls,
        config: RunConfig,
        library: Library,
        pool: SandboxPool,
        client: LLMClient,
        agent_factory: AgentFactory,
        user_factory: UserFactory | None,
        run_id: str,
    ) -> EpisodeContext:
        # The run screened its scenarios and checked its pool's confinement before any episode (harness.run.driver).
        recipe = EpisodeRecipe(
            max_steps=config.max_steps,
            run_id=run_id,
            rules=rules_profile(config.rules),
            screen=False,
            allow_weak_sandbox=config.allow_weak_sandbox,
        )
        return cls(
            config,
            EpisodeFactory(recipe, library, pool),
            client,
            agent_factory,
            user_factory,
            agent=agent_settings(config),
            user=user_settings(config),
            judge=Judge.of(client, config.judge_model, config.seed) if config.judge_model else None,
        )


async def run_one_episode(
    spec: EpisodeSpec, context: EpisodeContext, *, on_scoring: Callable[[], None] | None = None
) -> Trajectory:
    """Run ``spec`` to its end; every failure of the episode is recorded in the trajectory it returns, and the
    versions of what graded it (:mod:`harness.records.versions`).

    The episode is announced to the pool for its whole run: a check process for its task waits for the other
    episodes of the task running now (its trials), so that one process scores them. ``on_scoring`` is called once,
    when the episode asks to be scored (or ends without asking): a backend frees the episode's slot then, and the
    next episode starts while this one waits for its batch."""
    with context.pool.scores_expected(batch_key(spec.scenario), on_scoring):
        trajectory = await _episode(spec, context)
    if spec.scenario.judged_checks:
        recipe = context.factory.recipe
        trajectory = await judged_trajectory(
            trajectory,
            spec.scenario,
            context.library.environments[spec.scenario.environment_id],
            recipe.rules,
            context.judge,
            weights=recipe.reward_weights,
            seed=spec.seed,
        )
    return trajectory.model_copy(update={"versions": context.versions_of(spec.scenario)})


async def _episode(spec: EpisodeSpec, context: EpisodeContext) -> Trajectory:
    config = context.config
    policy = context.agent_factory(spec.scenario, context.client, context.agent)
    simulated_user = (
        context.user_factory(spec.scenario, context.client, context.user)
        if spec.mode == "conv" and context.user_factory
        else None
    )
    factory = context.factory
    if config.mcp is not None:
        from harness.mcp import run_mcp_episode

        return await run_mcp_episode(
            spec.scenario,
            config.mcp,
            pool=context.pool,
            agent=policy,
            user=simulated_user,
            config=factory.recipe.config(seed=spec.seed, trial=spec.trial, mode=spec.mode),
            episode_id=spec.episode_id,
            environment=context.library.environments.get(spec.scenario.environment_id),
        )
    return await factory.play(
        spec.scenario,
        policy,
        user=simulated_user,
        seed=spec.seed,
        trial=spec.trial,
        mode=spec.mode,
        episode_id=spec.episode_id,
    )
