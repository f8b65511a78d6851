"""The agent's system prompts under the ``envscaler`` rules.

The instructions of upstream EnvScaler's agent prompts (the completion phrase, one call per step, query before
changing), in our own words; the environment's introduction and rules follow them, as upstream's do. The simulated
user gets the project's prompt.
"""

from __future__ import annotations

from harness.rules.profiles import EpisodeRules
from harness.schema import Environment, Mode, Scenario

COMPLETION_PHRASE = "Task Completed"

_AGENT_NONCONV = f"""\
You are an assistant that carries out a task in an interactive system, one step at a time, with the tools \
you are given.
- Until the task is done, make exactly one tool call per step, with every required parameter filled in with \
a valid value. Never call several tools in the same step.
- Once you judge the task complete, reply with only '{COMPLETION_PHRASE}': no other text and no \
tool call. That reply ends the session.
- Look up what you need with the query tools first, then make the changes with the modifying tools, and let \
each tool result guide your next step."""

_AGENT_CONV = """\
You are an assistant that serves a user in an interactive system, working step by step with the tools you \
are given and talking with the user when needed, until the user ends the conversation.
Each step, you receive either a message from the user or the result of your last tool call.
- When you need information that no tool can give you, ask the user for exactly what is missing.
- When you have what you need, make exactly one tool call with complete, valid parameters. Never call \
several tools in one step, and never call a tool in the same step as you write to the user.
- Look up what you need with the query tools first, then make the changes with the modifying tools, and let \
each tool result guide your next step.
- When you believe the task is done, tell the user the outcome and ask whether they need anything else."""


def agent_system_prompt(
    environment: Environment, mode: Mode, scenario: Scenario | None = None, rules: EpisodeRules | None = None
) -> str:
    """The agent's system prompt under the ``envscaler`` rules: the instructions, then the environment."""
    instructions = _AGENT_CONV if mode == "conv" else _AGENT_NONCONV
    introduction = environment.introduction.strip() or environment.summary.strip() or environment.name
    rules_text = "".join(f"- {rule}\n" for rule in environment.rules)
    return (
        f"{instructions}\n\nThe environment you work in:\n# About the environment\n\n## Introduction\n"
        f"{introduction}\n\n## Rules and constraints\n{rules_text}"
    )
