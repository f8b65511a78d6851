"""What each role's model requests carry: the rules' benchmark declares its runner's defaults per role (a parameter
it leaves unset is not sent at all), the run's flags override them (``--temperature`` the agent's,
``--user-temperature`` the user's), and rules that declare nothing keep the project's behaviour."""

from __future__ import annotations

from typing import Any

import pytest

from harness.llm import LLMClient
from harness.llm.aliases import AliasTable
from harness.registry import rules_profile
from harness.rules.profiles import RoleSampling, Sampling
from harness.run import config as run_config
from harness.run.config import RunConfig, role_models, sent_sampling, with_sampling
from harness.run.folder import check_resumable
from harness.schema import DatasetRef, ModelSettings, RunManifest
from tests.doubles.mock_openai import MockOpenAIServer

TOOLS = [{"type": "function", "function": {"name": "look", "description": "Look.", "parameters": {"type": "object"}}}]
# A benchmark whose user simulator sends no temperature and whose runner sends no seed (τ-bench's shape).
SILENT_USER = Sampling(agent=RoleSampling(temperature=0.0), user=RoleSampling())


@pytest.fixture
def silent_user_rules(monkeypatch: pytest.MonkeyPatch) -> str:
    """The ``harness`` rules with :data:`SILENT_USER` declared (every other lookup is the registry's own)."""
    profile = rules_profile("harness").model_copy(update={"name": "silent-user", "sampling": SILENT_USER})
    monkeypatch.setattr(
        run_config, "rules_profile", lambda name: profile if name == "silent-user" else rules_profile(name)
    )
    return "silent-user"


def test_rules_without_a_declaration_keep_the_projects_behaviour() -> None:
    agent, user = role_models(RunConfig(rules="harness", seed=4))
    assert (agent.temperature, agent.seed, user.temperature, user.seed) == (0.0, 4, 0.0, 4)
    agent, user = role_models(RunConfig(rules="harness", temperature=0.5))
    assert (agent.temperature, user.temperature) == (0.5, 0.5)  # --temperature is both roles' here
    agent, user = role_models(RunConfig(rules="harness", temperature=0.5, user_temperature=0.2))
    assert (agent.temperature, user.temperature) == (0.5, 0.2)
    assert agent.extra == {} and user.extra == {}


def test_tau2_sends_each_role_its_runners_defaults_and_the_flags_override_them() -> None:
    agent, user = role_models(RunConfig(rules="tau2", seed=9))
    for role in (agent, user):
        assert (role.temperature, role.seed, role.top_p, role.extra) == (0.0, 9, None, {"tool_choice": "auto"})
    agent, user = role_models(RunConfig(rules="tau2", temperature=0.7))
    assert (agent.temperature, user.temperature) == (0.7, 0.0)  # the agent's flag leaves the user's default
    agent, user = role_models(RunConfig(rules="tau2", user_temperature=0.3))
    assert (agent.temperature, user.temperature) == (0.0, 0.3)


def test_a_parameter_a_role_leaves_unset_is_not_sent(silent_user_rules: str) -> None:
    agent, user = role_models(RunConfig(rules=silent_user_rules, seed=3))
    assert (agent.temperature, agent.seed) == (0.0, None)
    assert (user.temperature, user.seed) == (None, None)
    assert sent_sampling(user) == {} and sent_sampling(agent) == {"temperature": 0.0}
    _, user = role_models(RunConfig(rules=silent_user_rules, user_temperature=0.4))
    assert user.temperature == 0.4  # the user's flag still sets it


def test_the_config_records_what_each_role_is_sent_and_resolves_once(silent_user_rules: str) -> None:
    resolved = with_sampling(RunConfig(rules=silent_user_rules))
    assert (resolved.temperature, resolved.user_temperature) == (0.0, None)
    assert with_sampling(resolved) == resolved
    assert with_sampling(RunConfig(rules="harness", temperature=0.6)).user_temperature == 0.6


async def test_the_wire_carries_exactly_the_parameters_set() -> None:
    """Through the real client to a real server: an unset temperature or seed is absent from the body, and a
    tool_choice goes only with tools."""
    async with MockOpenAIServer() as server:
        client = LLMClient(aliases=AliasTable.load(include_user_file=False))
        extra: dict[str, Any] = {"api_base": server.base_url, "tool_choice": "auto"}
        messages = [{"role": "user", "content": "hi"}]
        await client.chat(ModelSettings(model="openai/unset", extra=extra), messages, tools=TOOLS)
        await client.chat(ModelSettings(model="openai/unset", extra=extra), messages)
        await client.chat(ModelSettings(model="openai/set", temperature=0.0, seed=2, extra=extra), messages)
        await client.aclose()
        with_tools, without_tools, with_sampling_set = (r.body for r in server.chat_requests())
    assert with_tools is not None and without_tools is not None and with_sampling_set is not None
    assert with_tools["tool_choice"] == "auto" and "tool_choice" not in without_tools
    for body in (with_tools, without_tools):
        assert "temperature" not in body and "seed" not in body
    assert (with_sampling_set["temperature"], with_sampling_set["seed"]) == (0.0, 2)


def manifest(config: dict[str, Any]) -> RunManifest:
    return RunManifest(run_id="r", package_version="0", dataset=DatasetRef(source="test"), config=config)


def test_a_folder_made_before_per_role_sampling_resumes_when_the_user_got_the_same_temperature() -> None:
    before = {"rules": "harness", "temperature": 0.0}  # no user_temperature: the user was sent --temperature
    check_resumable(manifest(before), manifest({**before, "user_temperature": 0.0}))
    with pytest.raises(run_config.RunRefused, match="user_temperature"):
        check_resumable(manifest(before), manifest({**before, "user_temperature": 0.5}))
