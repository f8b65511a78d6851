"""The records environment synthesis passes between its stages (validated model answers and stage outputs)."""

from __future__ import annotations

import keyword
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from harness.schema import Usage

IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]*$")
CLASS_NAME = re.compile(r"^[A-Z][A-Za-z0-9]*$")
PARAMETER_TYPES = ("str", "int", "float", "bool", "list[str]", "list[int]", "dict")
ATTRIBUTE_TYPES = (*PARAMETER_TYPES, "list[dict]")
ParameterType = Literal["str", "int", "float", "bool", "list[str]", "list[int]", "dict"]
AttributeType = Literal["str", "int", "float", "bool", "list[str]", "list[int]", "dict", "list[dict]"]


class Answer(BaseModel):
    """A model answer: unknown keys are ignored (models add commentary), missing or mistyped ones are not."""

    model_config = ConfigDict(extra="ignore")


class Reasoned(Answer):
    """A whole answer: ``analysis`` holds the reasoning the model wrote before its JSON (see
    :mod:`synth.answers`), kept in provenance."""

    analysis: str = ""


def _identifier(value: str, what: str) -> str:
    if not IDENTIFIER.match(value) or keyword.iskeyword(value):
        raise ValueError(f"{what} {value!r} must be a snake_case Python identifier")
    return value


# ----------------------------------------------------------------------------------------------- discovery


class TaskVerdict(Reasoned):
    keep: bool
    reason: str = Field(min_length=3)


class InferredEnvironment(Reasoned):
    description: str = Field(min_length=20)


class TaskOutcome(BaseModel):
    """What discovery concluded about one task."""

    task: str
    keep: bool
    reason: str
    description: str | None = None
    error: str | None = None


class Theme(BaseModel):
    """One environment to build, with the tasks that motivated it."""

    id: str
    description: str
    tasks: list[str]


# ------------------------------------------------------------------------------------------------ planning


class AttributePlan(Answer):
    name: str
    type: AttributeType = "str"
    description: str = ""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _identifier(value, "attribute name")


class EntityPlan(Answer):
    name: str = Field(description="Singular CamelCase entity name, e.g. Order.")
    collection: str = Field(description="State key holding the records by id, e.g. orders.")
    key: str = Field(description="The attribute that identifies a record, e.g. order_id.")
    description: str = ""
    attributes: list[AttributePlan] = Field(min_length=1)

    @field_validator("name")
    @classmethod
    def _entity_name(cls, value: str) -> str:
        if not CLASS_NAME.match(value):
            raise ValueError(f"entity name {value!r} must be CamelCase")
        return value

    @field_validator("collection")
    @classmethod
    def _collection(cls, value: str) -> str:
        return _identifier(value, "collection")

    @model_validator(mode="after")
    def _key_is_an_attribute(self) -> EntityPlan:
        names = [a.name for a in self.attributes]
        if self.key not in names:
            raise ValueError(f"entity {self.name}: key {self.key!r} is not one of its attributes {names}")
        if len(set(names)) != len(names):
            raise ValueError(f"entity {self.name}: attribute names repeat")
        return self


class ScalarPlan(Answer):
    """A single value held in the state, e.g. ``current_date``."""

    name: str
    type: Literal["str", "int", "float", "bool"] = "str"
    description: str = ""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _identifier(value, "state value")


class ParameterPlan(Answer):
    name: str
    type: ParameterType = "str"
    description: str = Field(min_length=1)
    required: bool = True

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if value == "self":
            raise ValueError("a parameter may not be called self")
        return _identifier(value, "parameter name")


class OperationPlan(Answer):
    name: str
    description: str = Field(min_length=5)
    kind: Literal["query", "state_change"]
    parameters: list[ParameterPlan] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if value.startswith("_"):
            raise ValueError(f"operation {value!r} must be public (no leading underscore)")
        return _identifier(value, "operation name")

    @model_validator(mode="after")
    def _parameters(self) -> OperationPlan:
        names = [p.name for p in self.parameters]
        if len(set(names)) != len(names):
            raise ValueError(f"operation {self.name}: parameter names repeat")
        seen_optional = False
        for parameter in self.parameters:
            if parameter.required and seen_optional:
                raise ValueError(f"operation {self.name}: required parameter {parameter.name!r} after an optional one")
            seen_optional = seen_optional or not parameter.required
        return self


