"""The factories ``harness.run.run`` takes: one policy per episode from the run's settings."""

from __future__ import annotations

from agents.factory import build_agent_from_settings, build_user
from agents.oracle_user import OracleUser
from agents.scripted_user import ScriptedUser
from harness.llm import LLMClient
from harness.rules.protocols import AgentPolicy, UserPolicy
from harness.run.config import ORACLE_USER_MODEL
from harness.schema import AgentSettings, Scenario


def agent_factory(scenario: Scenario, client: LLMClient, settings: AgentSettings) -> AgentPolicy:
    return build_agent_from_settings(settings, client, scenario=scenario)


def user_factory(scenario: Scenario, client: LLMClient, settings: AgentSettings) -> UserPolicy:
    if scenario.turns:
        return ScriptedUser(scenario, role=settings.role)
    if settings.model.model == ORACLE_USER_MODEL:
        return OracleUser(scenario, role=settings.role)
    return build_user(settings.model, client, role=settings.role, system_prompt_version=settings.system_prompt_version)
