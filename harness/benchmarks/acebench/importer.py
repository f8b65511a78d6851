"""Import ACEBench's agent category (multi_turn or multi_step, en or zh) into environments and scenarios.

One environment per distinct tool list (and, for multi_turn, domain prompt) of the records: it embeds upstream's
scenario classes (:mod:`harness.benchmarks.acebench.code`); its tools are the records' function docs in upstream's
order. Each scenario's initial state is the record's ``initial_config`` and ``involved_classes``; its task is the
record's ``question`` (the simulated user's instruction in multi_turn, the agent's request in multi_step); its
reference actions are the calls of its milestones (the first alternative when there are several; none when a
milestone does not parse, as 8 of multi_turn's 30 and 4 of multi_step's 20 en milestones do not: upstream scores
those tasks all the same, so they are imported, tagged ``acebench-unparsed-milestone``, and only an oracle cannot
play them); its checks are
upstream's end-to-end comparison with the possible answer's ``ground_truth`` and its milestone process score
(:mod:`harness.benchmarks.acebench.evaluation`). Every gold is replayed in the jail before anything is written and
the tasks whose gold does not reach upstream's own ground truth are reported.

The import is two steps: :func:`read_acebench` reads everything it needs of the checkout (through its
:class:`~harness.files.SourceTree`, so a symlinked licence or module, or a module named outside the checkout, is
refused before any code runs), then :func:`import_acebench` replays the gold in the jail.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from harness.benchmarks.acebench.code import DISPATCHER, ENVIRONMENT_CLASS, ScenarioCode, build_scenario_code
from harness.benchmarks.acebench.evaluation import (
    END_TO_END_CHECK_ID,
    PROCESS_CHECK_ID,
    BadMilestone,
    end_to_end_source,
    parse_milestone,
    process_source,
)
from harness.benchmarks.acebench.source import (
    CATEGORIES,
    LANGUAGES,
    AceBenchSource,
    AceBenchSourceError,
    answer_file,
    data_file,
)
from harness.benchmarks.acebench.user_prompt import (
    DETAILS_KEY,
    AceBenchUserPrompt,
    UserPromptShapeError,
    pick_user_prompt,
    read_user_prompts,
)
from harness.episode.dispatch import DispatchSession, open_tool_session
from harness.sandbox import SandboxPool
from harness.schema import Check, Environment, FunctionSpec, Provenance, ReferenceAction, Scenario, ToolCall, ToolSpec

UPSTREAM = "https://github.com/chenchen0103/ACEBench"
_JSON_TYPES = {"dict": "object", "float": "number", "tuple": "array", "list": "array", "int": "integer"}


class AceBenchImportError(ValueError):
    """The import cannot be done as asked."""


@dataclass
class AceBenchRelease:
    """Everything an import reads of one category and language, read before any of the checkout's code runs."""

    category: str
    language: str
    license: str
    license_text: str
    classes: dict[str, str]
    """Class name → its scenario module's file."""
    saved: dict[str, list[str]]
    prompts: dict[str, str]
    text_prompts: dict[str, str]
    user_prompts: dict[str, AceBenchUserPrompt]
    """multi_turn's simulated user per variant (BaseApi's, Travel's), read from the checkout; none for multi_step."""
    records: list[tuple[int, Any]]
    """The data file's JSON lines as (line number, value; None for a line that is not JSON)."""
    answers: dict[str, dict[str, Any]]
    code: ScenarioCode


@dataclass
class AceBenchImport:
    environments: list[Environment] = field(default_factory=list)
    scenarios: list[Scenario] = field(default_factory=list)
    bad_records: list[str] = field(default_factory=list)
    """Upstream records that cannot be imported (one line each, naming the record)."""
    unsolvable: list[str] = field(default_factory=list)
    """Tasks whose gold does not reach upstream's ground truth (one line each); they are imported all the same."""
    without_gold: list[str] = field(default_factory=list)
    """Tasks a milestone of which does not parse (one line each): imported with no reference actions."""


def json_schema(value: Any) -> Any:
    """Upstream's function doc types in JSON Schema's words (``dict`` → ``object``, ``float`` → ``number``)."""
    if isinstance(value, dict):
        converted = {key: json_schema(item) for key, item in value.items()}
        kind = value.get("type")
        if isinstance(kind, str) and kind in _JSON_TYPES:
            converted["type"] = _JSON_TYPES[kind]
        return converted
    if isinstance(value, list):
        return [json_schema(item) for item in value]
    return value


def tool_specs(functions: list[dict[str, Any]]) -> list[ToolSpec]:
    specs = []
    for function in functions:
        parameters = json_schema(function.get("parameters") or {"type": "dict", "properties": {}})
        specs.append(
            ToolSpec(
                function=FunctionSpec(
                    name=str(function["name"]), description=str(function.get("description", "")), parameters=parameters
                )
            )
        )
    return specs


