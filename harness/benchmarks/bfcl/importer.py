"""Import BFCL's multi-turn categories (the ``bfcl-eval`` wheel, or its unpacked folder) into our records.

One environment per set of involved API classes (see :mod:`harness.benchmarks.bfcl.code`); one scenario per
BFCL entry, with the entry's id as its id, the user turns in order (a ``miss_func`` turn, which has no user text,
says BFCL's fixed notice), the functions that turn adds, and the ground truth as reference actions per turn.
Nothing of BFCL is imported or executed here; :func:`verify_import` replays the ground truth in the sandbox.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.benchmarks.bfcl.checker import ERROR_PREFIX, GROUND_TRUTH_TURNS, checker_digest, result_text
from harness.benchmarks.bfcl.code import (
    DISPATCHER,
    ClassModule,
    build_class_module,
    compose,
    composed_class_name,
    parse_call,
)
from harness.benchmarks.bfcl.source import CATEGORIES, CURRENT_RELEASE, BfclSource, BfclSourceError
from harness.episode.dispatch import open_tool_session
from harness.files import UnsafeFile, require_module_name, require_relative
from harness.library import write_new_library
from harness.names import is_safe_id
from harness.sandbox import EnvironmentLoadError, SandboxPool
from harness.schema import (
    Environment,
    FunctionSpec,
    Provenance,
    ReferenceAction,
    Scenario,
    ScriptedTurn,
    ToolCall,
    ToolSpec,
)

logger = logging.getLogger(__name__)

FUNC_DOC_FOLDER = "data/multi_turn_func_doc"
LONG_CONTEXT_CATEGORY = "multi_turn_long_context"


class BfclImportError(ValueError):
    """The import cannot be done as asked (a bad source, an unknown category, a malformed entry)."""


@dataclass
class BfclImport:
    environments: list[Environment] = field(default_factory=list)
    scenarios: list[Scenario] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    """Entries imported per category."""
    required_modules: dict[str, list[str]] = field(default_factory=dict)
    """Per environment id: modules beyond the standard library that its classes import."""
    version: str = "unknown"
    release: str = CURRENT_RELEASE
    """The BFCL data release the copy holds (v3 or v4)."""
    unpassable: list[str] = field(default_factory=list)
    """One line per entry whose turn count differs from its ground truth's (BFCL fails it always)."""


def resolve_categories(requested: list[str]) -> list[str]:
    """``all`` or category names (``multi_turn_`` may be left out), in BFCL's order, without repeats."""
    chosen: list[str] = []
    for name in requested:
        names = (
            list(CATEGORIES) if name == "all" else [name if name.startswith("multi_turn_") else f"multi_turn_{name}"]
        )
        for category in names:
            if category not in CATEGORIES:
                raise BfclImportError(f"unknown category {name!r}; choose from {', '.join(CATEGORIES)} or all")
            if category not in chosen:
                chosen.append(category)
    if not chosen:
        raise BfclImportError("no category given")
    return [c for c in CATEGORIES if c in chosen]


def snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def environment_id(class_names: list[str], release: str = CURRENT_RELEASE) -> str:
    """``bfcl-<classes>`` for the current release, ``bfcl-v3-<classes>`` for an earlier one: the two releases'
    classes differ, so a library holding both keeps each release's code apart."""
    prefix = "bfcl-" if release == CURRENT_RELEASE else f"bfcl-{release}-"
    return prefix + "-".join(snake(name).replace("_", "") for name in class_names)


def scenario_id(entry_id: str, release: str = CURRENT_RELEASE) -> str:
    """BFCL's entry id for the current release (``multi_turn_base_40``), prefixed with an earlier release's name
    (``v3_multi_turn_base_40``) so that both releases' entries can share a library and a run."""
    return entry_id if release == CURRENT_RELEASE else f"{release}_{entry_id}"


