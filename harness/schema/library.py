"""The records of a library: environments (their tools and state), checks, user profiles, reference actions and
scenarios, and the base every record shares.

Each top-level record carries ``schema_version``. JSON round trips are lossless: values that hold
environment state are plain JSON values (dicts, lists, strings, numbers, booleans, null).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
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
    transcript)`` (the messages after the system prompt; see :mod:`harness.scoring.transcript_checks`) or the released
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


class JudgedCheck(Record):
    """One check of a scenario that an LLM judge decides, after the episode, in the harness process.

    ``kind`` names the judge kind a benchmark package registers (``Benchmark.judge_kinds``): its functions build
    the request from ``asked`` and ``prompts`` and read the reply into verdicts. ``asked`` holds what the judge is
    asked (the kind's own fields, validated by the kind); ``prompts`` the texts the package read from the
    benchmark's source at import. The check holds when every verdict read from the reply holds."""

    id: str
    kind: str
    description: str = ""
    asked: dict[str, JSONValue] = Field(
        default_factory=dict, description="What the judge is asked (the kind's fields)."
    )
    prompts: dict[str, str] = Field(
        default_factory=dict, description="The prompt texts of the benchmark, read from its source at import."
    )


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
    judged_checks: list[JudgedCheck] = Field(
        default_factory=list,
        description="Checks an LLM judge decides after the episode (`harness run --judge-model`); their verdicts "
        "join the checks' results.",
    )

    @model_serializer(mode="wrap")
    def _omit_absent_user_actions(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Scenarios without the user's reference calls or judged checks dump exactly as before those fields existed.
        data: dict[str, Any] = handler(self)
        if not data.get("user_reference_actions", ...):
            data.pop("user_reference_actions", None)
        if not data.get("judged_checks", ...):
            data.pop("judged_checks", None)
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
        for judged in self.judged_checks:
            if judged.id in ids:
                raise ValueError(f"judged check {judged.id!r} has the id of another check")
            ids.add(judged.id)
        for check in self.checks:
            if check.gate is not None and (check.gate == check.id or check.gate not in ids):
                raise ValueError(f"check {check.id!r} is gated on {check.gate!r}, which is not another of its checks")
        return self