def _domain_prompt(category: str, involved: list[str], prompts: dict[str, str]) -> str:
    """The domain prompt upstream's multi_turn agent appends (Travel's, then BaseApi's); multi_step has none."""
    if category != "multi_turn":
        return ""
    return "".join(prompts[name] for name in ("Travel", "BaseApi") if name in involved)


def user_prompts(source: AceBenchSource, language: str) -> dict[str, AceBenchUserPrompt]:
    try:
        return read_user_prompts(source, language)
    except UserPromptShapeError as exc:
        raise AceBenchSourceError(str(exc)) from None


def _user_prompt_details(involved: list[str], prompts: dict[str, AceBenchUserPrompt]) -> dict[str, Any]:
    """The scenario's simulated user as upstream picks it (nothing for multi_step, which has no user)."""
    picked = pick_user_prompt(involved, prompts)
    return {} if picked is None else {DETAILS_KEY: picked.model_dump()}


def _record_problem(record: Any, answer: Any, classes: dict[str, str]) -> str | None:
    if not isinstance(record, dict):
        return "is not a JSON object"
    for key in ("id", "question", "initial_config", "involved_classes", "function"):
        if key not in record:
            return f"has no {key!r}"
    unknown = [c for c in record["involved_classes"] if c not in classes]
    if unknown:
        return f"involves classes upstream does not map: {', '.join(map(str, unknown))}"
    if not isinstance(answer, dict):
        return "has no possible answer"
    if "ground_truth" not in answer or "mile_stone" not in answer:
        return "has a possible answer without ground_truth or mile_stone"
    return None


def _milestone_calls(milestones: Any) -> list[ReferenceAction]:
    stones = milestones[0] if milestones and isinstance(milestones[0], list) else milestones
    alternatives = milestones if milestones and isinstance(milestones[0], list) else [milestones]
    for alternative in alternatives:
        for stone in alternative:
            if not isinstance(stone, str):
                raise BadMilestone(f"is not a string: {stone!r}")
            parse_milestone(stone)
    actions: list[ReferenceAction] = []
    for stone in stones:
        actions.extend(ReferenceAction(name=name, arguments=arguments) for name, arguments in parse_milestone(stone))
    return actions


async def replay_gold(pool: SandboxPool, environment: Environment, scenario: Scenario) -> str | None:
    """None when the gold reaches the ground truth; otherwise what went wrong."""
    session = await open_tool_session(pool, environment, scenario.initial_state, record_diffs=False)
    try:
        assert isinstance(session, DispatchSession)
        for index, action in enumerate(scenario.reference_actions):
            call = ToolCall(id=f"gold-{index}", name=action.name, arguments=dict(action.arguments))
            observation = await session.call_raw(call)
            if not isinstance(observation.content, str):
                return f"gold call {index} ({action.name}) failed in the sandbox: {observation.error}"
        state = await session.state()
    finally:
        await session.close()
    end_to_end = [c for c in scenario.checks if c.id == END_TO_END_CHECK_ID]
    (result,) = await pool.run_checks(end_to_end, scenario.initial_state, state, transcript=[])
    if result.passed:
        return None
    return "its gold does not reach upstream's ground truth" + (f" ({result.error})" if result.error else "")


def read_acebench(source: AceBenchSource, category: str, language: str) -> AceBenchRelease:
    """Read everything the import of ``category`` in ``language`` needs, before any of its code runs."""
    if category not in CATEGORIES or language not in LANGUAGES:
        raise AceBenchImportError(
            f"choose --category {' or '.join(CATEGORIES)} and --language {' or '.join(LANGUAGES)}"
        )
    available = source.available()
    if f"{language}/{category}" not in available:
        raise AceBenchImportError(
            f"{source.path} has no agent {category} data in {language} "
            f"({data_file(language, category)}); it holds: {', '.join(available) or 'none'}"
        )
    classes = source.class_modules(category, language)
    answers: dict[str, dict[str, Any]] = {}
    for _, entry in source.read_lines(answer_file(language, category)):
        if isinstance(entry, dict) and "id" in entry:
            answers[str(entry["id"])] = entry
    return AceBenchRelease(
        category=category,
        language=language,
        license=source.license,
        license_text=source.license_text,
        classes=classes,
        saved=source.saved_attributes(),
        prompts=source.domain_prompts(language) if category == "multi_turn" else {},
        text_prompts=source.text_prompts(category, language),
        user_prompts=user_prompts(source, language) if category == "multi_turn" else {},
        records=source.read_lines(data_file(language, category)),
        answers=answers,
        code=build_scenario_code(source, classes),
    )


