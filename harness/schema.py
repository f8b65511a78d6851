"""The schema of record: the pydantic models every stage reads and writes.

Each top-level record carries ``schema_version``. JSON round trips are lossless: values that hold
environment state are plain JSON values (dicts, lists, strings, numbers, booleans, null).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

SCHEMA_VERSION = "1.1"
"""1.1 added ``Check.gate``; records of 1.0 still load (see :class:`Check`). ``Trajectory.failure`` and
``Observation.process_ended`` have defaults that keep a record written without them meaning what it meant."""

PREVIOUS_SCHEMA_VERSIONS = ("1.0",)

JSONValue = Any
"""A JSON value. Kept as ``Any`` so pydantic does not coerce it (``1`` stays ``1``, not ``1.0``)."""


def utc_now() -> datetime:
    return datetime.now(UTC)


class Record(BaseModel):
    """Base of every record: unknown fields are refused so typos never pass silently."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


# --------------------------------------------------------------------------------------------- environments


class FunctionSpec(Record):
    name: str
    description: str = ""
    parameters: dict[str, JSONValue] = Field(
        default_factory=lambda: {"type": "object", "properties": {}, "required": []}
    )


class ToolSpec(Record):
    """An OpenAI function-calling tool schema."""

    type: Literal["function"] = "function"
    function: FunctionSpec

    @property
    def name(self) -> str:
        return self.function.name


class StateEntity(Record):
    name: str
    attributes: list[str] = Field(default_factory=list)
    description: str = ""


class Provenance(Record):
    """Where a record came from: a hand-written library, an importer, or a synthesis run."""

    source: str = "handwritten"
    model: str | None = None
    prompt_version: str | None = None
    created_at: datetime | None = None
    upstream_id: str | None = None
    details: dict[str, JSONValue] = Field(default_factory=dict)


