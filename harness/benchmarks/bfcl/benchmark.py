"""BFCL's multi-turn categories as the engine sees them: ``harness import bfcl``, ``harness export bfcl``, the turn
checker that scores its scripted conversations, and the module its classes import in the jail."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from harness.registry import (
    ALLOW_WEAK_SANDBOX_IMPORT,
    DEBUG,
    NEW_LIBRARY,
    Benchmark,
    CliOption,
    ExportCommand,
    ExportResult,
    ImportCommand,
    ImportNote,
    ImportResult,
    SourceRefused,
    SummaryTable,
)
from harness.schema import CheckResult, Environment, RewardBreakdown, Scenario, TerminationReason

FAILED = 1
"""BFCL's commands end with status 1 when the source or the run cannot be read."""


async def score_scripted(
    pool: Any,
    scenario: Scenario,
    environment: Environment,
    messages: list[dict[str, Any]],
    termination: TerminationReason,
    *,
    seed: int = 0,
) -> tuple[list[CheckResult], RewardBreakdown | None]:
    """A scripted conversation scored turn by turn, as BFCL's checker scores it."""
    from .checker import score_turns

    return await score_turns(pool, scenario, environment, messages, termination, seed=seed)


async def import_release(options: dict[str, Any]) -> ImportResult:
    from harness.files.archives import ArchiveRefused
    from harness.sandbox.spec import CodeOrigin, JailSpec

    from .importer import BfclImportError, import_bfcl, verify_import
    from .source import BfclSourceError

    source: Path = options["source"]
    out: Path = options["out"]
    started = time.perf_counter()
    try:
        result = import_bfcl(source, list(options["category"] or ["all"]))
        notes: list[ImportNote] = []
        unavailable: dict[str, list[str]] = {}
        if options["verify"]:
            jail = JailSpec.for_code(
                CodeOrigin.SOURCE, allow_weak_sandbox=options["allow_weak_sandbox"], workers=options["workers"]
            )
            async with jail.pool() as pool:
                verification = await verify_import(result, pool)
            unavailable = verification.unavailable
            if verification.problems:
                notes = [ImportNote(label="error", text=p, severity="error") for p in verification.problems]
                return ImportResult(notes=notes, refusal=f"{len(verification.problems)} problem(s) in {source}")
    except ArchiveRefused:  # bad input: the command is refused (status 2)
        raise
    except (BfclSourceError, BfclImportError) as exc:  # a source or a category that cannot be used: bad input
        raise SourceRefused(str(exc)) from exc
    except OSError as exc:
        raise SourceRefused(str(exc), FAILED) from exc
    notes.extend(ImportNote(label="warning", text=line) for line in result.unpassable)
    for env_id, modules in sorted(unavailable.items()):
        scenarios = sum(1 for s in result.scenarios if s.environment_id == env_id)
        text = (
            f"{env_id} imports {', '.join(modules)}, which this sandbox does not allow: its {scenarios} scenarios will "
            "fail to load until it does (install the 'bfcl' extra)"
        )
        notes.append(ImportNote(label="warning", text=text))
    rows = [(name, str(count)) for name, count in result.counts.items()]
    rows.append(("environments", str(len(result.environments))))
    return ImportResult(
        environments=result.environments,
        scenarios=result.scenarios,
        notes=notes,
        table=SummaryTable(
            title=f"BFCL {result.release} (bfcl-eval {result.version}) → {out}",
            columns=("category", "entries"),
            rows=tuple(rows),
        ),
        summary=[f"Imported in {time.perf_counter() - started:.1f} s"],
    )


async def export_results(options: dict[str, Any]) -> ExportResult:
    from harness.errors import BadInput
    from harness.library import LibraryError, load_library
    from harness.results.metrics import open_run

    from .export import export_run as write_run

    run_dir: Path = options["run_dir"]
    try:
        run = open_run(run_dir)
    except (FileNotFoundError, ValueError) as exc:  # a run folder refused as it is: status 2
        raise BadInput(f"cannot export {run_dir}: {exc}") from exc
    try:
        library = load_library(options["envs"] or run.manifest.dataset.source)
        report = write_run(run.results, library, options["out"], trial=options["trial"])
    except BadInput:  # an --out or a library refused as given: status 2
        raise
    except (ValueError, LibraryError, OSError) as exc:
        raise SourceRefused(str(exc), FAILED) from exc
    notes = [ImportNote(label="skipped", text=line) for line in report.skipped]
    if not report.files:
        notes.append(ImportNote(label="error", text="the run holds no BFCL episodes", severity="error"))
    return ExportResult(
        lines=[f"{category}: {report.entries[category]} entries → {path}" for category, path in report.files.items()],
        notes=notes,
        complete=bool(report.files) and not report.skipped,
    )


BENCHMARK = Benchmark(
    name="bfcl",
    title="BFCL",
    rank=50,
    jail_modules=frozenset({"mpmath"}),
    importer=ImportCommand(
        help="Import BFCL's multi-turn categories (a v3 or v4 release): environments, scenarios with scripted turns, "
        "ground truth per turn.",
        options=(
            CliOption(
                name="source",
                type="path",
                required=True,
                help="The bfcl-eval wheel (pip download bfcl-eval==VERSION --no-deps) or its folder: 2025.6.16 and "
                "earlier ship BFCL v3, later releases v4; the import records which.",
            ),
            NEW_LIBRARY,
            CliOption(
                name="category",
                type="texts",
                help="multi_turn_base, multi_turn_miss_func, multi_turn_miss_param, multi_turn_long_context or all; "
                "repeatable.",
            ),
            CliOption(
                name="verify",
                type="flag",
                default=True,
                help="Load every class and replay every ground truth in the sandbox first.",
            ),
            CliOption(
                name="workers",
                type="integer",
                default=0,
                help="Sandbox worker processes for --verify (default: one per core).",
            ),
            ALLOW_WEAK_SANDBOX_IMPORT,
            DEBUG,
        ),
        run=import_release,
    ),
    exporter=ExportCommand(
        help="Write a run in BFCL's result-file format, for `bfcl evaluate`.",
        options=(
            CliOption(
                name="run_dir", type="path", argument=True, required=True, help="A run folder of BFCL scenarios."
            ),
            CliOption(
                name="out",
                type="path",
                required=True,
                help="A .json file (one release and category) or a folder (BFCL_<release>_<category>_result.json "
                "files, named for the release each scenario was imported from).",
            ),
            CliOption(name="envs", type="text", help="The library the run used (default: the run's manifest)."),
            CliOption(
                name="trial",
                type="integer",
                default=0,
                help="Which trial to export (BFCL scores one response per entry).",
            ),
            DEBUG,
        ),
        run=export_results,
    ),
    turn_scorer=score_scripted,
)
