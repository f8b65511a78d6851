"""τ²-bench's own system prompts, read from the release at import time and stored in the records it makes.

The agent's prompt is upstream's ``SYSTEM_PROMPT.format(agent_instruction=AGENT_INSTRUCTION, domain_policy=policy)``
(``tau2/agent/llm_agent.py``); the simulated user's is ``SYSTEM_PROMPT.format(global_user_sim_guidelines=...,
instructions=str(task.user_scenario))`` (``tau2/user/user_simulator.py``), with the guidelines of
``data/tau2/user_simulator/`` (their tool-using variant when the user has tools: telecom). The module constants are
read from the source's syntax tree, never by importing it. ``str(task.user_scenario)`` (persona, then instructions)
is rendered by upstream's own classes (``UserScenario``, ``StructuredUserInstructions`` of
``tau2/data_model/tasks.py``, taken from the source as they are) in the jail, like the domains' code."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.benchmarks.tau2.source import Tau2Source, Tau2SourceError
from harness.episode.dispatch import DispatchSession, open_tool_session
from harness.sandbox import SandboxPool
from harness.schema import Environment, Scenario, ToolCall

AGENT_MODULE = "agent/llm_agent.py"
USER_MODULE = "user/user_simulator.py"
TASKS_MODULE = "data_model/tasks.py"
GUIDELINES_FOLDER = "data/tau2/user_simulator"
GuidelinesName = Literal["simulation_guidelines.md", "simulation_guidelines_tools.md"]
"""Upstream's guidelines for a user without tools, and for one with tools (``get_global_user_sim_guidelines``)."""
SCENARIO_NAMES = ("StructuredUserInstructions", "UserInstructions", "UserScenario")
"""What ``str(task.user_scenario)`` needs of ``tasks.py``: the two classes and the union they are typed with."""
RENDERER_CLASS = "Tau2ScenarioRenderer"
_LEFT_OUT = ("tau2", "loguru")
AGENT_PROMPT_KEY = "tau2_agent_prompt"
"""The key of an environment's ``provenance.details`` that holds its :class:`AgentPrompt`."""
USER_PROMPT_KEY = "tau2_user_prompt"
"""The key of a scenario's ``provenance.details`` that holds its :class:`UserPrompt`."""
REIMPORT = (
    "re-import it with `harness import tau2` (imports before τ²-bench's prompts were read from the source hold none)"
)

_RENDERER_SOURCE = f"""

class {RENDERER_CLASS}:
    def __init__(self, init_config):
        pass

    def execute_call(self, name, arguments):
        return str(UserScenario.model_validate(arguments["user_scenario"]))
"""


class AgentPrompt(BaseModel):
    """The agent's system prompt of one τ² domain, as upstream's ``LLMAgent.system_prompt`` makes it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    version: Literal[1] = 1
    system_prompt: str = Field(description="Upstream's SYSTEM_PROMPT with AGENT_INSTRUCTION and the domain policy.")


class UserPrompt(BaseModel):
    """The simulated user's system prompt of one τ² task, as upstream's ``UserSimulator.system_prompt`` makes it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    version: Literal[1] = 1
    system_prompt: str = Field(description="Upstream's SYSTEM_PROMPT with the guidelines and str(task.user_scenario).")
    scenario: str = Field(
        description="str(task.user_scenario): the persona (when there is one), then the instructions."
    )
    guidelines: GuidelinesName = Field(description="Which of upstream's guidelines the prompt holds.")


@dataclass(frozen=True)
class PromptSources:
    """What the prompts are made of, read from one copy of the release."""

    agent_template: str
    agent_instruction: str
    user_template: str
    guidelines: str
    guidelines_with_tools: str
    scenario_code: str
    """Python source defining ``UserScenario`` (upstream's own classes and the module's imports), for the jail."""

    def agent_prompt(self, policy: str) -> AgentPrompt:
        text = self.agent_template.format(agent_instruction=self.agent_instruction, domain_policy=policy)
        return AgentPrompt(system_prompt=text)

    def user_prompt(self, scenario: str, *, user_has_tools: bool) -> UserPrompt:
        guidelines = self.guidelines_with_tools if user_has_tools else self.guidelines
        text = self.user_template.format(global_user_sim_guidelines=guidelines, instructions=scenario)
        name: GuidelinesName = "simulation_guidelines_tools.md" if user_has_tools else "simulation_guidelines.md"
        return UserPrompt(system_prompt=text, scenario=scenario, guidelines=name)


