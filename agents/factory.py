"""Build policies from settings. Teacher and student are the same agents with their own settings and role."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agents.acebench_text import AceBenchTextAgent
from agents.do_nothing import DoNothingAgent
from agents.function_calling import FunctionCallingAgent
from agents.oracle import OracleAgent
from agents.prompted import PromptedAgent
from agents.user_simulator import UserSimulator
from harness.protocols import AgentPolicy, UserPolicy
from harness.schema import AgentSettings, ModelSettings, Scenario

if TYPE_CHECKING:
    from harness.llm import LLMClient

AGENT_KINDS: tuple[str, ...] = ("function_calling", "prompted", "oracle", "do_nothing", "acebench-text")


def build_agent(
    kind: str,
    settings: ModelSettings | None,
    client: LLMClient | None,
    role: str = "agent",
    *,
    scenario: Scenario | None = None,
    system_prompt_version: str = "1",
) -> AgentPolicy:
    """An agent policy of ``kind``. Model-backed kinds need ``settings`` and ``client``; the oracle needs the
    ``scenario`` whose reference actions it replays, and ``acebench-text`` the imported ACEBench scenario it is
    prompted from (build one per scenario)."""
    if kind == "oracle":
        if scenario is None:
            raise ValueError("the oracle agent replays a scenario's reference actions: pass scenario=")
        return OracleAgent(scenario, role=role)
    if kind == "do_nothing":
        return DoNothingAgent(role=role)
    if kind not in AGENT_KINDS:
        raise ValueError(f"unknown agent kind {kind!r} (known: {', '.join(AGENT_KINDS)})")
    if settings is None or client is None:
        raise ValueError(f"a {kind} agent needs model settings and an LLM client")
    if kind == "acebench-text":
        if scenario is None:
            raise ValueError("the acebench-text agent is prompted from its scenario: pass scenario=")
        return AceBenchTextAgent(settings, client, scenario, role=role, system_prompt_version=system_prompt_version)
    if kind == "prompted":
        return PromptedAgent(settings, client, role=role, system_prompt_version=system_prompt_version)
    return FunctionCallingAgent(settings, client, role=role, system_prompt_version=system_prompt_version)


def build_agent_from_settings(
    settings: AgentSettings, client: LLMClient | None, *, scenario: Scenario | None = None
) -> AgentPolicy:
    return build_agent(
        settings.kind,
        settings.model,
        client,
        settings.role,
        scenario=scenario,
        system_prompt_version=settings.system_prompt_version,
    )


def build_user(
    settings: ModelSettings, client: LLMClient, *, role: str = "user", system_prompt_version: str = "1"
) -> UserPolicy:
    """The simulated user of conversational mode."""
    return UserSimulator(settings, client, role=role, system_prompt_version=system_prompt_version)
