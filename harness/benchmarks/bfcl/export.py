"""A run's BFCL episodes in BFCL's result-file format, so that ``bfcl evaluate`` can score the same trajectories.

BFCL's function-calling handlers write one JSON line per entry: ``{"id": ..., "result": turns}``, where each turn
is the list of the model's responses in it (one per model query): the tool calls as ``[{name: arguments_json}]``,
or the text when it made none. An episode cut short (BFCL's force-quit) has fewer turns than the entry, which
BFCL's checker fails, as ours does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from harness.errors import BadInput
from harness.files.outputs import OutputFolder, output_file_writer, safe_file_name
from harness.library import Library
from harness.results.store import StoredResults
from harness.schema import Scenario, TerminationReason, Trajectory


@dataclass
class BfclExport:
    files: dict[str, Path] = field(default_factory=dict)
    """Category → the file written."""
    entries: dict[str, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    """One line per episode left out (infrastructure errors, scenarios that are not BFCL's)."""


def turn_responses(trajectory: Trajectory, scenario: Scenario) -> list[list[Any]]:
    """The model's responses per scripted turn reached: a turn starts at the user message that says it."""
    turns: list[list[Any]] = []
    for message in trajectory.messages:
        role = message.get("role")
        if role == "user":
            if len(turns) < len(scenario.turns) and message.get("content") == scenario.turns[len(turns)].content:
                turns.append([])
            continue
        if role != "assistant" or not turns:
            continue
        calls = message.get("tool_calls") or []
        if calls:
            turns[-1].append([_call(call) for call in (calls if isinstance(calls, list) else [calls])])
        else:
            turns[-1].append(message.get("content") or "")
    return turns


def _call(call: Any) -> dict[str, Any]:
    """One call as BFCL writes it, ``{name: arguments_json}``; a call the record holds in another shape is refused."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise BadInput(f"a recorded tool call is not an OpenAI tool call: {str(call)[:120]}")
    return {function["name"]: function.get("arguments") or "{}"}


def _entry_order(entry_id: str) -> tuple[str, int]:
    match = re.match(r"^(.*)_(\d+)$", entry_id)
    return (match.group(1), int(match.group(2))) if match else (entry_id, -1)


def export_run(results: StoredResults, library: Library, out: Path, *, trial: int = 0) -> BfclExport:
    """Write ``trial``'s BFCL episodes: to ``out`` when they are all of one category and ``out`` ends in
    ``.json``, otherwise into the folder ``out`` as ``BFCL_v4_<category>_result.json`` (BFCL's file names). Every
    episode is read and checked first (a recorded call in another shape refuses the run before anything is
    written); then each file's entries are read again and written one at a time, in BFCL's order."""
    scenarios = {scenario.id: scenario for scenario in library.scenarios}
    rows: dict[str, list[tuple[tuple[str, int], int]]] = {}
    """Category → (entry order, position) of its episodes."""
    report = BfclExport()
    for position, trajectory in results.read(range(len(results))):
        if trajectory.trial != trial:
            continue
        scenario = scenarios.get(trajectory.scenario_id)
        if scenario is None or scenario.provenance.source != "bfcl":
            report.skipped.append(f"{trajectory.scenario_id}: not a BFCL scenario of this library")
            continue
        if trajectory.termination is TerminationReason.INFRA_ERROR:
            report.skipped.append(f"{trajectory.scenario_id}: ended in an infrastructure error; re-run it first")
            continue
        turn_responses(trajectory, scenario)  # refuses a call in another shape before anything is written
        category = str(scenario.provenance.details.get("category"))
        rows.setdefault(category, []).append((_entry_order(scenario.id), position))
    single = out.suffix == ".json" and len(rows) == 1
    if not single:
        out.mkdir(parents=True, exist_ok=True)
    folder = OutputFolder(out)
    with results.reader() as read:
        for category, items in rows.items():
            items.sort(key=lambda item: item[0])
            name = f"BFCL_v4_{safe_file_name(category)}_result.json"
            entries = 0
            with output_file_writer(out) if single else folder.writer(name) as handle:
                for _, position in items:
                    stored = read(position)
                    if stored is None:
                        continue
                    scenario = scenarios[stored.scenario_id]
                    row = {"id": scenario.id, "result": turn_responses(stored, scenario)}
                    handle.write(orjson.dumps(row) + b"\n")
                    entries += 1
            report.files[category] = out if single else folder.path(name)
            report.entries[category] = entries
    return report
