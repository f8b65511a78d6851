"""Build policies from settings. Teacher and student are the same agents with their own settings and role."""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

from agents.do_nothing import DoNothingAgent
from agents.function_calling import FunctionCallingAgent
from agents.oracle import OracleAgent
from agents.prompted import PromptedAgent
from agents.user_simulator import UserSimulator
from harness.registry import agent_kinds
from harness.rules.protocols import AgentPolicy, UserPolicy
from harness.schema import AgentSettings, ModelSettings, Scenario

if TYPE_CHECKING:
    from harness.llm import LLMClient

logger = logging.getLogger(__name__)

OWN_AGENT_KINDS: tuple[str, ...] = ("function_calling", "prompted", "oracle", "do_nothing")


def benchmark_agents() -> dict[str, str]:
    """The agents the installed benchmarks bring, by kind: ``module:attribute`` of what builds one. A kind named
    like one of the project's is left out, with a warning."""
    found: dict[str, str] = {}
    for kind in agent_kinds():
        if kind.name in OWN_AGENT_KINDS:
            logger.warning("a benchmark's agent kind %r is the project's own: left out", kind.name)
        else:
            found[kind.name] = kind.factory
    return found


BENCHMARK_AGENTS: dict[str, str] = benchmark_agents()
"""The agents the installed benchmarks bring (imported only when one is built)."""
AGENT_KINDS: tuple[str, ...] = (*OWN_AGENT_KINDS, *BENCHMARK_AGENTS)


def benchmark_agent_factory(kind: str) -> Any:
    """What builds a benchmark's agent of ``kind``: its declared ``module:attribute``, imported now."""
    module, _, attribute = BENCHMARK_AGENTS[kind].partition(":")
    found: Any = importlib.import_module(module)
    for part in attribute.split("."):
        found = getattr(found, part)
    return found


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
    ``scenario`` whose reference actions it replays, and a benchmark's agent the scenario of that benchmark it is
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
    if kind in BENCHMARK_AGENTS:
        if scenario is None:
            raise ValueError(f"the {kind} agent is prompted from its scenario: pass scenario=")
        factory = benchmark_agent_factory(kind)
        agent: AgentPolicy = factory(settings, client, scenario, role=role, system_prompt_version=system_prompt_version)
        return agent
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
