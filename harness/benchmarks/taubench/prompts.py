"""The agent's and the simulated user's system prompts under the ``taubench`` and ``taubench-react`` rules."""

from __future__ import annotations

from harness.rules.profiles import EpisodeRules
from harness.rules.protocols import STOP
from harness.schema import Environment, Mode, Scenario

from .user_prompt import stored_user_prompt


def agent_system_prompt(
    environment: Environment, mode: Mode, scenario: Scenario | None = None, rules: EpisodeRules | None = None
) -> str:
    """τ-bench's tool-calling agent: the domain's wiki is the whole system prompt."""
    return environment.introduction


# EnvScaler's preset (``taubench-react``) keeps its own user prompt, in EnvScaler's words after upstream's ReAct
# simulator (tau_bench/envs/user.py ReactUserSimulationEnv): the instruction, the rules of play, a thought and then
# the reply after "User Response:". The ``taubench`` rules send upstream's own prompt, read from the checkout at
# import (:mod:`harness.benchmarks.taubench.user_prompt`).
_USER_RULES = f"""\
Rules:
- Write a single line each time: that line is your next message as the user.
- Reveal the instruction bit by bit, only what the current step needs.
- Never make up information the instruction does not give: if the agent asks for something you were not given \
(an order id, say), answer that you do not remember it or do not have it.
- Once the goal of the instruction is reached, write {STOP} on its own, with nothing else, to end the \
conversation.
- Do not copy the instruction word for word: put it in your own words.
- Keep the conversation natural and keep to the personality the instruction describes."""

_REACT_USER_RULES = f"""\
Rules:
- First write a Thought: what to do next (the agent never sees it).
- Then write a User Response of one line: your next message as the user (this is what the agent receives).
- Reveal the instruction bit by bit, only what the current step needs.
- Never make up information the instruction does not give: if the agent asks for something you were not given \
(an order id, say), answer that you do not remember it or do not have it.
- Once the goal of the instruction is reached, make {STOP} the whole User Response, with nothing else, to end \
the conversation.
- Do not copy the instruction word for word: put it in your own words.
- Keep the conversation natural and keep to the personality the instruction describes.

Format:

Thought:
<your thought>

User Response:
<your message to the agent>"""


def user_prompt_for(instruction: str, react: bool = False) -> str:
    """The simulated user's system prompt of EnvScaler's preset: its role, the task's instruction, the rules of
    play (the ReAct format with ``react``)."""
    rules = _REACT_USER_RULES if react else _USER_RULES
    return f"You are a user talking with an agent.\n\nInstruction: {instruction}\n\n{rules}"


def user_system_prompt(scenario: Scenario, rules: EpisodeRules) -> str:
    """Upstream's ``LLMUserSimulationEnv.build_system_prompt`` for the task's instruction, from the template the
    scenario was imported with (a scenario imported without one is refused: re-import it)."""
    return stored_user_prompt(scenario.provenance.details, scenario.id).render(scenario.task)


def react_user_system_prompt(scenario: Scenario, rules: EpisodeRules) -> str:
    """EnvScaler's preset: a thought, then the reply after ``User Response:`` (EnvScaler's own prompt)."""
    return user_prompt_for(scenario.task, react=True)


def user_opening(scenario: Scenario, rules: EpisodeRules) -> str:
    """The line upstream's simulator answers first (``LLMUserSimulationEnv.reset``), as the scenario was imported."""
    return stored_user_prompt(scenario.provenance.details, scenario.id).opening
