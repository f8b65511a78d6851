"""The agent's and the simulated user's system prompts under the ``taubench`` and ``taubench-react`` rules."""

from __future__ import annotations

from harness.rules.profiles import EpisodeRules
from harness.rules.protocols import STOP
from harness.schema import Environment, Mode, Scenario


def agent_system_prompt(
    environment: Environment, mode: Mode, scenario: Scenario | None = None, rules: EpisodeRules | None = None
) -> str:
    """τ-bench's tool-calling agent: the domain's wiki is the whole system prompt."""
    return environment.introduction


# τ-bench's user simulator (tau_bench/envs/user.py: LLMUserSimulationEnv, and ReactUserSimulationEnv for
# EnvScaler's preset) in our own words: the instruction, then the rules of play; the ReAct variant asks for a
# thought and then the reply after "User Response:". The stop token is upstream's.
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
    """The simulated user's system prompt under the ``taubench`` rules: its role, the task's instruction, the rules
    of play (the ReAct format with ``react``)."""
    rules = _REACT_USER_RULES if react else _USER_RULES
    return f"You are a user talking with an agent.\n\nInstruction: {instruction}\n\n{rules}"


def user_system_prompt(scenario: Scenario, rules: EpisodeRules) -> str:
    """The user simulator of upstream's tool-calling evaluation: the task's instruction and the rules of play."""
    return user_prompt_for(scenario.task)


def react_user_system_prompt(scenario: Scenario, rules: EpisodeRules) -> str:
    """Upstream's ReAct user simulator: a thought, then the reply after ``User Response:``."""
    return user_prompt_for(scenario.task, react=True)