async def import_acebench(release: AceBenchRelease, pool: SandboxPool, *, concurrency: int = 4) -> AceBenchImport:
    category, language, classes, saved = release.category, release.language, release.classes, release.saved
    code = release.code
    environment_code = code.environment_code(saved, multi_turn=category == "multi_turn")
    result = AceBenchImport()
    environments: dict[str, Environment] = {}
    for line, record in release.records:
        label = f"{data_file(language, category)}:{line}"
        record_id = str(record.get("id")) if isinstance(record, dict) else label
        answer: Any = release.answers.get(record_id)
        problem = _record_problem(record, answer, classes)
        if problem is not None:
            result.bad_records.append(f"{record_id}: {problem}")
            continue
        milestone_problem: str | None = None
        try:
            actions = _milestone_calls(answer["mile_stone"])
        except BadMilestone as exc:
            # Upstream compares milestones as text and reads the state end to end: the task is scored all the same.
            milestone_problem = f"a milestone {exc}"
            actions = []
            result.without_gold.append(f"{record_id}: {milestone_problem}")
        involved = [str(c) for c in record["involved_classes"]]
        functions = record["function"] if isinstance(record["function"], list) else [record["function"]]
        intro = _domain_prompt(category, involved, release.prompts)
        key = json.dumps([functions, intro], sort_keys=True, ensure_ascii=False)
        if key not in environments:
            number = len(environments)
            environments[key] = Environment(
                id=f"acebench-{category.replace('_', '-')}-{language}" + (f"-{number}" if number else ""),
                name=f"ACEBench agent {category} ({language})",
                domain="acebench",
                summary=f"ACEBench's agent {category} scenario classes ({', '.join(classes)}) and function docs.",
                introduction=intro,
                tools=tool_specs(functions),
                class_name=ENVIRONMENT_CLASS,
                code=environment_code,
                call_dispatcher=DISPATCHER,
                provenance=Provenance(
                    source="acebench",
                    details={
                        "upstream": UPSTREAM,
                        "category": category,
                        "language": language,
                        "modules": code.modules,
                        "saved_attributes": {k: list(v) for k, v in saved.items()},
                        "functions": functions,
                        "source_license": release.license,
                        "license_text": release.license_text,
                    },
                ),
            )
        environment = environments[key]
        ground_truth = answer["ground_truth"]
        milestones = answer["mile_stone"]
        suffix = record_id.rsplit("_", 1)[-1]
        result.scenarios.append(
            Scenario(
                id=f"acebench-{category.replace('_', '-')}-{language}-{suffix}",
                environment_id=environment.id,
                initial_state={"initial_config": record["initial_config"], "involved_classes": involved},
                task=str(record["question"]),
                reference_actions=actions,
                checks=[
                    Check(
                        id=END_TO_END_CHECK_ID,
                        description="The saved attributes of every involved class match upstream's ground truth "
                        "(ACEBench's end-to-end accuracy).",
                        source=end_to_end_source(ground_truth),
                    ),
                    Check(
                        id=PROCESS_CHECK_ID,
                        description="The agent's calls contain the milestones in order (ACEBench's process "
                        "accuracy; a fraction when not all are found).",
                        source=process_source(milestones),
                    ),
                ],
                tags=["acebench", category, language]
                + (["acebench-travel"] if "Travel" in involved and "BaseApi" not in involved else [])
                + (["acebench-unparsed-milestone"] if milestone_problem else []),
                provenance=Provenance(
                    source="acebench",
                    upstream_id=record_id,
                    details={
                        "category": category,
                        "language": language,
                        "ground_truth": ground_truth,
                        "mile_stone": milestones,
                        "category_tasks": len(release.records),
                        "milestone_problem": milestone_problem,
                        # What the text setting's agent is prompted with (--agent acebench-text).
                        "functions": functions,
                        "text_prompts": release.text_prompts,
                        "source_license": release.license,
                    }
                    | _user_prompt_details(involved, release.user_prompts),
                ),
            )
        )
    result.environments = list(environments.values())
    by_id = {e.id: e for e in result.environments}
    gate = asyncio.Semaphore(concurrency)

    async def verify(index: int) -> None:
        scenario = result.scenarios[index]
        if scenario.provenance.details.get("milestone_problem"):
            return  # no gold to replay
        async with gate:
            problem = await replay_gold(pool, by_id[scenario.environment_id], scenario)
        details = dict(scenario.provenance.details)
        details["gold_reaches_ground_truth"] = problem is None
        tags = scenario.tags if problem is None else [*scenario.tags, "gold-unsolvable"]
        if problem is not None:
            result.unsolvable.append(f"{scenario.provenance.upstream_id}: {problem}")
        result.scenarios[index] = scenario.model_copy(
            update={"tags": tags, "provenance": scenario.provenance.model_copy(update={"details": details})}
        )

    await asyncio.gather(*(verify(i) for i in range(len(result.scenarios))))
    result.unsolvable.sort()
    result.without_gold.sort()
    return result


__all__ = [
    "AceBenchImport",
    "AceBenchImportError",
    "AceBenchRelease",
    "AceBenchSourceError",
    "import_acebench",
    "read_acebench",
]
