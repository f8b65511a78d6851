"""A run on an imported ACEBench library, written as ACEBench's inference writes its results, so that its
evaluator (``eval_main.py``) can read them.

Layout (``generate.py``, ``base_inference.py``): ``result_all/result_<lang>/<model>/data_agent_<category>_result.json``,
one JSON object per line, ``{"id": "agent_<category>_<n>", "result": [...], "process": [...]}``, sorted by ``n``.
``process`` is each agent message that called tools, rendered as upstream's prompt-mode agent writes calls
(:func:`~harness.benchmarks.acebench.evaluation.render_calls`); ``result`` is the saved attributes of every
involved class after the episode, which the export gets by replaying the episode's calls in the jail on the
scenario's initial state (the scenario classes are deterministic), empty when upstream would have recorded none.

Upstream's evaluator reads one line per task of the category (``eval_main.py`` refuses a file of another length),
so every task the library holds for a category the run touched is written, in upstream's order: a task the run has
no episode of gets ``"result": []`` and ``"process": []``, which upstream scores as a task that did nothing. A
library that does not hold every task of the category (one imported with ``--skip-bad-records``) is refused.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.benchmarks.acebench.evaluation import transcript_process
from harness.episode.dispatch import DispatchSession, open_tool_session
from harness.files.outputs import OutputFolder, safe_file_name
from harness.library import Library
from harness.results.store import StoredResults
from harness.rules.protocols import parse_arguments
from harness.sandbox import SandboxPool
from harness.schema import Environment, Scenario, ToolCall, Trajectory


class AceBenchExportError(ValueError):
    """The run cannot be exported as ACEBench results."""


@dataclass
class ExportedFile:
    path: Path
    entries: int
    missing: int = 0
    """Tasks the run has no episode of, written as empty results."""


def model_folder(models: Iterable[str]) -> str:
    """The model's name as a folder (upstream names the folder after ``--model``): its letters, digits, ``.``,
    ``_`` and ``-``, every other run of characters one ``_`` (``../../x`` is ``x``)."""
    names = sorted(set(models))
    name = names[0] if len(names) == 1 else "mixed"
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._")[:128] or "model"


def episode_calls(trajectory: Trajectory) -> list[ToolCall]:
    calls = []
    for message in trajectory.messages:
        if message.get("role") != "assistant" or not isinstance(message.get("tool_calls"), list):
            continue
        for raw in message["tool_calls"]:
            if not isinstance(raw, dict):
                continue
            function = raw.get("function")
            function = function if isinstance(function, dict) else {}
            arguments = parse_arguments(function.get("arguments"))
            calls.append(ToolCall(id=str(raw.get("id")), name=str(function.get("name")), arguments=arguments or {}))
    return calls


async def final_result(
    pool: SandboxPool, environment: Environment, scenario: Scenario, trajectory: Trajectory
) -> list[Any]:
    session = await open_tool_session(pool, environment, scenario.initial_state, record_diffs=False)
    try:
        assert isinstance(session, DispatchSession)
        for call in episode_calls(trajectory):
            await session.call_raw(call)
        state = await session.state()
    finally:
        await session.close()
    result = state.get("result") if state.get("recorded") else []
    return list(result) if isinstance(result, list) else []


@dataclass(frozen=True)
class Entry:
    """Where one first trial's result goes: its file (language, category), its place there, its episode."""

    language: str
    category: str
    number: int
    upstream_id: str
    position: int


def category_tasks(library: Library, language: str, category: str) -> list[tuple[int, str]]:
    """The (number, upstream id) of every task the library holds for the category, in upstream's order; raises
    :class:`AceBenchExportError` when the library lacks some of the category's tasks."""
    tasks: dict[int, str] = {}
    expected: set[int] = set()
    for scenario in library.scenarios:
        details = scenario.provenance.details
        if scenario.provenance.source != "acebench" or (details.get("language"), details.get("category")) != (
            language,
            category,
        ):
            continue
        number = str(scenario.provenance.upstream_id).rsplit("_", 1)[-1]
        if number.isdigit():
            tasks[int(number)] = str(scenario.provenance.upstream_id)
        if isinstance(details.get("category_tasks"), int):
            expected.add(details["category_tasks"])
    if expected and len(tasks) != max(expected):
        raise AceBenchExportError(
            f"the library holds {len(tasks)} of the {max(expected)} tasks of {category} ({language}) and upstream's "
            "evaluator reads them all: import the category again without --skip-bad-records"
        )
    return sorted(tasks.items())


