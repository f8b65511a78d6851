"""The one place episodes are made: the recipe travels as JSON, and the factory's refusals each have their reason."""

from __future__ import annotations

import pytest

from agents.oracle import OracleAgent
from harness.episode.loop import Episode
from harness.episode_factory import INVALID_SCENARIO, UNKNOWN_SCENARIO, EpisodeFactory, EpisodeRecipe, Refusal
from harness.library import load_library
from harness.records.library import Library
from harness.registry import rules_profile
from harness.sandbox import JailSpec, WeakSandbox
from harness.schema import AgentSettings, Check, ModelSettings
from harness.scoring.reward import CompositeWeights

LIBRARY = load_library(None)
SCENARIO = LIBRARY.scenarios[0]
AGENT = AgentSettings(kind="test", model=ModelSettings(model="test"))


@pytest.fixture
async def pool():
    async with JailSpec(workers=1).pool() as sandbox:
        yield sandbox


def test_a_recipe_travels_as_json_and_comes_back_with_the_same_profile() -> None:
    recipe = EpisodeRecipe(mode="conv", max_steps=7, rules="tau2", reward_weights=CompositeWeights(alpha=0.25))
    back = EpisodeRecipe.model_validate_json(recipe.model_dump_json())
    assert back == recipe
    assert back.rules is rules_profile("tau2")
    config = back.config(seed=3, trial=2, mode="nonconv")
    assert (config.mode, config.seed, config.trial, config.max_steps, config.rules.name) == ("nonconv", 3, 2, 7, "tau2")
    assert config.reward_weights.alpha == 0.25


async def test_open_screens_once_and_refuses_what_cannot_run(pool) -> None:
    factory = EpisodeFactory(EpisodeRecipe(), LIBRARY, pool)
    episode = await factory.open(SCENARIO, seed=0, episode_id="e-1", agent_settings=AGENT, user=None)
    assert isinstance(episode, Episode) and episode.episode_id == "e-1"
    await episode.close()
    assert factory.screened[SCENARIO.id] == (SCENARIO, None)

    broken = SCENARIO.model_copy(update={"checks": [Check(id="never", description="never", source="def check(:")]})
    refusal = await factory.open(broken, seed=0, episode_id="e-2", agent_settings=AGENT, user=None)
    assert isinstance(refusal, Refusal) and refusal.reason == INVALID_SCENARIO

    elsewhere = SCENARIO.model_copy(update={"environment_id": "not_in_the_library"})
    refusal = await factory.open(elsewhere, seed=0, episode_id="e-3", agent_settings=AGENT, user=None)
    assert isinstance(refusal, Refusal) and refusal.reason == UNKNOWN_SCENARIO

    unscreened = EpisodeFactory(EpisodeRecipe(screen=False), LIBRARY, pool)
    episode = await unscreened.open(broken, seed=0, episode_id="e-4", agent_settings=AGENT, user=None)
    assert isinstance(episode, Episode)
    await episode.close()


async def test_code_from_the_hub_is_refused_in_a_weak_pool_unless_the_recipe_allows_it(monkeypatch) -> None:
    monkeypatch.setenv("HARNESS_SANDBOX_DISABLE", "seccomp")
    hub = Library(LIBRARY.environments, LIBRARY.scenarios, LIBRARY.source, from_hub=True)
    async with JailSpec(workers=1).pool() as weak:
        assert [layer["name"] for layer in weak.missing_layers] == ["seccomp"]
        with pytest.raises(WeakSandbox, match="seccomp"):
            await EpisodeFactory(EpisodeRecipe(), hub, weak).open(
                SCENARIO, seed=0, episode_id="e", agent_settings=AGENT, user=None
            )
        local = await EpisodeFactory(EpisodeRecipe(), LIBRARY, weak).open(
            SCENARIO, seed=0, episode_id="e", agent_settings=AGENT, user=None
        )
        allowed = await EpisodeFactory(EpisodeRecipe(allow_weak_sandbox=True), hub, weak).open(
            SCENARIO, seed=0, episode_id="e", agent_settings=AGENT, user=None
        )
        assert isinstance(local, Episode) and isinstance(allowed, Episode)
        await local.close()
        await allowed.close()


async def test_play_runs_an_episode_to_its_verdict(pool) -> None:
    factory = EpisodeFactory(EpisodeRecipe(run_id="r"), LIBRARY, pool)
    trajectory = await factory.play(SCENARIO, OracleAgent(SCENARIO), seed=1, trial=2, episode_id="e")
    assert trajectory.reward is not None and trajectory.reward.success
    assert (trajectory.episode_id, trajectory.trial, trajectory.run_id) == ("e", 2, "r")
