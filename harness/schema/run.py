"""The records of a run: tool calls and observations, steps, rewards, failures, trajectories and manifests."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from harness.schema.judged import JudgeRecord
from harness.schema.library import SCHEMA_VERSION, Environment, JSONValue, Record, Scenario, ToolSpec, utc_now


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
    JUDGE = "judge"
    """The LLM judge of the scenario's judged checks: its model gave no reply, or a reply the benchmark's evaluator
    cannot read (as the benchmark's rule says)."""
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
    JUDGE_REPLY = "judge_reply"
    """The judge replied with text the benchmark's evaluator cannot read, and the benchmark's rule is that the
    episode then has no score: asking again would likely get the same reply."""
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
    of a SHA-256, see :mod:`harness.records.versions`) of the environment's code, of the scenario without its checks,
    and of its checks, plus the episode rules and the package version. Two verdicts are comparable only when their
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
    judge: JudgeRecord | None = Field(
        default=None,
        description="What the LLM judge of the scenario's judged checks was asked and answered (a versioned "
        "layout); absent for scenarios without judged checks.",
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
        if data.get("judge", ...) is None:
            data.pop("judge", None)
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
        description="One hash over every scenario's checks in the library the run read (harness.records.versions): "
        "runs of one library version share it, whatever they selected; leaderboards keep different ones apart.",
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
