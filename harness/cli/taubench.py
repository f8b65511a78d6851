"""``harness import taubench``: one τ-bench domain and split into a library folder, after replaying its gold in the
jail; ``harness export taubench``: a run in upstream's results format (a list of ``EnvRunResult`` records)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from harness.cli.aio import run_to_end
from harness.cli.errors import RefusingCommand
from harness.cli.options import AllowWeakSandboxImport
from harness.cli.tau2 import write_library
from harness.console import console, err_console, labelled, outside


def import_taubench_command(
    source: Annotated[Path, typer.Option(help="A checkout of sierra-research/tau-bench (git clone).")],
    domain: Annotated[str, typer.Option(help="retail or airline (a domain folder of tau_bench/envs).")],
    out: Annotated[Path, typer.Option(help="Folder to write the library to (must not exist, or be empty).")],
    split: Annotated[
        str, typer.Option(help="The task split: test, train or dev (as the domain's env.py has).")
    ] = "test",
    workers: Annotated[int, typer.Option(help="Sandbox worker processes (default: one per core).")] = 0,
    concurrency: Annotated[
        int, typer.Option(min=1, help="Gold replays at once (each session holds the whole domain data).")
    ] = 2,
    allow_weak_sandbox: AllowWeakSandboxImport = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
) -> None:
    """Import a τ-bench domain: its tools, and one scenario per task of a split, checked as upstream rewards it."""
    from harness.benchmarks.taubench.importer import (
        TauBenchImport,
        TauBenchImportError,
        import_taubench,
        read_taubench,
    )
    from harness.benchmarks.taubench.source import TauBenchSource, TauBenchSourceError
    from harness.sandbox.spec import CodeOrigin, JailSpec

    try:
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise TauBenchImportError(f"{out} already exists and is not empty; choose another --out")
        # Everything the import needs is read (and refused when it must be) before the jail starts.
        release = read_taubench(TauBenchSource(source), domain, split)

        async def run() -> TauBenchImport:
            jail = JailSpec.for_code(CodeOrigin.SOURCE, allow_weak_sandbox=allow_weak_sandbox, workers=workers)
            async with jail.pool() as pool:
                return await import_taubench(release, pool, concurrency=concurrency)

        result = run_to_end(run())
    except (TauBenchSourceError, TauBenchImportError) as exc:
        if debug:
            raise
        err_console.print(labelled("error", "red", exc), soft_wrap=True)
        raise typer.Exit(2) from None
    if result.problems:
        for problem in result.problems:
            err_console.print(labelled("error", "red", problem), soft_wrap=True)
        err_console.print(labelled("nothing written:", "red", f"{len(result.problems)} task(s) do not replay"))
        raise typer.Exit(1)
    write_library(result.environment, result.scenarios, out)
    answering = [s for s in result.scenarios if s.provenance.details.get("gold_errors")]
    for scenario in answering:
        for line in scenario.provenance.details["gold_errors"]:
            err_console.print(labelled("gold error", "yellow", f"{scenario.id}: {line}"), soft_wrap=True)
    console.print(
        outside(
            f"τ-bench {domain}/{split} ({result.commit[:12]}): {len(result.scenarios)} tasks → {out} "
            f"({len(answering)} with gold actions that answer with an error, kept as upstream keeps them)"
        ),
        soft_wrap=True,
    )


def export_taubench_command(
    run_dir: Annotated[Path, typer.Argument(help="A run folder of a τ-bench import (harness run --rules taubench).")],
    out: Annotated[Path, typer.Option("--out", help="The JSON file to write (upstream's results format).")],
    envs: Annotated[
        Path | None, typer.Option(help="The library the run read (default: the one its manifest names).")
    ] = None,
) -> None:
    """A run as upstream's results file: a JSON list of EnvRunResult records (task_id, reward, info, traj, trial)."""
    from harness.benchmarks.taubench.export import (
        NotTauBenchRun,
        pass_hat_k_of_outcomes,
        scored_order,
        write_env_run_results,
    )
    from harness.errors import BadInput
    from harness.library import LibraryError, load_library
    from harness.metrics import open_run
    from harness.outputs import output_file_writer

    try:
        run = open_run(run_dir)
        library_path = envs or run.manifest.config.get("envs")
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
    console.print(
        outside(f"Wrote {written} EnvRunResult records to {out} ({curve}; {left_out} not scored, left out)"),
        soft_wrap=True,
    )


def register(import_app: typer.Typer, export_app: typer.Typer) -> None:
    import_app.command("taubench", cls=RefusingCommand)(import_taubench_command)
    export_app.command("taubench", cls=RefusingCommand)(export_taubench_command)
