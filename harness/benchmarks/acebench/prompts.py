"""The agent's and the simulated user's system prompts under the ``acebench`` rules, and the agent's in ACEBench's
text setting (``acebench-text``, read from the scenario)."""

from __future__ import annotations

from harness.rules.profiles import EpisodeRules
from harness.schema import Environment, Mode, Scenario

from .user_prompt import stored_user_prompt

FINISH = "finish conversation"
"""Upstream's finishing phrase: the user says it when every task is done, the agent when the task is."""
TRAVEL_TAG = "acebench-travel"
"""The tag of a task that involves the Travel class and not BaseApi (upstream's travel variant of the user)."""

# The agent's instructions for native function calling, in our own words: upstream has no function-calling agent
# (its agent writes calls as text, ACEBench's own setting ``acebench-text`` sends its prompt byte for byte), so
# these say what upstream's text instructions say (model_inference/multi_turn/APIModel_agent.py,
# model_inference/multi_step/APIModel_agent.py) without the text call format: call the APIs when the information is
# complete and ask otherwise, and say the finishing phrase when done. The domain prompt (upstream's
# BASE_PROMPT/TRAVEL_PROMPT, read from the checkout at import) is the environment's introduction.
# ``_USER`` is EnvScaler's preset's user (``acebench-envscaler``); ``acebench`` and ``acebench-text`` send
# upstream's own user prompt, read from the checkout at import (:mod:`harness.benchmarks.acebench.user_prompt`).
_AGENT = """You are an AI system that carries out requests by calling the APIs you are given as tools.
- When what you know is enough for a call, make the call. Give every parameter the request mentions, and leave \
out optional ones it does not mention; where a parameter's format is not specified, use the user's own words.
- When something a call needs is missing, ask the user for it instead of guessing or answering for them.
- Read each call's result and decide the next step from it; calls that depend on each other go one at a time.
- When the task is done, say "{finish}"."""

_USER = """You play a user who talks to an agent. Your instruction:
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

_TRAVEL = """
- When the instruction is to book a round trip, say at the very start that you want to book a round-trip flight."""


def agent_system_prompt(
    environment: Environment, mode: Mode, scenario: Scenario | None = None, rules: EpisodeRules | None = None
) -> str:
    """The agent's system prompt under the ``acebench`` rules: the instructions (ending with the rules' finishing
    phrase), then the domain prompt."""
    finish = next(iter(rules.agent_stop_phrases), FINISH) if rules is not None else FINISH
    instructions = _AGENT.format(finish=finish)
    domain = environment.introduction.strip()
    return f"{instructions}\n\n{domain}" if domain else instructions


def text_system_prompt(
    environment: Environment, mode: Mode, scenario: Scenario | None = None, rules: EpisodeRules | None = None
) -> str:
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


def user_prompt_for(instruction: str, travel: bool, stop: str) -> str:
    """The simulated user's system prompt of EnvScaler's preset (the travel variant when the task involves the
    Travel class and not BaseApi, as upstream picks it)."""
    return _USER.format(instruction=instruction.strip(), travel=_TRAVEL if travel else "", stop=stop)


def envscaler_user_system_prompt(scenario: Scenario, rules: EpisodeRules) -> str:
    """EnvScaler's preset's user: its instruction, the travel variant by the task's tag, the rules' stop."""
    return user_prompt_for(scenario.task, TRAVEL_TAG in scenario.tags, (rules.stop_tokens or ("",))[0])


def user_system_prompt(scenario: Scenario, rules: EpisodeRules) -> str:
    """Upstream's ``APIUSER`` prompt for the task (the variant and language it was imported with), formatted with
    the task's question as upstream formats it."""
    return stored_user_prompt(scenario.provenance.details, scenario.id).render(scenario.task)


def user_opening(scenario: Scenario, rules: EpisodeRules) -> str:
    """The line upstream's user answers first, in the task's language (``APIUSER.get_init_prompt``)."""
    return stored_user_prompt(scenario.provenance.details, scenario.id).opening