class EnvironmentPlan(Reasoned):
    name: str = Field(min_length=3)
    class_name: str
    domain: str = Field(min_length=2)
    summary: str = Field(min_length=10)
    introduction: str = Field(min_length=20, description="Agent-facing description and policy.")
    rules: list[str] = Field(min_length=1)
    entities: list[EntityPlan] = Field(min_length=1)
    scalars: list[ScalarPlan] = Field(default_factory=list)
    operations: list[OperationPlan] = Field(min_length=2)

    @field_validator("class_name")
    @classmethod
    def _class_name(cls, value: str) -> str:
        if not CLASS_NAME.match(value):
            raise ValueError(f"class_name {value!r} must be CamelCase")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> EnvironmentPlan:
        state_keys = [e.collection for e in self.entities] + [s.name for s in self.scalars]
        if len(set(state_keys)) != len(state_keys):
            raise ValueError(f"state keys repeat: {state_keys}")
        operation_names = [o.name for o in self.operations]
        if len(set(operation_names)) != len(operation_names):
            raise ValueError(f"operation names repeat: {operation_names}")
        clashes = set(operation_names) & set(state_keys)
        if clashes:
            raise ValueError(f"operations and state keys share names: {sorted(clashes)}")
        if not any(o.kind == "state_change" for o in self.operations):
            raise ValueError("a stateful environment needs at least one state_change operation")
        entity_names = [e.name for e in self.entities]
        if len(set(entity_names)) != len(entity_names) or self.class_name in entity_names:
            raise ValueError("entity names must be distinct from each other and from the class name")
        return self

    @property
    def state_keys(self) -> list[str]:
        return [e.collection for e in self.entities] + [s.name for s in self.scalars]

    def operation(self, name: str) -> OperationPlan | None:
        return next((o for o in self.operations if o.name == name), None)


# ----------------------------------------------------------------------------------------------- modeling


class MethodAttempt(BaseModel):
    operation: str
    attempt: int
    problems: list[str] = Field(default_factory=list)


class ModelingResult(BaseModel):
    """The assembled class and its generated initial state, or why modeling gave up."""

    ok: bool
    code: str | None = None
    methods: dict[str, str] = Field(default_factory=dict)
    imports: dict[str, list[str]] = Field(default_factory=dict, description="Top-level imports each method needs.")
    initial_state: dict[str, Any] | None = None
    attempts: list[MethodAttempt] = Field(default_factory=list)
    reason: str | None = None
    usage: Usage = Field(default_factory=Usage)


# ---------------------------------------------------------------------------------------------- assessment


class ProposedCall(Reasoned):
    tool: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)
    expect: Literal["success", "refusal"]
    intent: str = ""


class Judgement(Reasoned):
    verdict: Literal["pass", "warning", "fail"]
    reason: str = Field(min_length=3)

    @field_validator("verdict", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value


class AssessmentRound(BaseModel):
    round: int
    tool: str
    arguments: dict[str, Any]
    expect: str
    intent: str = ""
    observation_kind: str
    result: Any = None
    error: str | None = None
    diff: list[dict[str, Any]] = Field(default_factory=list)
    verdict: Literal["pass", "warning", "fail"]
    reason: str
    tester_analysis: str = ""
    checker_analysis: str = ""


class ToolCoverage(BaseModel):
    """How one tool was exercised by the assessment: rounds judged, split by what the tester expected."""

    total: int = 0
    positive: int = Field(default=0, description="Rounds where the tester expected success.")
    negative: int = Field(default=0, description="Rounds where the tester expected a refusal.")
    passed: int = Field(default=0, description="Rounds judged pass or warning.")

    @property
    def exercised(self) -> bool:
        return self.total > 0


def tool_coverage(tools: list[str], rounds: list[AssessmentRound]) -> dict[str, ToolCoverage]:
    coverage = {name: ToolCoverage() for name in tools}
    for item in rounds:
        entry = coverage.setdefault(item.tool, ToolCoverage())
        entry.total += 1
        entry.positive += item.expect == "success"
        entry.negative += item.expect == "refusal"
        entry.passed += item.verdict != "fail"
    return coverage


class AssessmentReport(BaseModel):
    attempt: int = Field(description="0 for the first assessment, n for the assessment after repair n.")
    rounds: list[AssessmentRound]
    score: float
    threshold: float
    passed: bool
    tests_per_tool: int | None = Field(default=None, description="The per-tool cap on test rounds.")
    coverage: dict[str, ToolCoverage] = Field(default_factory=dict, description="Per tool of the environment.")
    unusable: int = Field(default=0, description="Rounds with no usable test call or judgement.")
    problems: list[str] = Field(default_factory=list, description="Why the assessment did not pass.")

    @property
    def unexercised(self) -> list[str]:
        return [name for name, entry in self.coverage.items() if not entry.exercised]

    @property
    def counts(self) -> dict[str, int]:
        counts = {"pass": 0, "warning": 0, "fail": 0}
        for item in self.rounds:
            counts[item.verdict] += 1
        return counts

    def failing_methods(self) -> dict[str, list[str]]:
        """Checker's reasons per method that failed at least one round."""
        reasons: dict[str, list[str]] = {}
        for item in self.rounds:
            if item.verdict == "fail":
                reasons.setdefault(item.tool, []).append(
                    f"call {item.tool}({item.arguments}) expected {item.expect}; got "
                    f"{item.result if item.error is None else item.error!r}: {item.reason}"
                )
        return reasons

    def summary(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "score": round(self.score, 4),
            **self.counts,
            "rounds": len(self.rounds),
            "tools_exercised": sum(entry.exercised for entry in self.coverage.values()),
            "tools": len(self.coverage),
            "unexercised": self.unexercised,
            "problems": self.problems,
        }


class Rejection(BaseModel):
    """An environment that did not make it, with the stage that stopped it and why. ``infrastructure``
    rejections (model unreachable, sandbox lost) are not persisted as stage outputs: a re-run retries them."""

    theme_id: str
    stage: Literal["discovery", "planning", "modeling", "assessment", "repair", "validation", "infrastructure"]
    reason: str
    name: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)
