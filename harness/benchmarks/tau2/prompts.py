"""The agent's and the simulated user's system prompts under the ``tau2`` rules."""

from __future__ import annotations

from harness.rules.profiles import EpisodeRules
from harness.rules.protocols import OUT_OF_SCOPE, STOP, TRANSFER
from harness.schema import Environment, Mode, Scenario

# τ²-bench's prompts (tau2/agent/llm_agent.py, tau2/user/user_simulator.py and its simulation guidelines) in our
# own words and in upstream's layout: the agent gets its instructions and the domain policy in tagged sections,
# the user its guidelines and the task's scenario. The stop tokens are upstream's.
_AGENT_INSTRUCTIONS = """\
You are a customer service agent. Help the user as the policy below says.
Each turn, do one of two things: write a message to the user, or call tools. Never both in the same turn.
Always follow the policy, and make every tool call valid JSON."""

_USER_GUIDELINES = f"""\
# How to play the customer
You are a customer who has contacted a customer service agent. Act like a real customer would, and keep to the \
scenario you are given.

## What you always do
- Write one message at a time and keep the conversation natural.
- Do what the scenario says.
- Never invent information: what the scenario does not give you, you do not know.
- Say things in your own words rather than reciting the scenario.
- Give information a piece at a time, when the agent asks for it.

## How the conversation ends
- Keep the conversation going until your task is done.
- When the scenario's goal is met, write {STOP} to end the conversation.
- When you are transferred to another agent, write {TRANSFER}.
- When the scenario does not give you enough to go on, write {OUT_OF_SCOPE} to end the conversation.

Be a realistic customer, keep to your scenario and stay in character."""


def agent_system_prompt(
    environment: Environment, mode: Mode, scenario: Scenario | None = None, rules: EpisodeRules | None = None
) -> str:
    """The agent's system prompt under the ``tau2`` rules: its instructions, then the domain policy."""
    policy = environment.introduction.strip() or environment.summary.strip() or environment.name
    return f"<instructions>\n{_AGENT_INSTRUCTIONS}\n</instructions>\n<policy>\n{policy}\n</policy>"


def user_prompt_for(scenario_text: str) -> str:
    """The simulated user's system prompt under the ``tau2`` rules: the guidelines, then the task's scenario."""
    return f"{_USER_GUIDELINES}\n\n<scenario>\n{scenario_text.strip()}\n</scenario>"


def user_system_prompt(scenario: Scenario, rules: EpisodeRules) -> str:
    """The simulated user's system prompt of a scenario: its task is upstream's user scenario."""
    return user_prompt_for(scenario.task)