def plan_entries(results: StoredResults, library: Library) -> tuple[list[Entry], set[str]]:
    """The first trials' entries in the run's order, and the run's models (its records read once); raises
    :class:`AceBenchExportError` for an episode that is not of an imported ACEBench scenario."""
    scenarios = {s.id: s for s in library.scenarios}
    environments = library.environments
    entries: list[Entry] = []
    models: set[str] = set()
    for position, trajectory in results.read(range(len(results))):
        models.add(trajectory.agent.model.model)
        scenario = scenarios.get(trajectory.scenario_id)
        if scenario is None or scenario.provenance.source != "acebench":
            raise AceBenchExportError(f"episode {trajectory.episode_id} is not of an imported ACEBench scenario")
        if trajectory.trial:
            continue  # upstream writes one result per task: the first trial's
        details = scenario.provenance.details
        category, language = details.get("category"), details.get("language")
        upstream_id = str(scenario.provenance.upstream_id)
        if (
            not isinstance(category, str)
            or not isinstance(language, str)
            or not upstream_id.rsplit("_", 1)[-1].isdigit()
        ):
            raise AceBenchExportError(f"scenario {scenario.id} does not say its ACEBench category, language and id")
        environment = environments.get(scenario.environment_id)
        if environment is None or environment.call_dispatcher is None or environment.provenance.source != "acebench":
            raise AceBenchExportError(f"scenario {scenario.id}'s environment is not an imported ACEBench environment")
        entries.append(Entry(language, category, int(upstream_id.rsplit("_", 1)[-1]), upstream_id, position))
    return entries, models


async def export_run(results: StoredResults, library: Library, pool: SandboxPool, out: Path) -> list[ExportedFile]:
    """Write the run's result files: every episode is checked first (nothing is written for a run that cannot be
    exported), then each file's entries are read, replayed and written one at a time, in upstream's order."""
    scenarios = {s.id: s for s in library.scenarios}
    entries, models = plan_entries(results, library)
    groups: dict[tuple[str, str], list[Entry]] = {}
    for entry in entries:
        groups.setdefault((entry.language, entry.category), []).append(entry)
    tasks = {key: category_tasks(library, *key) for key in groups}  # refused before anything is written
    folder = model_folder(models)
    target = OutputFolder(out)
    written = []
    # Every file lands at its name only once all are written: a replay that fails leaves none of them.
    with ExitStack() as files, results.reader() as read:
        for (language, category), members in sorted(groups.items()):
            parts = (
                "result_all",
                f"result_{safe_file_name(language)}",
                folder,
                f"data_agent_{safe_file_name(category)}_result.json",
            )
            handle = files.enter_context(target.writer(parts))
            count = missing = 0
            by_number = {member.number: member for member in members}
            for number, upstream_id in tasks[(language, category)]:
                episode = by_number.get(number)
                trajectory = read(episode.position) if episode is not None else None
                if trajectory is None:
                    line: dict[str, Any] = {"id": upstream_id, "result": [], "process": []}
                    missing += 1
                else:
                    scenario = scenarios[trajectory.scenario_id]
                    environment = library.environments[scenario.environment_id]
                    result = await final_result(pool, environment, scenario, trajectory)
                    process = transcript_process([dict(m) for m in trajectory.messages])
                    line = {"id": upstream_id, "result": result, "process": process}
                handle.write((json.dumps(line, ensure_ascii=False) + "\n").encode("utf-8"))
                count += 1
            written.append(ExportedFile(path=target.path(*parts), entries=count, missing=missing))
    return written