class _Importer:
    def __init__(self, source: BfclSource):
        self.source = source
        self.release = source.release
        self.checker = checker_digest(source)
        try:
            # Module paths and file names the release names itself: each must be a file inside the release.
            classes, named_by = source.constant("CLASS_FILE_PATH_MAPPING")
            self.module_of: dict[str, str] = {
                name: require_module_name(
                    str(path).rsplit(".", 1)[-1], f"{named_by}: CLASS_FILE_PATH_MAPPING[{name!r}]"
                )
                for name, path in classes.items()
            }
            docs, named_by = source.constant("MULTI_TURN_FUNC_DOC_FILE_MAPPING")
            self.doc_file_of: dict[str, str] = {
                name: _doc_file(file, f"{named_by}: MULTI_TURN_FUNC_DOC_FILE_MAPPING[{name!r}]")
                for name, file in docs.items()
            }
            self.stateless: set[str] = set(source.constant("STATELESS_CLASSES")[0])
            self.miss_func_notice: str = str(source.constant("DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC")[0])
            self.step_limit: int = int(source.constant("MAXIMUM_STEP_LIMIT")[0])
            self.type_mapping: dict[str, str] = dict(source.constant("GORILLA_TO_OPENAPI")[0])
        except (BfclSourceError, UnsafeFile):
            raise
        except (AttributeError, TypeError, ValueError) as exc:  # a constant of another shape than a release's
            raise BfclSourceError(f"{source.path}: a constant the importer reads has another shape: {exc}") from exc
        self.modules: dict[str, ClassModule] = {}
        self.docs: dict[str, list[dict[str, Any]]] = {}
        self.environments: dict[str, Environment] = {}
        self.required: dict[str, list[str]] = {}

    def module(self, class_name: str) -> ClassModule:
        if class_name not in self.modules:
            if class_name not in self.module_of:
                raise BfclImportError(f"unknown BFCL class {class_name!r}")
            self.modules[class_name] = build_class_module(self.source, class_name, self.module_of[class_name])
        return self.modules[class_name]

    def tools(self, class_name: str) -> list[dict[str, Any]]:
        if class_name not in self.docs:
            self.docs[class_name] = self.source.read_jsonl(f"{FUNC_DOC_FOLDER}/{self.doc_file_of[class_name]}")
        return self.docs[class_name]

    def environment(self, class_names: list[str]) -> Environment:
        ordered = sorted(class_names)
        env_id = environment_id(ordered, self.release)
        if env_id in self.environments:
            return self.environments[env_id]
        if not is_safe_id(env_id):
            raise BfclImportError(f"classes {', '.join(ordered)[:120]} cannot name an environment ({env_id[:80]!r})")
        modules = [self.module(name) for name in ordered]
        tools = [openai_tool(doc, self.type_mapping) for name in ordered for doc in self.tools(name)]
        required = sorted({m for module in modules for m in module.required_modules})
        environment = Environment(
            id=env_id,
            name=" + ".join(ordered),
            domain=f"bfcl-{self.release}",
            summary=f"BFCL {self.release} multi-turn API classes: {', '.join(ordered)}.",
            introduction=f"You can use the tools of these systems: {', '.join(ordered)}.",
            tools=tools,
            class_name=composed_class_name(ordered),
            code=compose(modules, self.stateless),
            call_dispatcher=DISPATCHER,
            provenance=Provenance(
                source="bfcl",
                upstream_id=",".join(ordered),
                details={
                    "bfcl_version": self.source.version,
                    "bfcl_release": self.release,
                    "checker_sha256": self.checker,
                    "classes": ordered,
                    "required_modules": required,
                    "source_license": self.source.license,
                },
            ),
        )
        self.environments[env_id] = environment
        self.required[env_id] = required
        return environment

    def scenario(self, entry: dict[str, Any], answer: dict[str, Any], category: str) -> Scenario:
        entry_id = str(entry.get("id"))
        if answer.get("id") != entry_id:
            raise BfclImportError(f"{category}: ground truth {answer.get('id')!r} does not line up with {entry_id!r}")
        classes = list(entry["involved_classes"])
        environment = self.environment(classes)
        methods: dict[str, list[str]] = {}
        for name in classes:
            methods.update(self.module(name).methods)
        questions: list[list[dict[str, Any]]] = entry["question"]
        ground_truth: list[list[str]] = answer["ground_truth"]
        missed: dict[str, list[str]] = entry.get("missed_function") or {}
        turns: list[ScriptedTurn] = []
        # BFCL asks one turn per question and compares the count of turns answered with the ground truth's; an
        # entry whose counts differ (v3's multi_turn_base_154: 5 questions, 6 ground-truth turns) fails in BFCL
        # whatever the model does. It keeps its questions as turns and records the ground truth's count.
        padded = [*ground_truth, *([[]] * (len(questions) - len(ground_truth)))]
        for index, (messages, calls) in enumerate(zip(questions, padded[: len(questions)], strict=True)):
            added = list(missed.get(str(index), []))
            if added:
                if messages:
                    raise BfclImportError(f"{entry_id}: turn {index} adds functions but also has user text")
                content = self.miss_func_notice
            else:
                texts = [m["content"] for m in messages if m.get("role") == "user"]
                if not texts:
                    raise BfclImportError(f"{entry_id}: turn {index} has no user message")
                content = "\n\n".join(texts)
            actions = []
            for text in calls:
                try:
                    name, arguments = parse_call(text, methods)
                except (ValueError, SyntaxError) as exc:
                    raise BfclImportError(f"{entry_id}: turn {index}: {exc}") from exc
                actions.append(ReferenceAction(name=name, arguments=arguments))
            turns.append(ScriptedTurn(content=content, tools_added=added, reference_actions=actions))
        unknown = {n for turn in turns for n in turn.tools_added} - set(environment.tool_names)
        if unknown:
            raise BfclImportError(f"{entry_id}: withheld functions {sorted(unknown)} are not tools of its classes")
        config = entry.get("initial_config") or {}
        return Scenario(
            id=scenario_id(entry_id, self.release),
            environment_id=environment.id,
            initial_state={
                "initial_config": {name: config[name] for name in classes if name in config},
                "long_context": category == LONG_CONTEXT_CATEGORY,
            },
            task=turns[0].content,
            turns=turns,
            reference_actions=[action for turn in turns for action in turn.reference_actions],
            max_steps_per_turn=self.step_limit,
            tags=["bfcl", f"bfcl-{self.release}", category],
            provenance=Provenance(
                source="bfcl",
                upstream_id=entry_id,
                details={
                    "bfcl_version": self.source.version,
                    "bfcl_release": self.release,
                    "checker_sha256": self.checker,
                    "category": category,
                    "involved_classes": classes,
                    "path": entry.get("path", []),
                    **({} if len(ground_truth) == len(questions) else {GROUND_TRUTH_TURNS: len(ground_truth)}),
                },
            ),
        )


