"""Episode rules: a named profile of how an episode treats the agent's turns and how its reward is computed.

``harness`` is this project's evaluation behaviour (every tool call of a turn runs, arguments are checked
against the tool's schema, a raising tool is an error observation the agent can recover from, an episode cut
off at the step limit is still scored). ``envscaler`` reproduces upstream EnvScaler's runtime rule by rule, so
that a trainer or a leaderboard gets the reward of the paper. ``docs/episode-rules.md`` lists every difference.

A trajectory records the profile it ran under (in its run's manifest and in its episode id when it is not the
default), so two profiles' results are never mixed.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

RulesName = Literal["harness", "envscaler"]
DEFAULT_RULES: RulesName = "harness"
RULES_NAMES: tuple[RulesName, ...] = ("harness", "envscaler")
EnvironmentFailureOutcome = Literal["scored_failed", "not_scored"]


class EpisodeRules(BaseModel):
    """What differs between profiles. The episode loop reads these fields and never the profile's name."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: RulesName
    first_call_only: bool = Field(description="Only the first tool call of an assistant turn is executed.")
    pass_arguments_through: bool = Field(
        description="Arguments reach the method unchecked by the tool's schema (wrong types included); a call "
        "Python itself refuses (unknown or missing keyword) is a raising tool."
    )
    raising_tool_ends_episode: bool = Field(description="A tool that raises ends the episode with reward 0.")
    truncation_scores: bool = Field(description="An episode cut off at the step limit is scored by its checks.")
    empty_turn_is_parse_error: bool = Field(
        description="A turn with neither text nor a tool call is a parse error and the episode goes on; "
        "otherwise it is an (empty) final reply."
    )
    parse_error_limit: bool = Field(
        description="Unreadable turns in a row end the episode (EpisodeConfig.max_consecutive_parse_errors)."
    )
    reward_decimals: int | None = Field(description="Rewards are rounded to this many decimals; None: not rounded.")
    composite_reward: bool = Field(
        description="The episode's reward is EnvFactory's composite (with reference actions); otherwise the "
        "fraction of checks passed."
    )
    tool_result_format: Literal["json", "python"] = Field(
        description="How a tool's result is written in the tool message: JSON, or Python's str() of the value."
    )
    errors_as_user_messages: bool = Field(
        description="Invalid actions and parse errors are answered with a user message (upstream's wording), "
        "not a tool message."
    )
    stop_tokens: tuple[str, ...] | None = Field(
        description="User stop tokens that end a conversation; None: all of harness.protocols.STOP_TOKENS."
    )
    reply_tool: str | None = Field(
        description="A tool-call name that counts as a text reply (its 'content' argument is the text)."
    )
    environment_failure: EnvironmentFailureOutcome = Field(
        description="What an episode whose environment failed (it could not be loaded, or its process died, "
        "stopped or exited on its own; termination environment_error) counts as: 'scored_failed' is a failed "
        "episode (reward 0, success false, in every average); 'not_scored' has no reward (counted, kept out of the "
        "reward averages). Neither is re-run."
    )


HARNESS_RULES = EpisodeRules(
    name="harness",
    first_call_only=False,
    pass_arguments_through=False,
    raising_tool_ends_episode=False,
    truncation_scores=True,
    empty_turn_is_parse_error=False,
    parse_error_limit=True,
    reward_decimals=None,
    composite_reward=True,
    tool_result_format="json",
    errors_as_user_messages=False,
    stop_tokens=None,
    reply_tool=None,
    environment_failure="scored_failed",
)

ENVSCALER_RULES = EpisodeRules(
    name="envscaler",
    first_call_only=True,
    pass_arguments_through=True,
    raising_tool_ends_episode=True,
    truncation_scores=False,
    empty_turn_is_parse_error=True,
    parse_error_limit=False,
    reward_decimals=4,
    composite_reward=False,
    tool_result_format="python",
    errors_as_user_messages=True,
    stop_tokens=("###STOP###",),
    reply_tool="chat_with_user",
    # Upstream builds the class in `reset` and calls tools in its own process: a class that does not build
    # raises out of `reset`, and a tool that ends the process ends the whole run, so the episode gets no reward.
    environment_failure="not_scored",
)

PROFILES: dict[str, EpisodeRules] = {"harness": HARNESS_RULES, "envscaler": ENVSCALER_RULES}

# Upstream's wording of the messages its runtime sends back (short status strings, not prose).
INVALID_ACTION_TEXT = "Error: Invalid action"
PARSE_ERROR_TEXT = "Error: Failed to parse response to action"


class UnknownRules(ValueError):
    """A rules name that is not a profile."""


def rules_profile(name: str | EpisodeRules | None = None) -> EpisodeRules:
    """The profile called ``name`` (None: the default, ``harness``)."""
    if isinstance(name, EpisodeRules):
        return name
    profile = PROFILES.get(name or DEFAULT_RULES)
    if profile is None:
        raise UnknownRules(f"unknown episode rules {name!r}; choose one of: {', '.join(RULES_NAMES)}")
    return profile


def round_reward(value: float, rules: EpisodeRules) -> float:
    return round(value, rules.reward_decimals) if rules.reward_decimals is not None else value