def _string_value(node: ast.expr) -> str | None:
    """A string literal, or a string literal's ``.strip()``: how upstream writes its prompt constants."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "strip"
        and not node.args
        and not node.keywords
    ):
        inner = _string_value(node.func.value)
        return inner.strip() if inner is not None else None
    return None


def module_string(text: str, name: str, where: str) -> str:
    """The value of the module-level string constant ``name`` of a module's source."""
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [name]:
            value = _string_value(node.value)
            if value is None:
                raise Tau2SourceError(f"{where}: {name} is not a string constant; is it τ²-bench 26.3?")
            return value
    raise Tau2SourceError(f"{where} defines no {name}; is it τ²-bench 26.3?")


def _defines(node: ast.stmt) -> str | None:
    if isinstance(node, ast.ClassDef):
        return node.name
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id
    return None


def _kept_import(node: ast.stmt) -> bool:
    """An import of the module that the jail can do (tau2's own and loguru are left out)."""
    if isinstance(node, ast.ImportFrom):
        return (node.module or "").split(".")[0] not in _LEFT_OUT
    if isinstance(node, ast.Import):
        return all(alias.name.split(".")[0] not in _LEFT_OUT for alias in node.names)
    return False


def scenario_code(text: str, where: str) -> str:
    """The source that defines ``UserScenario``: the module's imports but tau2's, then its definitions of
    :data:`SCENARIO_NAMES`, each as upstream wrote it."""
    tree = ast.parse(text)
    imports: list[str] = []
    found: dict[str, str] = {}
    for node in tree.body:
        segment = ast.get_source_segment(text, node)
        if segment is None:
            continue
        if _kept_import(node):
            imports.append(segment)
        elif (name := _defines(node)) in SCENARIO_NAMES and name is not None:
            found[name] = segment
    missing = [name for name in SCENARIO_NAMES if name not in found]
    if missing:
        raise Tau2SourceError(f"{where} defines no {', '.join(missing)}; is it τ²-bench 26.3?")
    return "\n".join(imports) + "\n\n\n" + "\n\n\n".join(found[name] for name in SCENARIO_NAMES) + "\n"


def read_prompt_sources(source: Tau2Source) -> PromptSources:
    """Everything the prompts are made of, read (never run) from ``source``."""
    agent = source.read_python(AGENT_MODULE)
    user = source.read_python(USER_MODULE)
    return PromptSources(
        agent_template=module_string(agent, "SYSTEM_PROMPT", AGENT_MODULE),
        agent_instruction=module_string(agent, "AGENT_INSTRUCTION", AGENT_MODULE),
        user_template=module_string(user, "SYSTEM_PROMPT", USER_MODULE),
        guidelines=source.read_text(f"{GUIDELINES_FOLDER}/simulation_guidelines.md"),
        guidelines_with_tools=source.read_text(f"{GUIDELINES_FOLDER}/simulation_guidelines_tools.md"),
        scenario_code=scenario_code(source.read_python(TASKS_MODULE), TASKS_MODULE) + _RENDERER_SOURCE,
    )


async def render_scenarios(pool: SandboxPool, sources: PromptSources, tasks: list[dict[str, Any]]) -> list[str]:
    """``str(task.user_scenario)`` of each task, by upstream's own classes in the jail, in the tasks' order."""
    renderer = Environment(
        id="tau2-user-scenarios",
        name="user scenarios",
        class_name=RENDERER_CLASS,
        code=sources.scenario_code,
        call_dispatcher="execute_call",
    )
    session = await open_tool_session(pool, renderer, {}, record_diffs=False)
    rendered: list[str] = []
    try:
        assert isinstance(session, DispatchSession)
        for task in tasks:
            call = ToolCall(
                id=f"scenario-{task['id']}", name="render", arguments={"user_scenario": task["user_scenario"]}
            )
            observation = await session.call_raw(call)
            if not isinstance(observation.content, str):
                raise Tau2SourceError(f"task {task['id']}: its user scenario does not render: {observation.error}")
            rendered.append(observation.content)
    finally:
        await session.close()
    return rendered


def stored_agent_prompt(environment: Environment) -> AgentPrompt | None:
    value = environment.provenance.details.get(AGENT_PROMPT_KEY)
    return AgentPrompt.model_validate(value) if value is not None else None


def stored_user_prompt(scenario: Scenario) -> UserPrompt | None:
    value = scenario.provenance.details.get(USER_PROMPT_KEY)
    return UserPrompt.model_validate(value) if value is not None else None
