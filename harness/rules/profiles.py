"""Episode rules: a named profile of how an episode treats the agent's turns and how its reward is computed.

:class:`EpisodeRules` holds what differs between profiles as typed fields, and the prompts a profile brings as
its :class:`RulesPrompts` component. ``harness`` (:data:`HARNESS_RULES`) is this project's evaluation behaviour
(every tool call of a turn runs, arguments are checked against the tool's schema, a raising tool is an error
observation the agent can recover from, an episode cut off at the step limit is still scored). Every other profile
reproduces a public benchmark's runtime and belongs to that benchmark's package, found through the registry
(:func:`harness.registry.rules_profile`); ``docs/episode-rules.md`` lists every difference.

A trajectory records the profile it ran under (in its run's manifest and in its episode id when it is not the
default), so two profiles' results are never mixed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.rules.protocols import AgentPolicyError, UserTurn
from harness.schema import Environment, Mode, Scenario, TerminationReason

RulesName = str
"""A profile's name, as ``--rules`` takes it: ``harness`` or one a registered benchmark declares."""
DEFAULT_RULES: RulesName = "harness"
EnvironmentFailureOutcome = Literal["scored_failed", "not_scored"]
StepUnit = Literal["agent_turn", "message"]

AgentPrompt = Callable[[Environment, Mode, "Scenario | None", "EpisodeRules"], str]
"""The agent's system prompt of a profile: from the environment, the mode, the scenario (when there is one) and
the profile itself."""
UserPrompt = Callable[[Scenario, "EpisodeRules"], str]
"""The simulated user's system prompt of a profile, from the scenario it plays and the profile itself."""
UserOpening = Callable[[Scenario, "EpisodeRules"], str]
"""The line the simulated user answers first, per scenario (a benchmark whose opening depends on the task's
language)."""
PromptsMissing = Callable[[Environment, Scenario], "str | None"]
"""Why a record cannot give a profile's prompts (one line: an import made before they were stored), else None."""


@dataclass(frozen=True)
class RulesPrompts:
    """The system prompts a profile brings (a benchmark's own); each one left out is the project's
    (:mod:`harness.rules.prompts`): the agent's from the environment, the user's from the scenario's user profile."""

    agent: AgentPrompt | None = None
    user: UserPrompt | None = None
    opening: UserOpening | None = None
    """The user's opening line per scenario; None: ``EpisodeRules.user_opening`` (or the greeting)."""
    missing: PromptsMissing | None = None
    """Asked of every selected scenario before a run starts: a problem refuses the run in one line."""


class RoleSampling(BaseModel):
    """The sampling parameters a benchmark's own runner sends one role's model by default. A parameter left None is
    not sent at all (the endpoint's default applies), as a runner that never sets it sends nothing."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    temperature: float | None = Field(default=None, description="Sent temperature; None: no temperature is sent.")
    top_p: float | None = Field(default=None, description="Sent top_p; None: not sent.")
    max_tokens: int | None = Field(default=None, description="Sent completion token cap; None: not sent.")
    seed: bool = Field(
        default=False, description="The run's --seed is sent as the request's seed; False: no seed is sent."
    )
    tool_choice: str | None = Field(
        default=None, description="Sent with the tools, in requests that have tools; None: not sent."
    )


class Sampling(BaseModel):
    """What a benchmark's own runner sends each role's model by default (``docs/episode-rules.md``). The run's flags
    override it: ``--temperature`` and ``--max-tokens`` the agent's, ``--user-temperature`` the user's."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    agent: RoleSampling
    user: RoleSampling


