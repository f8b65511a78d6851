"""System prompts of the episode loop, versioned: the project's own, and the choice between them and a rules
profile's (a benchmark's prompts belong to its profile: ``EpisodeRules.prompts``).

A trajectory records the prompt version its agent ran with (``AgentSettings.system_prompt_version``), so a
prompt is never edited in place once results exist: a change is a new version in :data:`PROMPT_SETS`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from harness.rules.profiles import EpisodeRules
from harness.rules.protocols import OUT_OF_SCOPE, STOP, TRANSFER
from harness.schema import Environment, Mode, Scenario, UserProfile

DEFAULT_PROMPT_VERSION = "1"


@dataclass(frozen=True)
class PromptSet:
    agent_nonconv: str
    agent_conv: str
    user: str
    user_greeting: str
    prompted_tools: str
    prompted_parse_feedback: str


_AGENT_NONCONV_V1 = """\
{introduction}
{rules}
You work on the system only through the tools you are given. Carry out the user's request completely: \
look up what you need, make the changes the request asks for and the rules allow, and make no change \
nobody asked for. Follow the rules even when the request asks otherwise. You cannot ask the user \
questions. When the request is done, or cannot be done under the rules, reply with a short final message \
and no tool call; that message ends the session."""

_AGENT_CONV_V1 = """\
{introduction}
{rules}
You are talking with a user and work on the system only through the tools you are given. The user does \
not see your tool calls or their results, only your text replies. Ask the user for any information you \
need and cannot look up, one question at a time. Make the changes the user asks for and the rules allow, \
and make no change nobody asked for. Follow the rules even when the user asks otherwise. Before a change \
that cannot be undone, tell the user what you are about to do. Reply in plain text, without a tool call, \
when you need something from the user or when you are done."""

_USER_V1 = """\
You are playing a user who talks with a customer-service agent in a chat. You are the user, not the agent.

Who you are: {persona}

What you want: {goal}

Facts you know and may share when they are relevant:
{known_info}

Facts you must not volunteer; share one only when the agent asks for it specifically:
{withheld_info}
{instructions}
How to behave:
- Write one short message at a time, in the first person, as a person typing in a chat would.
- Do not state your whole goal at once; let the conversation bring it out.
- Never invent facts that are not given above. If you are asked something you do not know, say so.
- Never act as the agent and never describe tool calls or system internals.
- When your goal has been accomplished, end your message with {stop}.
- If your goal clearly cannot be accomplished, end your message with {stop}.
- If the agent transfers you to a human agent, reply with {transfer}.
- If the agent says your request is outside what it can handle, reply with {out_of_scope}."""

_USER_GREETING_V1 = "Hi! How can I help you today?"

_PROMPTED_TOOLS_V1 = """\
# Tools

You may call the functions below. Their signatures, as JSON schemas:
<tools>
{tools}
</tools>

To call a function, write a block of this exact form, with valid JSON inside:
<tool_call>
{{"name": "<function name>", "arguments": {{<arguments as a JSON object>}}}}
</tool_call>
You may write several blocks in one message; they run in order. Results come back in <tool_response> \
blocks. When you do not need a function, reply in plain text with no <tool_call> block."""

_PROMPTED_PARSE_FEEDBACK_V1 = """\
Error: your last message could not be read as tool calls ({error}). Write each call as \
<tool_call>{{"name": "<function name>", "arguments": {{...}}}}</tool_call> with valid JSON, \
or reply in plain text with no <tool_call> block."""


PROMPT_SETS: dict[str, PromptSet] = {
    "1": PromptSet(
        agent_nonconv=_AGENT_NONCONV_V1,
        agent_conv=_AGENT_CONV_V1,
        user=_USER_V1,
        user_greeting=_USER_GREETING_V1,
        prompted_tools=_PROMPTED_TOOLS_V1,
        prompted_parse_feedback=_PROMPTED_PARSE_FEEDBACK_V1,
    ),
}


def prompt_set(version: str = DEFAULT_PROMPT_VERSION) -> PromptSet:
    try:
        return PROMPT_SETS[version]
    except KeyError:
        known = ", ".join(sorted(PROMPT_SETS))
        raise ValueError(f"unknown prompt version {version!r} (known: {known})") from None


