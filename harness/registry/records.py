"""What a benchmark declares to the engine: one :class:`Benchmark` record, made of the parts below.

A benchmark is a package that builds one :class:`Benchmark` and names it in the ``harness.benchmarks`` entry-point
group (``docs/benchmarks.md``). Everything the engine does differently for it is read from this record: the
engine never imports a benchmark's modules by name, and a benchmark's callables import their heavy modules when
they are called, so that finding every benchmark stays cheap.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, field_validator

from harness.rules.profiles import DEFAULT_RULES, EpisodeRules
from harness.schema import (
    CheckResult,
    Environment,
    Mode,
    RewardBreakdown,
    Scenario,
    TerminationReason,
    Trajectory,
)
from harness.schema.jail import JailEnvironment

NAME_PATTERN = re.compile(r"[a-z][a-z0-9-]{0,39}")
"""A benchmark's, a profile's and an agent kind's name: what a user types after ``harness import`` or ``--rules``."""


class SourceRefused(Exception):
    """An import or an export that cannot go on, in one line, with the exit status it ends with (2: bad input)."""

    def __init__(self, message: str, status: int = 2) -> None:
        super().__init__(message)
        self.status = status


OptionType = Literal["path", "text", "integer", "flag", "paths", "texts"]
"""What an option holds: a path, a text, an integer, a flag (``--name/--no-name`` unless ``flag`` names it alone),
or a repeatable path or text."""


class CliOption(BaseModel):
    """One option (or the positional argument) of a benchmark's ``harness import`` or ``harness export`` command.
    The command hands its value to the benchmark's function under ``name``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="The keyword the value is passed under (a Python identifier).")
    type: OptionType
    help: str
    required: bool = Field(default=False, description="The command is refused without it.")
    default: str | int | bool | None = Field(default=None, description="The value when it is not given.")
    flag: str | None = Field(
        default=None, description="The option's one spelling (``--skip-bad-records``); None: ``--`` plus the name."
    )
    argument: bool = Field(default=False, description="A positional argument, not an option.")
    minimum: int | None = Field(default=None, description="The least integer accepted.")

    @field_validator("name")
    @classmethod
    def _identifier(cls, name: str) -> str:
        if not name.isidentifier():
            raise ValueError(f"option name {name!r} is not a Python identifier")
        return name


class ImportNote(BaseModel):
    """A line an import prints on the error stream: a label (``skipped``, ``gold error``) and what it is about."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    label: str
    text: str
    severity: Literal["error", "warning"] = "warning"


class SummaryTable(BaseModel):
    """A table an import prints before its summary lines."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


class ImportResult(BaseModel):
    """What every benchmark's importer returns; the command writes the library and says what happened."""

    model_config = ConfigDict(extra="forbid")

    environments: list[Environment] = Field(default_factory=list)
    scenarios: list[Scenario] = Field(default_factory=list)
    notes: list[ImportNote] = Field(
        default_factory=list, description="Lines for the error stream (records left out, golds that fail)."
    )
    refusal: str | None = Field(
        default=None, description="Why nothing is written (the command prints it after the notes and exits 1)."
    )
    table: SummaryTable | None = None
    summary: list[str] = Field(default_factory=list, description="Lines for the output once the library is written.")
    complete: bool = Field(
        default=True, description="Everything asked was imported; False: the command exits 1 after writing."
    )


class ImportCommand(BaseModel):
    """``harness import NAME``: its options and the function that reads the source."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    help: str = Field(description="The command's help text (its first line is its summary).")
    options: tuple[CliOption, ...]
    run: Callable[[dict[str, Any]], ImportResult | Coroutine[Any, Any, ImportResult]] = Field(
        description="Reads the source named by the options (a function, or a coroutine function when it needs the "
        "jail); raises SourceRefused when it cannot."
    )
    out_option: str = Field(
        default="out",
        description="The option naming the library folder written: it must not exist or be empty, and is written "
        "whole or not at all.",
    )


class ExportResult(BaseModel):
    """What a benchmark's export returns: the lines to print and whether everything asked was written."""

    model_config = ConfigDict(extra="forbid")

    lines: list[str] = Field(default_factory=list, description="Lines for the output (what was written).")
    notes: list[ImportNote] = Field(default_factory=list, description="Lines for the error stream.")
    complete: bool = Field(default=True, description="Everything asked was written; False: exit 1.")


class ExportCommand(BaseModel):
    """``harness export NAME``: its options and the function that writes a run in the benchmark's format."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    help: str
    options: tuple[CliOption, ...]
    run: Callable[[dict[str, Any]], ExportResult | Coroutine[Any, Any, ExportResult]] = Field(
        description="Writes the run named by the options (a function, or a coroutine function); raises "
        "SourceRefused or BadInput when it cannot."
    )


class RunSettings(BaseModel):
    """The settings a benchmark's libraries run with unless the user says otherwise (``harness run`` shows them
    as coming from the library)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rules: str | None = Field(default=None, description="The episode rules; None: the project's default.")
    mode: Mode | None = Field(default=None, description="nonconv or conv; None: the run's default.")
    user_model: str | None = Field(default=None, description="The simulated user's model; None: the run's default.")
    max_steps: int | None = Field(default=None, ge=1, description="The step limit; None: the rules' default.")