def _doc_file(file: object, named_by: str) -> str:
    """A function doc file of ``data/multi_turn_func_doc``: a plain file name, so it is read from that folder."""
    if not isinstance(file, str) or not file or "/" in file:
        raise UnsafeFile(f"{named_by} names the file {str(file)[:80]!r}, which is not a file name")
    require_relative(file, named_by)
    return file


def openai_tool(doc: dict[str, Any], mapping: dict[str, str]) -> ToolSpec:
    """A BFCL function doc as an OpenAI tool, converted as BFCL's own OpenAI handler converts it."""
    parameters = dict(doc.get("parameters") or {})
    parameters["type"] = "object"
    parameters["properties"] = _cast_properties(dict(parameters.get("properties") or {}), mapping)
    return ToolSpec(
        function=FunctionSpec(
            name=re.sub(r"\.", "_", doc["name"]), description=doc.get("description", ""), parameters=parameters
        )
    )


def _cast_properties(properties: dict[str, Any], mapping: dict[str, str]) -> dict[str, Any]:
    cast: dict[str, Any] = {}
    for key, original in properties.items():
        value = dict(original)
        if "type" not in value:
            value["type"] = "string"
        else:
            if value["type"] == "float":
                value["format"] = "float"
                value["description"] = value.get("description", "") + " This is a float type value."
            value["type"] = mapping.get(value["type"], "string")
        if value["type"] in ("array", "object"):
            if "properties" in value:
                value["properties"] = _cast_properties(dict(value["properties"]), mapping)
            elif "items" in value:
                items = dict(value["items"])
                items["type"] = mapping.get(items.get("type", "string"), "string")
                if items["type"] == "array" and "items" in items:
                    inner = dict(items["items"])
                    inner["type"] = mapping.get(inner.get("type", "string"), "string")
                    items["items"] = inner
                elif items["type"] == "object" and "properties" in items:
                    items["properties"] = _cast_properties(dict(items["properties"]), mapping)
                value["items"] = items
        cast[key] = value
    return cast


