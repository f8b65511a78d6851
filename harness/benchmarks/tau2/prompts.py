"""The agent's and the simulated user's system prompts under the ``tau2`` rules: upstream's own texts, read from
the release when the library was imported (:mod:`harness.benchmarks.tau2.upstream_prompts`) and stored in its
records. A library imported before they were stored is refused before the run starts (:func:`prompts_missing`)."""

from __future__ import annotations

from pydantic import ValidationError

from harness.benchmarks.tau2.upstream_prompts import REIMPORT, stored_agent_prompt, stored_user_prompt
from harness.errors import BadInput
from harness.rules.profiles import EpisodeRules
from harness.schema import Environment, Mode, Scenario


def agent_system_prompt(
    environment: Environment, mode: Mode, scenario: Scenario | None = None, rules: EpisodeRules | None = None
) -> str:
    """The agent's system prompt under the ``tau2`` rules: upstream's, with the domain policy, as imported."""
    prompt = stored_agent_prompt(environment)
    if prompt is None:
        raise BadInput(f"{environment.id} holds no τ²-bench agent prompt: {REIMPORT}")
    return prompt.system_prompt


def user_system_prompt(scenario: Scenario, rules: EpisodeRules) -> str:
    """The simulated user's system prompt under the ``tau2`` rules: upstream's, with the task's scenario."""
    prompt = stored_user_prompt(scenario)
    if prompt is None:
        raise BadInput(f"{scenario.id} holds no τ²-bench user prompt: {REIMPORT}")
    return prompt.system_prompt


def prompts_missing(environment: Environment, scenario: Scenario) -> str | None:
    """Why a record of an older import cannot give the ``tau2`` prompts (one line), else None."""
    try:
        if stored_agent_prompt(environment) is None:
            return f"{environment.id} holds no τ²-bench agent prompt: {REIMPORT}"
        if stored_user_prompt(scenario) is None:
            return f"it holds no τ²-bench user prompt: {REIMPORT}"
    except ValidationError as error:
        return f"its τ²-bench prompt record is malformed ({error.error_count()} error(s)): {REIMPORT}"
    return None
