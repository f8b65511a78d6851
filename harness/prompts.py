"""System prompts of the episode loop, versioned.

A trajectory records the prompt version its agent ran with (``AgentSettings.system_prompt_version``), so a
prompt is never edited in place once results exist: a change is a new version in :data:`PROMPT_SETS`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from harness.protocols import OUT_OF_SCOPE, STOP, TRANSFER
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


# ------------------------------------------------------------------------------ the ``envscaler`` episode rules

# The instructions of upstream EnvScaler's agent prompts (the completion phrase, one call per step, query
# before changing), in our own words; the environment's introduction and rules follow them, as upstream.
ENVSCALER_COMPLETION_PHRASE = "Task Completed"

_ENVSCALER_AGENT_NONCONV = f"""\
You are an assistant that carries out a task in an interactive system, one step at a time, with the tools \
you are given.
- Until the task is done, make exactly one tool call per step, with every required parameter filled in with \
a valid value. Never call several tools in the same step.
- Once you judge the task complete, reply with only '{ENVSCALER_COMPLETION_PHRASE}': no other text and no \
tool call. That reply ends the session.
- Look up what you need with the query tools first, then make the changes with the modifying tools, and let \
each tool result guide your next step."""

_ENVSCALER_AGENT_CONV = """\
You are an assistant that serves a user in an interactive system, working step by step with the tools you \
are given and talking with the user when needed, until the user ends the conversation.
Each step, you receive either a message from the user or the result of your last tool call.
- When you need information that no tool can give you, ask the user for exactly what is missing.
- When you have what you need, make exactly one tool call with complete, valid parameters. Never call \
several tools in one step, and never call a tool in the same step as you write to the user.
- Look up what you need with the query tools first, then make the changes with the modifying tools, and let \
each tool result guide your next step.
- When you believe the task is done, tell the user the outcome and ask whether they need anything else."""


def envscaler_agent_system_prompt(environment: Environment, mode: Mode) -> str:
    """The agent's system prompt under the ``envscaler`` rules: the instructions, then the environment."""
    instructions = _ENVSCALER_AGENT_CONV if mode == "conv" else _ENVSCALER_AGENT_NONCONV
    introduction = environment.introduction.strip() or environment.summary.strip() or environment.name
    rules = "".join(f"- {rule}\n" for rule in environment.rules)
    return (
        f"{instructions}\n\nThe environment you work in:\n# About the environment\n\n## Introduction\n"
        f"{introduction}\n\n## Rules and constraints\n{rules}"
    )


# --------------------------------------------------------------------------------- the ``tau2`` episode rules

# τ²-bench's prompts (tau2/agent/llm_agent.py, tau2/user/user_simulator.py and its simulation guidelines) in our
# own words and in upstream's layout: the agent gets its instructions and the domain policy in tagged sections,
# the user its guidelines and the task's scenario. The stop tokens are upstream's.
_TAU2_AGENT_INSTRUCTIONS = """\
You are a customer service agent. Help the user as the policy below says.
Each turn, do one of two things: write a message to the user, or call tools. Never both in the same turn.
Always follow the policy, and make every tool call valid JSON."""

_TAU2_USER_GUIDELINES = f"""\
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


def tau2_agent_system_prompt(environment: Environment) -> str:
    """The agent's system prompt under the ``tau2`` rules: its instructions, then the domain policy."""
    policy = environment.introduction.strip() or environment.summary.strip() or environment.name
    return f"<instructions>\n{_TAU2_AGENT_INSTRUCTIONS}\n</instructions>\n<policy>\n{policy}\n</policy>"


def tau2_user_system_prompt(scenario_text: str) -> str:
    """The simulated user's system prompt under the ``tau2`` rules: the guidelines, then the task's scenario."""
    return f"{_TAU2_USER_GUIDELINES}\n\n<scenario>\n{scenario_text.strip()}\n</scenario>"


# --------------------------------------------------------------------------------- the ``taubench`` episode rules

# τ-bench's user simulator (tau_bench/envs/user.py: LLMUserSimulationEnv, and ReactUserSimulationEnv for
# EnvScaler's preset) in our own words: the instruction, then the rules of play; the ReAct variant asks for a
# thought and then the reply after "User Response:". The stop token is upstream's.
_TAUBENCH_USER_RULES = f"""\
Rules:
- Write a single line each time: that line is your next message as the user.
- Reveal the instruction bit by bit, only what the current step needs.
- Never make up information the instruction does not give: if the agent asks for something you were not given \
(an order id, say), answer that you do not remember it or do not have it.
- Once the goal of the instruction is reached, write {STOP} on its own, with nothing else, to end the \
conversation.
- Do not copy the instruction word for word: put it in your own words.
- Keep the conversation natural and keep to the personality the instruction describes."""