def _bullets(items: list[str], empty: str = "(none)") -> str:
    return "\n".join(f"- {item}" for item in items) if items else empty


def agent_system_prompt(environment: Environment, mode: Mode, version: str = DEFAULT_PROMPT_VERSION) -> str:
    """The agent's system prompt: the environment's introduction and rules, then how to work."""
    prompts = prompt_set(version)
    template = prompts.agent_conv if mode == "conv" else prompts.agent_nonconv
    introduction = environment.introduction.strip() or environment.summary.strip() or environment.name
    rules = f"\nRules:\n{_bullets(environment.rules)}\n" if environment.rules else ""
    return template.format(introduction=introduction, rules=rules)


def default_user_profile(task: str) -> UserProfile:
    """The profile used in conversational mode for a scenario that has none: the task is the goal."""
    return UserProfile(persona="A customer of this service.", goal=task)


def user_system_prompt(profile: UserProfile, version: str = DEFAULT_PROMPT_VERSION) -> str:
    prompts = prompt_set(version)
    instructions = f"\nMore about how you act: {profile.instructions.strip()}\n" if profile.instructions else ""
    return prompts.user.format(
        persona=profile.persona.strip(),
        goal=profile.goal.strip(),
        known_info=_bullets(profile.known_info),
        withheld_info=_bullets(profile.withheld_info),
        instructions=instructions,
        stop=STOP,
        transfer=TRANSFER,
        out_of_scope=OUT_OF_SCOPE,
    )


def user_greeting(version: str = DEFAULT_PROMPT_VERSION) -> str:
    """What the simulated user is answering when it opens the conversation."""
    return prompt_set(version).user_greeting


def prompted_tools_prompt(tools: list[dict[str, Any]], version: str = DEFAULT_PROMPT_VERSION) -> str:
    """Tool descriptions and the ``<tool_call>`` format, for models without native tool calling."""
    lines = [json.dumps(tool.get("function", tool), ensure_ascii=False) for tool in tools]
    return prompt_set(version).prompted_tools.format(tools="\n".join(lines))


def prompted_parse_feedback(error: str, version: str = DEFAULT_PROMPT_VERSION) -> str:
    return prompt_set(version).prompted_parse_feedback.format(error=error)


# ---------------------------------------------------------------------------------- the profile's prompts


def rules_agent_system_prompt(
    environment: Environment,
    mode: Mode,
    rules: EpisodeRules,
    version: str = DEFAULT_PROMPT_VERSION,
    scenario: Scenario | None = None,
) -> str:
    """The agent's system prompt under ``rules``: the profile's own (``EpisodeRules.prompts``), else the project's."""
    if rules.prompts.agent is not None:
        return rules.prompts.agent(environment, mode, scenario, rules)
    return agent_system_prompt(environment, mode, version)


def rules_user_system_prompt(scenario: Scenario, rules: EpisodeRules, version: str = DEFAULT_PROMPT_VERSION) -> str:
    """The simulated user's system prompt under ``rules``: the profile's own, else the project's, built from the
    scenario's user profile (the task as its goal when it has none)."""
    if rules.prompts.user is not None:
        return rules.prompts.user(scenario, rules)
    return user_system_prompt(scenario.user_profile or default_user_profile(scenario.task), version)


def conversation_opening(
    rules: EpisodeRules, version: str = DEFAULT_PROMPT_VERSION, scenario: Scenario | None = None
) -> tuple[str | None, str]:
    """How a conversation opens under ``rules``: the agent's fixed greeting when the rules have one (recorded as
    its first message, and what the simulated user answers), else the line the user answers without the agent
    seeing it (the rules' own for the scenario, the rules' fixed one, or the project's greeting)."""
    if rules.agent_greeting is not None:
        return rules.agent_greeting, rules.agent_greeting
    if rules.prompts.opening is not None and scenario is not None:
        return None, rules.prompts.opening(scenario, rules)
    if rules.user_opening is not None:
        return None, rules.user_opening
    return None, user_greeting(version)
