"""ACEBench's agent category as the engine sees it: ``harness import acebench``, ``harness export acebench``, its
three rules profiles, and its text-call agent (``--agent acebench-text``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.registry import (
    ALLOW_WEAK_SANDBOX,
    ALLOW_WEAK_SANDBOX_IMPORT,
    DEBUG,
    NEW_LIBRARY,
    SANDBOX_WORKERS,
    AgentKind,
    Benchmark,
    CliOption,
    ExportCommand,
    ExportResult,
    ImportCommand,
    ImportNote,
    ImportResult,
    RunSettings,
    SourceRefused,
)
from harness.schema import Environment, Mode

from .rules import ACEBENCH_ENVSCALER_RULES, ACEBENCH_RULES, ACEBENCH_TEXT_RULES

CATEGORY_MODES: dict[str, Mode] = {"multi_turn": "conv", "multi_step": "nonconv"}
"""multi_turn tasks are conversations with a simulated user; multi_step tasks are given whole."""


async def import_category(options: dict[str, Any]) -> ImportResult:
    from harness.sandbox.spec import CodeOrigin, JailSpec

    from .importer import AceBenchImportError, import_acebench, read_acebench
    from .source import AceBenchSource, AceBenchSourceError

    category: str = options["category"]
    language: str = options["language"]
    try:
        # Everything the import needs is read (and refused when it must be) before the jail starts.
        release = read_acebench(AceBenchSource(options["source"]), category, language)
        jail = JailSpec.for_code(
            CodeOrigin.SOURCE, allow_weak_sandbox=options["allow_weak_sandbox"], workers=options["workers"]
        )
        async with jail.pool() as pool:
            result = await import_acebench(release, pool)
    except (AceBenchSourceError, AceBenchImportError) as exc:
        raise SourceRefused(str(exc)) from exc
    if result.bad_records and not options["skip_bad_records"]:
        notes = [ImportNote(label="bad record", text=problem, severity="error") for problem in result.bad_records]
        return ImportResult(notes=notes, refusal=f"{len(result.bad_records)} bad record(s); --skip-bad-records")
    notes = [ImportNote(label="skipped", text=problem) for problem in result.bad_records]
    notes += [ImportNote(label="gold does not reach the expected state", text=problem) for problem in result.unsolvable]
    notes += [ImportNote(label="no gold (the oracle cannot play it)", text=p) for p in result.without_gold]
    if not result.scenarios:
        return ImportResult(notes=notes, refusal="no task could be imported")
    summary = (
        f"ACEBench agent {category} ({language}): {len(result.scenarios)} tasks → {options['out']} "
        f"({len(result.unsolvable)} whose gold does not reach upstream's expected state, "
        f"{len(result.without_gold)} whose milestones do not parse, {len(result.bad_records)} bad records skipped)"
    )
    return ImportResult(environments=result.environments, scenarios=result.scenarios, notes=notes, summary=[summary])


async def export_results(options: dict[str, Any]) -> ExportResult:
    from harness.errors import BadInput
    from harness.library import load_library
    from harness.results.metrics import open_run

    from .export import AceBenchExportError, export_run

    run_dir: Path = options["run_dir"]
    try:
        stored = open_run(run_dir)
        records = load_library(options["library"] or stored.manifest.dataset.source)
        jail = records.jail(allow_weak_sandbox=options["allow_weak_sandbox"], workers=1)
        async with jail.pool() as pool:
            written = await export_run(stored.results, records, pool, options["out"])
    except (FileNotFoundError, ValueError, AceBenchExportError) as error:
        raise BadInput(f"cannot export {run_dir}: {error}") from error
    lines = []
    for exported in written:
        lines.append(f"Wrote {exported.path} ({exported.entries} tasks)")
        if exported.missing:
            lines.append(
                f"  {exported.missing} of its {exported.entries} tasks have no episode in the run: written as empty "
                "results, which upstream's evaluator scores 0"
            )
    return ExportResult(lines=lines)


def recommend(environments: Sequence[Environment]) -> RunSettings:
    """Upstream's loop and scoring, with native tool calls; multi_turn as conversations, multi_step given whole."""
    modes = {CATEGORY_MODES.get(str(e.provenance.details.get("category"))) for e in environments}
    mode = modes.pop() if len(modes) == 1 else None
    return RunSettings(rules=ACEBENCH_RULES.name, mode=mode)


BENCHMARK = Benchmark(
    name="acebench",
    title="ACEBench",
    rank=40,
    profiles=(ACEBENCH_RULES, ACEBENCH_ENVSCALER_RULES, ACEBENCH_TEXT_RULES),
    agent_kinds=(
        AgentKind(
            name="acebench-text",
            factory="harness.benchmarks.acebench.agents:AceBenchTextAgent",
            help="ACEBench's calls written as text; with --rules acebench-text",
        ),
    ),
    importer=ImportCommand(
        help="Import ACEBench's agent tasks: the scenario classes as tools, one scenario per task with upstream's "
        "end-to-end and process checks.",
        options=(
            CliOption(
                name="source",
                type="path",
                required=True,
                help="An ACEBench checkout (git clone of chenchen0103/ACEBench).",
            ),
            CliOption(
                name="category", type="text", required=True, help="multi_turn or multi_step (the agent category)."
            ),
            NEW_LIBRARY,
            CliOption(name="language", type="text", default="en", help="en or zh."),
            CliOption(
                name="skip_bad_records",
                type="flag",
                flag="--skip-bad-records",
                default=False,
                help="Leave out (and list) upstream records that cannot be read.",
            ),
            SANDBOX_WORKERS,
            ALLOW_WEAK_SANDBOX_IMPORT,
            DEBUG,
        ),
        run=import_category,
    ),
    exporter=ExportCommand(
        help="A run as ACEBench's result files "
        "(``result_all/result_<lang>/<model>/data_agent_<category>_result.json``).",
        options=(
            CliOption(
                name="run_dir",
                type="path",
                argument=True,
                required=True,
                help="A run folder (of an imported ACEBench library).",
            ),
            CliOption(name="out", type="path", required=True, help="Folder to write result_all/… into."),
            CliOption(
                name="library",
                type="path",
                help="The library the run read (default: the one its manifest names).",
            ),
            ALLOW_WEAK_SANDBOX,
        ),
        run=export_results,
    ),
    recommend=recommend,
    tasks_as_released=True,
)