_TAUBENCH_REACT_USER_RULES = f"""\
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


def taubench_user_system_prompt(instruction: str, react: bool = False) -> str:
    """The simulated user's system prompt under the ``taubench`` rules: its role, the task's instruction, the rules
    of play (the ReAct format with ``react``)."""
    rules = _TAUBENCH_REACT_USER_RULES if react else _TAUBENCH_USER_RULES
    return f"You are a user talking with an agent.\n\nInstruction: {instruction}\n\n{rules}"


# ------------------------------------------------------------------------------ the ``acebench`` episode rules

# ACEBench's agent and user prompts (model_inference/multi_turn/APIModel_agent.py, APIModel_user.py,
# model_inference/multi_step/APIModel_agent.py) in our own words, for native function calling: the agent calls the
# APIs when it has what they need and asks otherwise, and says the finishing phrase when done; the domain prompt
# (upstream's BASE_PROMPT/TRAVEL_PROMPT, read from the checkout at import) is the environment's introduction.
_ACEBENCH_AGENT = """You are an AI system that carries out requests by calling the APIs you are given as tools.
- When what you know is enough for a call, make the call. Give every parameter the request mentions, and leave \
out optional ones it does not mention; where a parameter's format is not specified, use the user's own words.
- When something a call needs is missing, ask the user for it instead of guessing or answering for them.
- Read each call's result and decide the next step from it; calls that depend on each other go one at a time.
- When the task is done, say "{finish}"."""

_ACEBENCH_USER = """You play a user who talks to an agent. Your instruction:
{instruction}

How to play:
- Write one line per message, as a user would.
- Give the agent only what the current step needs, and all of it (for a reminder: its title, description and \
time); do not reveal the whole instruction at once.
- Never invent what the instruction does not say; when asked for something you do not have, say so.
- When the agent asks for a confirmation, answer as the instruction says.
- Say things in your own words, and keep the personality the instruction gives you.
- When asked whether you need anything else, check that every task of the instruction is done; if not, ask for \
the next one. Never offer the agent help, and answer its questions only as the instruction allows.
- The names in the instruction are full names. When the agent asks which message to delete, follow the \
instruction.{travel}
- When every task is done, write a line that says only '{stop}'."""

_ACEBENCH_TRAVEL = """
- When the instruction is to book a round trip, say at the very start that you want to book a round-trip flight."""


def acebench_agent_system_prompt(environment: Environment, finish_phrase: str) -> str:
    """The agent's system prompt under the ``acebench`` rules: the instructions, then the domain prompt."""
    instructions = _ACEBENCH_AGENT.format(finish=finish_phrase)
    domain = environment.introduction.strip()
    return f"{instructions}\n\n{domain}" if domain else instructions


def acebench_text_system_prompt(environment: Environment, scenario: Scenario | None) -> str:
    """The agent's system prompt in ACEBench's text setting: upstream's instructions for the scenario's category
    and language, read from the checkout at import, then the domain prompt, as upstream's agent sends them."""
    prompts = scenario.provenance.details.get("text_prompts") if scenario is not None else None
    system = prompts.get("system") if isinstance(prompts, dict) else None
    if not isinstance(system, str):
        name = scenario.id if scenario is not None else "this scenario"
        raise ValueError(
            f"{name} has no ACEBench text prompts: import it again with `harness import acebench` of this version"
        )
    return system + environment.introduction


def acebench_user_system_prompt(instruction: str, travel: bool, stop: str) -> str:
    """The simulated user's system prompt under the ``acebench`` rules (upstream picks the travel variant when
    the task involves the Travel class and not BaseApi)."""
    return _ACEBENCH_USER.format(instruction=instruction.strip(), travel=_ACEBENCH_TRAVEL if travel else "", stop=stop)


def rules_user_system_prompt(
    system_prompts: str, scenario_text: str, *, tags: tuple[str, ...] | list[str] = (), stop: str = ""
) -> str | None:
    """The simulated user's system prompt of the rules' ``system_prompts`` when they have their own (τ², τ-bench,
    ACEBench, which also reads the scenario's tags and the rules' stop token); None: the project's, built from the
    scenario's user profile."""
    if system_prompts == "tau2":
        return tau2_user_system_prompt(scenario_text)
    if system_prompts in ("taubench", "taubench-react"):
        return taubench_user_system_prompt(scenario_text, react=system_prompts == "taubench-react")
    if system_prompts == "acebench":
        return acebench_user_system_prompt(scenario_text, "acebench-travel" in tags, stop)
    return None


def rules_agent_system_prompt(
    environment: Environment,
    mode: Mode,
    system_prompts: str,
    version: str = DEFAULT_PROMPT_VERSION,
    finish_phrase: str = "finish conversation",
    scenario: Scenario | None = None,
) -> str:
    """The agent's system prompt of the rules' ``system_prompts`` (``EpisodeRules.system_prompts``); ACEBench's
    text setting reads it from the ``scenario``."""
    if system_prompts == "acebench-text":
        return acebench_text_system_prompt(environment, scenario)
    if system_prompts == "acebench":
        return acebench_agent_system_prompt(environment, finish_phrase)
    if system_prompts == "envscaler":
        return envscaler_agent_system_prompt(environment, mode)
    if system_prompts == "tau2":
        return tau2_agent_system_prompt(environment)
    if system_prompts in ("taubench", "taubench-react"):
        # τ-bench's tool-calling agent: the domain's wiki is the whole system prompt.
        return environment.introduction
    return agent_system_prompt(environment, mode, version)