class AgentKind(BaseModel):
    """An agent a benchmark brings (``--agent NAME``). The agents layer imports ``factory`` when it builds one
    and calls it as ``factory(model_settings, client, scenario, role=..., system_prompt_version=...)``; the engine
    only ever reads the name."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    factory: str = Field(description="module:attribute of the class (or function) that builds the agent.")
    help: str = Field(description="What the agent is, for --agent's help.")

    @field_validator("factory")
    @classmethod
    def _import_path(cls, factory: str) -> str:
        module, _, attribute = factory.partition(":")
        if not attribute or not all(part.isidentifier() for part in [*module.split("."), *attribute.split(".")]):
            raise ValueError(f"agent factory {factory!r} is not module:attribute")
        return factory


class JudgeKind(BaseModel):
    """A kind of LLM-judged check a benchmark brings (``JudgedCheck.kind``). The engine imports ``functions`` when
    it first judges such a check: an object with ``request(check, transcript)``, the messages the judge is sent, and
    ``parse(check, reply)``, the verdicts the benchmark's evaluator reads from the reply (both pure; see
    :class:`harness.scoring.judged.JudgeFunctions`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    functions: str = Field(description="module:attribute of the object whose request and parse the engine calls.")
    help: str = Field(description="What the judge is asked, in a few words.")

    @field_validator("functions")
    @classmethod
    def _import_path(cls, functions: str) -> str:
        module, _, attribute = functions.partition(":")
        if not attribute or not all(part.isidentifier() for part in [*module.split("."), *attribute.split(".")]):
            raise ValueError(f"judge functions {functions!r} are not module:attribute")
        return functions


@runtime_checkable
class TurnScorer(Protocol):
    """Scores a scripted conversation turn by turn (when its scenario has no checks): the check results, one per
    judged turn, and the reward."""

    def __call__(
        self,
        pool: Any,
        scenario: Scenario,
        environment: Environment,
        messages: list[dict[str, Any]],
        termination: TerminationReason,
        *,
        seed: int = 0,
    ) -> Awaitable[tuple[list[CheckResult], RewardBreakdown | None]]: ...


RewardComponent = Callable[[RewardBreakdown, "Trajectory | None"], float]
"""A reward a trainer may log or weight, computed from an episode's reward breakdown (and its trajectory)."""


def _no_recommendation(environments: Sequence[Environment]) -> RunSettings:
    return RunSettings()


class Benchmark(BaseModel):
    """Everything the engine needs of one benchmark (or source format)."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    name: str = Field(description="`harness import NAME`; the provenance.source its importer writes.")
    title: str = Field(description="The benchmark's name as people write it.")
    rank: int = Field(
        default=100,
        description="Where it is listed among the benchmarks (`harness import --help`, --rules), lowest first; "
        "benchmarks of one rank by name.",
    )
    profiles: tuple[EpisodeRules, ...] = Field(default=(), description="The episode rules it brings (--rules).")
    agent_kinds: tuple[AgentKind, ...] = Field(default=(), description="The agents it brings (--agent).")
    judge_kinds: tuple[JudgeKind, ...] = Field(
        default=(), description="The kinds of LLM-judged checks its scenarios may hold (JudgedCheck.kind)."
    )
    jail_modules: frozenset[str] = Field(
        default=frozenset(),
        description="Third-party modules its environments' code may import in the jail, when installed (names only: "
        "the jail's processes never import the benchmark's own code).",
    )
    jail_environment: JailEnvironment | None = Field(
        default=None,
        description="The pinned packages its environments' code imports, at upstream's versions: a pool that runs "
        "its libraries (by their provenance.source) imports them from this environment, built once into the cache "
        "(harness.sandbox.jail_environment), never from the harness's own copies.",
    )
    importer: ImportCommand | None = None
    exporter: ExportCommand | None = None
    recommend: Callable[[Sequence[Environment]], RunSettings] = Field(
        default=_no_recommendation,
        description="The run settings for a selection of its environments (read from their records, so a library "
        "imported earlier gets them too).",
    )
    turn_scorer: TurnScorer | None = Field(
        default=None, description="Scores its scripted conversations that have no checks, turn by turn."
    )
    tasks_as_released: bool = Field(
        default=False,
        description="Its scenarios are a released benchmark's tasks: validation reports a task that doing nothing "
        "passes, and a run keeps it.",
    )
    reward_components: Mapping[str, RewardComponent] = Field(
        default_factory=dict, description="Rewards it defines, by name (trainers' reward functions)."
    )
    card_citation: str | None = Field(
        default=None,
        description="BibTeX that every dataset card cites (the work the project's record format comes from).",
    )

    @field_validator("name")
    @classmethod
    def _safe_name(cls, name: str) -> str:
        if NAME_PATTERN.fullmatch(name) is None or name == DEFAULT_RULES:
            raise ValueError(f"benchmark name {name!r} is not a lowercase name of letters, digits and '-'")
        return name
