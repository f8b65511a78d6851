"""A run's BFCL episodes in BFCL's result-file format, so that ``bfcl evaluate`` can score the same trajectories.

BFCL's function-calling handlers write one JSON line per entry: ``{"id": ..., "result": turns}``, where each turn
is the list of the model's responses in it (one per model query): the tool calls as ``[{name: arguments_json}]``,
or the text when it made none. An episode cut short (BFCL's force-quit) has fewer turns than the entry, which
BFCL's checker fails, as ours does. Each file is named for the release its scenarios were imported from
(``BFCL_v3_multi_turn_base_result.json``: the name ``bfcl evaluate`` of that release looks for) and its rows carry
BFCL's own entry ids.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from harness.benchmarks.bfcl.source import CURRENT_RELEASE, RELEASES
from harness.errors import BadInput
from harness.files.outputs import OutputFolder, output_file_writer, safe_file_name
from harness.library import Library
from harness.results.store import StoredResults
from harness.schema import Scenario, TerminationReason, Trajectory


@dataclass
class BfclExport:
    files: dict[str, Path] = field(default_factory=dict)
    """``BFCL_<release>_<category>`` → the file written."""
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


def release_of(scenario: Scenario) -> str:
    """The BFCL release a scenario was imported from (v3 or v4; the current one when its record names none)."""
    release = scenario.provenance.details.get("bfcl_release")
    return release if release in RELEASES else CURRENT_RELEASE


def entry_id(scenario: Scenario) -> str:
    """BFCL's own id of the entry (a v3 scenario's id carries the release's prefix; BFCL's files do not)."""
    return scenario.provenance.upstream_id or scenario.id


def _entry_order(entry_id: str) -> tuple[str, int]:
    match = re.match(r"^(.*)_(\d+)$", entry_id)
    return (match.group(1), int(match.group(2))) if match else (entry_id, -1)


def export_run(results: StoredResults, library: Library, out: Path, *, trial: int = 0) -> BfclExport:
    """Write ``trial``'s BFCL episodes: to ``out`` when they are all of one release and category and ``out`` ends
    in ``.json``, otherwise into the folder ``out`` as ``BFCL_<release>_<category>_result.json`` (BFCL's file
    names). Every
    episode is read and checked first (a recorded call in another shape refuses the run before anything is
    written); then each file's entries are read again and written one at a time, in BFCL's order."""
    scenarios = {scenario.id: scenario for scenario in library.scenarios}
    rows: dict[str, list[tuple[tuple[str, int], int]]] = {}
    """``BFCL_<release>_<category>`` → (entry order, position) of its episodes."""
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
        prefix = f"BFCL_{release_of(scenario)}_{safe_file_name(category)}"
        rows.setdefault(prefix, []).append((_entry_order(entry_id(scenario)), position))
    single = out.suffix == ".json" and len(rows) == 1
    if not single:
        out.mkdir(parents=True, exist_ok=True)
    folder = OutputFolder(out)
    with results.reader() as read:
        for prefix, items in rows.items():
            items.sort(key=lambda item: item[0])
            name = f"{prefix}_result.json"
            entries = 0
            with output_file_writer(out) if single else folder.writer(name) as handle:
                for _, position in items:
                    stored = read(position)
                    if stored is None:
                        continue
                    scenario = scenarios[stored.scenario_id]
                    row = {"id": entry_id(scenario), "result": turn_responses(stored, scenario)}
                    handle.write(orjson.dumps(row) + b"\n")
                    entries += 1
            report.files[prefix] = out if single else folder.path(name)
            report.entries[prefix] = entries
    return report