def import_bfcl(source: Path, categories: list[str]) -> BfclImport:
    """Read ``categories`` from the BFCL copy at ``source``. Raises BfclSourceError / BfclImportError with a
    one-line reason when the source or an entry is unusable."""
    chosen = resolve_categories(categories)
    bfcl = BfclSource(source)
    try:
        importer = _Importer(bfcl)
        result = BfclImport(version=bfcl.version, release=bfcl.release)
        for category in chosen:
            data_file = bfcl.data_file(category)
            answer_file = bfcl.answer_file(category)
            for relative in (data_file, answer_file):
                if not bfcl.exists(relative):
                    raise BfclSourceError(f"{source} has no bfcl_eval/{relative}: category {category} is missing")
            entries = bfcl.read_jsonl(data_file)
            answers = bfcl.read_jsonl(answer_file)
            if len(entries) != len(answers):
                raise BfclImportError(f"{category}: {len(entries)} entries but {len(answers)} ground-truth rows")
            for entry, answer in zip(entries, answers, strict=True):
                try:
                    result.scenarios.append(importer.scenario(entry, answer, category))
                except KeyError as exc:
                    raise BfclImportError(f"{entry.get('id', '?')}: the entry lacks {exc}") from exc
            result.counts[category] = len(entries)
        result.unpassable = [
            f"{s.id}: {len(s.turns)} questions but {s.provenance.details[GROUND_TRUTH_TURNS]} ground-truth turns: "
            "BFCL's checker fails it whatever the model does, and so does the harness's"
            for s in result.scenarios
            if GROUND_TRUTH_TURNS in s.provenance.details
        ]
        result.environments = list(importer.environments.values())
        result.required_modules = dict(importer.required)
        return result
    finally:
        bfcl.close()


@dataclass
class Verification:
    problems: list[str] = field(default_factory=list)
    """One line per environment that does not load, or ground-truth call that fails."""
    unavailable: dict[str, list[str]] = field(default_factory=dict)
    """Per environment id: required modules the sandbox does not allow (its scenarios cannot run yet)."""


async def verify_import(result: BfclImport, pool: SandboxPool, *, concurrency: int = 64) -> Verification:
    """Load every environment in the sandbox and replay every scenario's ground truth there: a class that does
    not load, or a ground-truth call whose result is an error, is a problem."""
    verification = Verification()
    environments = {env.id: env for env in result.environments}
    for env_id, modules in result.required_modules.items():
        refused = [module for module in modules if pool.static_problems(f"import {module}\n")]
        if refused:
            verification.unavailable[env_id] = refused
    failed_to_load: set[str] = set()
    gate = asyncio.Semaphore(concurrency)

    async def replay(scenario: Scenario) -> None:
        environment = environments[scenario.environment_id]
        if environment.id in verification.unavailable or environment.id in failed_to_load:
            return
        async with gate:
            try:
                session = await open_tool_session(pool, environment, scenario.initial_state, record_diffs=False)
            except EnvironmentLoadError as exc:
                if environment.id not in failed_to_load:
                    failed_to_load.add(environment.id)
                    verification.problems.append(f"{environment.id}: does not load in the sandbox: {exc}")
                return
            try:
                for index, turn in enumerate(scenario.turns):
                    for action in turn.reference_actions:
                        call = ToolCall(id="verify", name=action.name, arguments=dict(action.arguments))
                        text = await result_text(session, call)
                        if text.startswith(ERROR_PREFIX):
                            verification.problems.append(
                                f"{scenario.id}: turn {index}: ground-truth call {action.name} fails: {text[:200]}"
                            )
                            return
            finally:
                await session.close()

    await asyncio.gather(*(replay(scenario) for scenario in result.scenarios))
    verification.problems.sort()
    return verification


def write_import(result: BfclImport, out: Path) -> None:
    """Write the library to ``out`` (which must not exist or be empty) all at once: into a sibling folder first,
    then renamed, so an interrupted import leaves nothing half-written in ``out``."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BfclImportError(f"{out} already exists and is not empty; choose another --out")
    write_new_library(result.environments, result.scenarios, out)
