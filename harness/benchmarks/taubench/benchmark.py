"""τ-bench as the engine sees it: ``harness import taubench``, ``harness export taubench``, and the ``taubench`` and
``taubench-react`` rules its libraries run under."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.registry import (
    ALLOW_WEAK_SANDBOX_IMPORT,
    DEBUG,
    NEW_LIBRARY,
    SANDBOX_WORKERS,
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
from harness.schema import Environment

from .rules import TAUBENCH_REACT_RULES, TAUBENCH_RULES


async def import_domain(options: dict[str, Any]) -> ImportResult:
    from harness.sandbox.spec import CodeOrigin, JailSpec

    from .importer import TauBenchImportError, import_taubench, read_taubench
    from .source import TauBenchSource, TauBenchSourceError

    domain: str = options["domain"]
    split: str = options["split"]
    try:
        # Everything the import needs is read (and refused when it must be) before the jail starts.
        release = read_taubench(TauBenchSource(options["source"]), domain, split)
        jail = JailSpec.for_code(
            CodeOrigin.SOURCE, allow_weak_sandbox=options["allow_weak_sandbox"], workers=options["workers"]
        )
        async with jail.pool() as pool:
            result = await import_taubench(release, pool, concurrency=options["concurrency"])
    except (TauBenchSourceError, TauBenchImportError) as exc:
        raise SourceRefused(str(exc)) from exc
    if result.problems:
        notes = [ImportNote(label="error", text=problem, severity="error") for problem in result.problems]
        return ImportResult(notes=notes, refusal=f"{len(result.problems)} task(s) do not replay")
    answering = [s for s in result.scenarios if s.provenance.details.get("gold_errors")]
    notes = [
        ImportNote(label="gold error", text=f"{scenario.id}: {line}")
        for scenario in answering
        for line in scenario.provenance.details["gold_errors"]
    ]
    summary = (
        f"τ-bench {domain}/{split} ({result.commit[:12]}): {len(result.scenarios)} tasks → {options['out']} "
        f"({len(answering)} with gold actions that answer with an error, kept as upstream keeps them)"
    )
    return ImportResult(environments=[result.environment], scenarios=result.scenarios, notes=notes, summary=[summary])


async def export_results(options: dict[str, Any]) -> ExportResult:
    from harness.errors import BadInput
    from harness.files.outputs import output_file_writer
    from harness.library import LibraryError, load_library
    from harness.results.metrics import open_run

    from .export import NotTauBenchRun, pass_hat_k_of_outcomes, scored_order, write_env_run_results

    run_dir: Path = options["run_dir"]
    out: Path = options["out"]
    try:
        run = open_run(run_dir)
        library_path = options["envs"] or run.manifest.config.get("envs")
        scenarios = {}
        if isinstance(library_path, str | Path) and Path(library_path).is_dir():
            scenarios = {s.id: s for s in load_library(library_path).scenarios}
        order = scored_order(run.results)
    except (FileNotFoundError, ValueError, LibraryError, NotTauBenchRun) as error:
        raise BadInput(f"cannot export {run_dir}: {error}") from error
    if not order.positions:
        raise BadInput(f"cannot export {run_dir}: it has no scored episode")
    with output_file_writer(out) as handle:
        written = write_env_run_results(order, run.results, scenarios, handle)
    left_out = order.episodes - len(order.positions)
    curve = ", ".join(f"pass^{k}={value:.4f}" for k, value in pass_hat_k_of_outcomes(order.outcomes).items())
    return ExportResult(
        lines=[f"Wrote {written} EnvRunResult records to {out} ({curve}; {left_out} not scored, left out)"]
    )


def recommend(environments: Sequence[Environment]) -> RunSettings:
    """Conversations with upstream's user simulator, scored as τ-bench rewards them."""
    return RunSettings(rules=TAUBENCH_RULES.name, mode="conv")


BENCHMARK = Benchmark(
    name="taubench",
    title="τ-bench",
    rank=30,
    profiles=(TAUBENCH_RULES, TAUBENCH_REACT_RULES),
    importer=ImportCommand(
        help="Import a τ-bench domain: its tools, and one scenario per task of a split, checked as upstream rewards "
        "it.",
        options=(
            CliOption(
                name="source", type="path", required=True, help="A checkout of sierra-research/tau-bench (git clone)."
            ),
            CliOption(
                name="domain", type="text", required=True, help="retail or airline (a domain folder of tau_bench/envs)."
            ),
            NEW_LIBRARY,
            CliOption(
                name="split",
                type="text",
                default="test",
                help="The task split: test, train or dev (as the domain's env.py has).",
            ),
            SANDBOX_WORKERS,
            CliOption(
                name="concurrency",
                type="integer",
                default=2,
                minimum=1,
                help="Gold replays at once (each session holds the whole domain data).",
            ),
            ALLOW_WEAK_SANDBOX_IMPORT,
            DEBUG,
        ),
        run=import_domain,
    ),
    exporter=ExportCommand(
        help="A run as upstream's results file: a JSON list of EnvRunResult records (task_id, reward, info, traj, "
        "trial).",
        options=(
            CliOption(
                name="run_dir",
                type="path",
                argument=True,
                required=True,
                help="A run folder of a τ-bench import (harness run --rules taubench).",
            ),
            CliOption(
                name="out", type="path", required=True, help="The JSON file to write (upstream's results format)."
            ),
            CliOption(name="envs", type="path", help="The library the run read (default: the one its manifest names)."),
        ),
        run=export_results,
    ),
    recommend=recommend,
    tasks_as_released=True,
)