class Environment(Record):
    schema_version: str = SCHEMA_VERSION
    id: str
    name: str
    domain: str = ""
    summary: str = ""
    introduction: str = Field(default="", description="Agent-facing description of the system and its policy.")
    rules: list[str] = Field(default_factory=list)
    state_entities: list[StateEntity] = Field(default_factory=list)
    tools: list[ToolSpec] = Field(default_factory=list)
    class_name: str
    code: str = Field(description="Python source of the environment class.")
    provenance: Provenance = Field(default_factory=Provenance)
    call_dispatcher: str | None = Field(
        default=None,
        description="A method that receives every tool call unvalidated as (name, arguments) and returns the "
        "tool's result; None when each tool is its own method, called after its arguments are checked.",
    )
    user_tools: list[ToolSpec] = Field(
        default_factory=list,
        description="Tools of the simulated user (dual control): the user's calls run in the same "
        "session through the dispatcher with requestor 'user'; the agent never gets these tools nor sees their calls.",
    )

    @model_serializer(mode="wrap")
    def _omit_absent_user_tools(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Environments without a user's tools dump exactly as before the field existed.
        data: dict[str, Any] = handler(self)
        if not data.get("user_tools", ...):
            data.pop("user_tools", None)
        return data

    def tool(self, name: str) -> ToolSpec | None:
        for tool in self.tools:
            if tool.function.name == name:
                return tool
        return None

    @property
    def tool_names(self) -> list[str]:
        return [t.function.name for t in self.tools]


# ----------------------------------------------------------------------------------------------- scenarios


def gate_sentence(gate: str) -> str:
    """How a check's description states its gate on a page: the one place this sentence is written."""
    return f"Counted only once '{gate}' holds."


_STATED_GATE = re.compile(r"\s*Counted only once '([^']+)' holds\.?\s*$")


class Check(Record):
    """One verifiable item of a scenario's checklist.

    ``source`` defines ``def check(initial_state, final_state)``, ``def check(initial_state, final_state,
    transcript)`` (the messages after the system prompt; see :mod:`harness.transcript_checks`) or the released
    record format's ``def check_func(final_state)`` (which reads a global ``initial_state``). ``initial_state`` is the
    instance's state right after construction. Only an exact ``True`` passes.

    A guard check ("nothing else changed") has a ``gate``: the id of the check it is counted only once, so that
    doing nothing earns nothing. Its ``source`` still requires the gate itself; the field says which check that
    is, so pages can tell a failed guard whose gate failed too from a second mistake. Records of schema 1.0 stated
    the gate only at the end of the description (``gate_sentence``); such a record loads with its gate read
    from that sentence and the sentence taken out of the description.
    """

    id: str
    description: str
    source: str
    gate: str | None = Field(
        default=None, description="Id of the check this guard check is counted only once; None for other checks."
    )

    @model_validator(mode="before")
    @classmethod
    def _gate_from_a_stated_sentence(cls, data: Any) -> Any:
        description = data.get("description") if isinstance(data, dict) else None
        if not isinstance(description, str) or "Counted only once" not in description:
            return data
        stated = _STATED_GATE.search(description)
        if stated is None:
            return data
        gate = data.get("gate")
        if gate is not None and gate != stated.group(1):
            raise ValueError(f"check {data.get('id')!r}: gate {gate!r} but its description names {stated.group(1)!r}")
        return {**data, "description": description[: stated.start()], "gate": stated.group(1)}

    @property
    def statement(self) -> str:
        """What the check verifies, as a page shows it: the description and, for a guard, its gate."""
        if self.gate is None:
            return self.description
        return f"{self.description} {gate_sentence(self.gate)}" if self.description else gate_sentence(self.gate)


class UserProfile(Record):
    """What the simulated user is in conversational mode."""

    persona: str
    goal: str
    known_info: list[str] = Field(default_factory=list, description="Facts the user can give when asked.")
    withheld_info: list[str] = Field(
        default_factory=list, description="Facts the user must not volunteer until the agent asks for them."
    )
    instructions: str = ""


class ReferenceAction(Record):
    """One call of a reference solution. ``masked_arguments`` are ignored by trajectory matching."""

    name: str
    arguments: dict[str, JSONValue] = Field(default_factory=dict)
    masked_arguments: list[str] = Field(default_factory=list)


class UserReferenceAction(ReferenceAction):
    """One call of the simulated user's part of a reference solution (dual control): it comes after the first
    ``after_agent_actions`` of the scenario's ``reference_actions``."""

    after_agent_actions: int = Field(default=0, ge=0)


class ScriptedTurn(Record):
    """One user turn of a scripted conversation: what the user says, the tools that appear from this turn on,
    and the reference calls that complete it (none when the turn cannot or need not be acted on)."""

    content: str
    tools_added: list[str] = Field(default_factory=list)
    reference_actions: list[ReferenceAction] = Field(default_factory=list)


class Scenario(Record):
    """A task on an initial state with its checklist. A record of a previous schema is read as the current one
    (its checks' gates recovered, see :class:`Check`), so it carries the current ``schema_version``."""

    schema_version: str = SCHEMA_VERSION
    id: str
    environment_id: str
    initial_state: dict[str, JSONValue]
    task: str = Field(description="The whole request, as given in non-conversational mode.")
    user_profile: UserProfile | None = None
    checks: list[Check] = Field(default_factory=list)
    reference_actions: list[ReferenceAction] = Field(default_factory=list)
    reference_reply: str | None = Field(
        default=None,
        description="What a correct agent tells the user at the end (after the reference actions); lets "
        "`validate` prove that checks on the transcript can pass, and is the oracle's final message.",
    )
    gold_final_state: dict[str, JSONValue] | None = None
    difficulty: str | None = None
    tags: list[str] = Field(default_factory=list)
    provenance: Provenance = Field(default_factory=Provenance)
    turns: list[ScriptedTurn] = Field(
        default_factory=list,
        description="Scripted user turns, in order (conversational mode); such a scenario without checks is "
        "scored turn by turn against each turn's reference actions.",
    )
    max_steps_per_turn: int | None = Field(
        default=None, ge=1, description="Tool-calling agent turns allowed within one user turn; more fails it."
    )
    user_reference_actions: list[UserReferenceAction] = Field(
        default_factory=list,
        description="The simulated user's calls of the reference solution (dual control), each placed among the "
        "agent's; what the oracle's user plays.",
    )

    @model_serializer(mode="wrap")
    def _omit_absent_user_actions(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Scenarios without the user's reference calls dump exactly as before the field existed.
        data: dict[str, Any] = handler(self)
        if not data.get("user_reference_actions", ...):
            data.pop("user_reference_actions", None)
        return data

    @model_validator(mode="before")
    @classmethod
    def _read_as_the_current_schema(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("schema_version") in PREVIOUS_SCHEMA_VERSIONS:
            return {**data, "schema_version": SCHEMA_VERSION}
        return data

    @model_validator(mode="after")
    def _gates_name_other_checks(self) -> Scenario:
        ids = {check.id for check in self.checks}
        for check in self.checks:
            if check.gate is not None and (check.gate == check.id or check.gate not in ids):
                raise ValueError(f"check {check.id!r} is gated on {check.gate!r}, which is not another of its checks")
        return self


# ------------------------------------------------------------------------------------------- trajectories


class ToolCall(Record):
    """A call the agent asked for. ``arguments`` is None when the model's argument text was not JSON."""

    id: str
    name: str
    arguments: dict[str, JSONValue] | None = None
    raw_arguments: str | None = None


class ObservationKind(StrEnum):
    OK = "ok"
    UNKNOWN_TOOL = "unknown_tool"
    INVALID_ARGUMENTS = "invalid_arguments"
    TOOL_EXCEPTION = "tool_exception"
    TOOL_ERROR = "tool_error"
    BAD_RESULT = "bad_result"
    TIMEOUT = "timeout"
    RESOURCE_LIMIT = "resource_limit"
    FORBIDDEN = "forbidden"
    SANDBOX_ERROR = "sandbox_error"


class Observation(Record):
    """What a tool call gave back. ``error`` is set whenever ``kind`` is not ``ok``."""

    tool_call_id: str
    name: str
    kind: ObservationKind = ObservationKind.OK
    content: JSONValue = None
    error: str | None = None
    process_ended: bool = Field(
        default=False,
        description="The call ended the environment's sandbox process (it crashed, exited, stopped or ran past its "
        "budget and was killed): an environment failure.",
    )

    @field_validator("process_ended", mode="before")
    @classmethod
    def _absent_is_false(cls, value: object) -> object:
        return False if value is None else value  # rows published before the field existed carry null

    @property
    def ok(self) -> bool:
        return self.kind is ObservationKind.OK


class DiffEntry(Record):
    path: list[str | int]
    op: Literal["add", "remove", "change"]
    before: JSONValue = None
    after: JSONValue = None


class Step(Record):
    """One executed tool call with what it returned and what it changed. ``turn`` numbers the replies of the one
    who called (the agent's turns; for the simulated user's calls, its replies that held calls): calls of one
    reply share it."""

    index: int
    turn: int = 0
    call: ToolCall
    observation: Observation
    state_diff: list[DiffEntry] = Field(default_factory=list)
    duration_ms: float = 0.0
    before_message: int | None = Field(
        default=None,
        description="A call of the simulated user (dual control): how many messages of the agent's transcript "
        "were written before the user's round that made it; None for the agent's calls.",
    )

    @model_serializer(mode="wrap")
    def _omit_absent_position(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # The agent's steps dump exactly as before the field existed.
        data: dict[str, Any] = handler(self)
        if data.get("before_message", 0) is None:
            del data["before_message"]
        return data


class CheckResult(Record):
    check_id: str
    passed: bool
    value: str | None = Field(default=None, description="repr of what the check returned, when not True.")
    error: str | None = None
    passed_at_reset: bool | None = None


class RewardBreakdown(Record):
    state_reward: float = Field(description="Checks passed / checks total.")
    delta_reward: float | None = Field(
        default=None, description="Pass rate over the checks that were false at reset; None if there are none."
    )
    success: bool
    checks_passed: int
    checks_total: int
    trajectory_reward: float | None = None
    length_penalty: float | None = None
    gold_state_match: bool | None = None
    composite: float | None = None
    process_accuracy: float | None = Field(
        default=None,
        description="The process accuracy (milestones found in order), beside the reward, under rules with a process "
        "check.",
    )


class TerminationReason(StrEnum):
    AGENT_DONE = "agent_done"
    USER_STOP = "user_stop"
    MAX_STEPS = "max_steps"
    TOO_MANY_ERRORS = "too_many_errors"
    """The episode's tool calls failed as many times as the rules allow (``EpisodeRules.max_tool_errors``)."""
    CONTEXT_OVERFLOW = "context_overflow"
    AGENT_ERROR = "agent_error"
    TOOL_EXCEPTION = "tool_exception"
    """A tool raised and the episode rules end the episode there (reward 0)."""
    ENVIRONMENT_ERROR = "environment_error"
    """The environment failed the episode: it could not be loaded, or its process died, stopped or exited on its
    own. Scored as the rules say (``EpisodeRules.environment_failure``), never re-run."""
    INFRA_ERROR = "infra_error"
    """A failure outside the environment's reach (a model endpoint, the sandbox, the harness): not scored and can
    be re-run."""


class FailureParty(StrEnum):
    """Who is at fault when an episode ends in a failure rather than by the agent, the user or a limit."""

    ENVIRONMENT = "environment"
    """The environment's own code: it cannot be loaded, or its process died, stopped or exited on its own."""
    MODEL_ENDPOINT = "model_endpoint"
    """The agent's model could not be reached or failed."""
    USER_SIMULATOR = "user_simulator"
    """The simulated user failed: its model could not be reached or failed, or its policy raised."""
    HARNESS = "harness"
    """The harness itself: the sandbox could not start, a zygote was lost, a process was killed from outside the
    environment's reach (the kernel's OOM killer, an operator), or a bug."""


class FailureKind(StrEnum):
    """What failed, finer than who: it decides whether running the episode again can help."""

    ENVIRONMENT = "environment"
    """The environment's own code failed: running it again gives the same failure."""
    ENDPOINT_UNREACHABLE = "endpoint_unreachable"
    """Nothing answered at a model endpoint."""
    TRANSIENT = "transient"
    """Rate limits, timeouts, dropped connections or 5xx answers outlasted every retry."""
    REQUEST_REJECTED = "request_rejected"
    """A model endpoint refused the request (400, 401, 403, 404, 422, a missing key): the same request would be
    refused again until the setup changes."""
    MODEL_HANDLER = "model_handler"
    """An in-process model raised."""
    SANDBOX = "sandbox"
    """The jail could not serve the episode: a zygote lost or replaced, a process killed from outside."""
    HARNESS = "harness"
    """Anything else of the harness's (a bug, a failing user policy)."""


RETRYABLE_KINDS = frozenset(
    {FailureKind.ENDPOINT_UNREACHABLE, FailureKind.TRANSIENT, FailureKind.SANDBOX, FailureKind.HARNESS}
)


class Failure(Record):
    """Why an episode ended in ``environment_error`` or ``infra_error``, who is at fault, and whether a retry can
    help (records written before ``kind`` existed carry none and count as retryable, as they were then)."""

    at_fault: FailureParty
    detail: str = Field(description="What happened, in words (the error's text).")
    kind: FailureKind | None = Field(default=None, description="What failed (see FailureKind).")
    retryable: bool | None = Field(
        default=None,
        description="Whether running the episode again can help: `--retry-errors` re-runs these (and, with "
        "`--retry-unretryable`, the others too).",
    )

    @model_validator(mode="after")
    def _retryable_follows_kind(self) -> Failure:
        if self.kind is not None and self.retryable is None:
            self.retryable = self.kind in RETRYABLE_KINDS
        return self


class Usage(Record):
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cached_requests: int = 0
    model_seconds: float = 0.0
    unpriced_requests: int = Field(
        default=0,
        description="Requests to a model with no known price (litellm's cost map has none and its alias sets none): "
        "their cost is unknown, not $0, and is not in cost_usd.",
    )

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def add(self, other: Usage) -> None:
        self.unpriced_requests += other.unpriced_requests
        self.requests += other.requests
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.cost_usd += other.cost_usd
        self.cached_requests += other.cached_requests
        self.model_seconds += other.model_seconds


class Timings(Record):
    started_at: datetime = Field(default_factory=utc_now)
    ended_at: datetime | None = None
    wall_seconds: float = 0.0
    model_seconds: float = 0.0
    tool_seconds: float = 0.0
    scoring_seconds: float = 0.0


class ModelSettings(Record):
    """How one role's model is called. ``model`` is what the user asked for (an alias or a litellm string)."""

    model: str
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    extra: dict[str, JSONValue] = Field(default_factory=dict)


class AgentSettings(Record):
    kind: str = "function_calling"
    role: str = "agent"
    model: ModelSettings
    system_prompt_version: str = "1"


Mode = Literal["nonconv", "conv"]


class RecordVersions(Record):
    """Which versions of the graded material produced a trajectory's verdict: content hashes (sixteen hex digits
    of a SHA-256, see :mod:`harness.versions`) of the environment's code, of the scenario without its checks, and
    of its checks, plus the episode rules and the package version. Two verdicts are comparable only when their
    checks, scenario and rules agree."""

    environment: str | None = Field(default=None, description="Hash of the environment's code and tool schemas.")
    scenario: str = Field(description="Hash of the scenario's initial state, task, user and reference actions.")
    checks: str = Field(description="Hash of the scenario's checks (ids, sources and gates).")
    rules: str = Field(description="The episode rules profile the episode ran and was scored under.")
    package: str = Field(description="The version of this package that scored it.")


class PolicyTokens(Record):
    """The token ids and log-probabilities the trained policy produced, as a trainer saw them: the prompt, then
    one completion in which ``env_mask`` is 1 on the policy's own tokens and 0 on what the environment and the
    user said. Only rollouts driven by a trainer carry it."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float] = Field(description="Per completion token; 0 where env_mask is 0.")
    env_mask: list[int]


class Trajectory(Record):
    schema_version: str = SCHEMA_VERSION
    episode_id: str
    run_id: str | None = None
    scenario_id: str
    environment_id: str
    mode: Mode
    trial: int = 0
    agent: AgentSettings
    user: AgentSettings | None = None
    tools: list[ToolSpec] = Field(default_factory=list)
    messages: list[dict[str, JSONValue]] = Field(default_factory=list, description="OpenAI-format messages.")
    steps: list[Step] = Field(default_factory=list)
    final_state_diff: list[DiffEntry] = Field(default_factory=list)
    check_results: list[CheckResult] = Field(default_factory=list)
    reward: RewardBreakdown | None = None
    termination: TerminationReason
    termination_detail: str | None = None
    failure: Failure | None = Field(
        default=None,
        description="Set when the episode ended in environment_error or infra_error (records of earlier runs may "
        "have an infra_error without it).",
    )
    usage: dict[str, Usage] = Field(default_factory=dict, description="Token usage and cost per role.")
    timings: Timings = Field(default_factory=Timings)
    errors: list[str] = Field(default_factory=list)
    versions: RecordVersions | None = Field(
        default=None, description="What graded the episode (records of earlier runs have none)."
    )
    rescored_from: str | None = Field(
        default=None, description="Set by `harness rescore`: the run id whose recorded episode this verdict replaces."
    )
    policy_tokens: PolicyTokens | None = Field(
        default=None, description="Token ids and log-probabilities of a trainer's rollout; absent otherwise."
    )
    user_steps: list[Step] = Field(
        default_factory=list,
        description="The simulated user's own tool calls (dual control), never shown to the agent; absent otherwise.",
    )

    @model_serializer(mode="wrap")
    def _omit_absent_tokens(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Records without policy tokens or user steps dump exactly as before those fields existed (Hub tables,
        # stored runs).
        data: dict[str, Any] = handler(self)
        if data.get("policy_tokens", ...) is None:
            del data["policy_tokens"]
        if not data.get("user_steps", ...):
            data.pop("user_steps", None)
        return data

    @property
    def infra_error(self) -> bool:
        return self.termination is TerminationReason.INFRA_ERROR

    @property
    def environment_error(self) -> bool:
        return self.termination is TerminationReason.ENVIRONMENT_ERROR

    @property
    def num_tool_calls(self) -> int:
        return len(self.steps)


# ---------------------------------------------------------------------------------------------- run manifest


class DatasetRef(Record):
    source: str = Field(description="A folder path or a Hub dataset id.")
    revision: str | None = None
    fingerprint: str | None = Field(default=None, description="Content hash of the environments and scenarios.")


class ClusterNode(Record):
    node_id: str
    address: str
    resources: dict[str, float] = Field(default_factory=dict, description="What the node offers Ray (CPU, ...).")
    executors: int = Field(default=0, description="Episode executors placed on the node when the run started.")


class ClusterInfo(Record):
    """Where a run's episodes ran when it was distributed over a Ray cluster."""

    address: str = Field(description="What the driver joined: an address, 'auto', or 'local' for a cluster it started.")
    ray_version: str
    nodes: list[ClusterNode] = Field(default_factory=list)


class RescoredFrom(Record):
    """Where a re-scored run came from."""

    run_id: str
    run_dir: str = Field(description="The folder re-scored, as given.")
    checks_version: str | None = Field(default=None, description="The checks version the original run recorded.")
    dataset: DatasetRef = Field(
        description="The library the original run read (the manifest's own `dataset` is "
        "the library whose checks gave the new verdicts)."
    )
    rescored_at: datetime = Field(default_factory=utc_now)


class RunManifest(Record):
    schema_version: str = SCHEMA_VERSION
    run_id: str
    created_at: datetime = Field(default_factory=utc_now)
    package_version: str
    git_revision: str | None = None
    dataset: DatasetRef
    config: dict[str, JSONValue] = Field(default_factory=dict)
    model_resolution: dict[str, JSONValue] = Field(default_factory=dict)
    episodes_planned: int = 0
    cluster: ClusterInfo | None = Field(default=None, description="Set when episodes ran on a Ray cluster.")
    checks_version: str | None = Field(
        default=None,
        description="One hash over every scenario's checks in the library the run read (harness.versions): runs "
        "of one library version share it, whatever they selected; leaderboards keep different ones apart.",
    )
    rescored_from: RescoredFrom | None = Field(
        default=None, description="Set on a folder written by `harness rescore`: what it was re-scored from."
    )


RECORD_TYPES: dict[str, type[Record]] = {
    "environment": Environment,
    "scenario": Scenario,
    "trajectory": Trajectory,
    "run_manifest": RunManifest,
}