class EpisodeRules(BaseModel):
    """What differs between profiles. The episode loop reads these fields and never the profile's name."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: RulesName = Field(description="What --rules calls the profile.")
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
    tool_result_format: Literal["json", "python", "text"] = Field(
        description="How a tool's result is written in the tool message: JSON, Python's str() of the value, or "
        "'text': a text result as it is (anything else as JSON) and an error as 'Error: <message>'."
    )
    errors_as_user_messages: bool = Field(
        description="Invalid actions and parse errors are answered with a user message (upstream's wording), "
        "not a tool message."
    )
    stop_tokens: tuple[str, ...] | None = Field(
        description="User stop tokens that end a conversation; None: all of harness.rules.protocols.STOP_TOKENS."
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
    conversation_only: bool = Field(
        default=False, description="Episodes run only as conversations with a simulated user (--mode conv)."
    )
    agent_greeting: str | None = Field(
        default=None,
        description="A conversation opens with this fixed line of the agent, which the user answers; None: the "
        "simulated user opens.",
    )
    prompts: RulesPrompts = Field(
        default_factory=RulesPrompts,
        description="The system prompts the agent and the simulated user get: the profile's own (a benchmark's), "
        "or for each one it leaves out the project's versioned one.",
    )
    step_unit: StepUnit = Field(
        default="agent_turn",
        description="What the step limit counts: agent turns, or every message (each "
        "agent message, each batch of tool results, each user message; checked whenever the next message is not "
        "for the environment, and a limit reached by the user's last message replaces its stop).",
    )
    default_max_steps: int | None = Field(
        default=None,
        ge=1,
        description="The step limit when none is set; None: the mode's (30 nonconv, 40 conv agent turns).",
    )
    max_tool_errors: int | None = Field(
        default=None,
        ge=1,
        description="The episode ends as too_many_errors once this many tool calls have failed in all (checked "
        "after each batch of tool results); None: no limit.",
    )
    tool_error_prefix: str | None = Field(
        default=None,
        description="A tool result whose text starts with this counts as a failed call (an environment that "
        "answers an exception with 'Error: <message>'); error observations always count.",
    )
    unreadable_turn_ends_episode: bool = Field(
        default=False,
        description="A turn that cannot be read (arguments that are not a JSON object, neither text nor a tool "
        "call when that is a parse error, unreadable output) ends the episode as agent_error.",
    )
    scored_endings: tuple[TerminationReason, ...] | None = Field(
        default=None,
        description="The endings whose final state is scored; any other ending gets reward 0 without running the "
        "checks. None: every ending but an environment or infrastructure failure.",
    )
    required_source: str | None = Field(
        default=None,
        description="The rules run only environments imported from this source (their provenance.source); None: "
        "any environment.",
    )
    user_tool_calls: bool = Field(
        default=False,
        description="Dual control: a simulated user that can call tools gets the environment's user tools, and its "
        "calls run on the session on the user's side, unseen by the agent (harness.episode.dual_control).",
    )
    all_or_nothing_reward: bool = Field(
        default=False,
        description="The reward is 1 when every check holds and 0 otherwise (a product of factors), instead of "
        "the fraction of checks passed.",
    )
    drop_unrun_calls: bool = Field(
        default=False,
        description="With first_call_only, the recorded assistant message keeps only the call that runs (an agent "
        "that cuts its message to its first call), so no call stays without a result.",
    )
    ending_tools: tuple[str, ...] = Field(
        default=(),
        description="A call to one of these tools runs and then ends the episode as agent_done (a benchmark's "
        "terminate tools).",
    )
    user_opening: str | None = Field(
        default=None,
        description="The line the simulated user answers when it opens the conversation, which the agent never "
        "sees; None: the agent greeting, else the project's greeting.",
    )
    user_own_role: Literal["assistant", "system"] = Field(
        default="assistant",
        description="The role the simulated user's own earlier messages have in what it is sent (a benchmark's user "
        "sees its own lines as system messages).",
    )
    opening_stop_ends: bool = Field(
        default=True,
        description="A stop token in the simulated user's opening message ends the conversation; False: the agent "
        "answers the opening whatever it holds, and only a later message of the user can stop (a benchmark whose "
        "reset never ends the episode).",
    )
    user_reply_marker: str | None = Field(
        default=None,
        description="The simulated user writes a thought, then its reply after this marker: only the reply goes "
        "to the agent (a message with a stop token is the bare stop; one without the marker, or with it twice, "
        "fails the user). None: the whole message goes to the agent.",
    )
    reward_check: str | None = Field(
        default=None,
        description="The reward is 1 when the check with this id holds and 0 otherwise (an end-to-end check); "
        "the other checks are reported and do not count. None: every check counts.",
    )
    process_check: str | None = Field(
        default=None,
        description="The check with this id returns a fraction (True: 1.0), recorded as the reward's "
        "process_accuracy beside the scalar; 1.0 when the reward check holds.",
    )
    agent_stop_phrases: tuple[str, ...] = Field(
        default=(),
        description="An agent text reply containing one of these ends the episode (agent_done) in a conversation "
        "too; the first is the phrase the agent's system prompt asks for.",
    )
    agent_kinds: tuple[str, ...] | None = Field(
        default=None,
        description="The model-backed agent kinds (--agent) these rules run, and the only rules that kind runs "
        "under (the agent writes calls in the format the rules' system prompt asks for); agents that call no "
        "model run too. None: any agent kind that no profile claims.",
    )
    sampling: Sampling | None = Field(
        default=None,
        description="The sampling parameters the benchmark's runner sends each role by default; None: the project's "
        "(temperature 0.0 for both roles unless --temperature, the run's --seed sent, no top_p).",
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

# Upstream's wording of the messages its runtime sends back (short status strings, not prose).
INVALID_ACTION_TEXT = "Error: Invalid action"
PARSE_ERROR_TEXT = "Error: Failed to parse response to action"


class UnknownRules(ValueError):
    """A rules name that is not a profile."""


def user_reply(reply: UserTurn, rules: EpisodeRules) -> str:
    """What the agent receives of the simulated user's message: all of it, or under rules with a reply marker
    the bare stop token, else the text after the marker (upstream ReAct user's ``parse_response``)."""
    marker = rules.user_reply_marker
    if marker is None:
        return reply.text
    for token in rules.stop_tokens or ():
        if token in reply.text:
            return token
    parts = reply.text.split(marker)
    if len(parts) != 2:
        raise AgentPolicyError(f"the simulated user's message does not hold {marker!r} once: {reply.text[:120]!r}")
    return parts[1].strip()
