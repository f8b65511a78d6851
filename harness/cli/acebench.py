"""``harness import acebench`` (ACEBench's agent category into a library, after replaying its gold in the jail) and
``harness export acebench`` (a run as ACEBench's result files)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from harness.cli.aio import run_to_end
from harness.cli.errors import RefusingCommand
from harness.cli.options import AllowWeakSandbox, AllowWeakSandboxImport
from harness.console import console, err_console, labelled, outside
from harness.schema import Environment, Scenario


def write_libraries(environments: list[Environment], scenarios: list[Scenario], out: Path) -> None:
    """Write into a sibling folder first, then rename it to ``out``: an interrupted import leaves no half."""
    from harness.library import write_seed_layout

    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        write_seed_layout(environments, scenarios, staging)
        if out.exists():
            out.rmdir()
        staging.replace(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def import_acebench_command(
    source: Annotated[Path, typer.Option(help="An ACEBench checkout (git clone of chenchen0103/ACEBench).")],
    category: Annotated[str, typer.Option(help="multi_turn or multi_step (the agent category).")],
    out: Annotated[Path, typer.Option(help="Folder to write the library to (must not exist, or be empty).")],
    language: Annotated[str, typer.Option(help="en or zh.")] = "en",
    skip_bad_records: Annotated[
        bool, typer.Option("--skip-bad-records", help="Leave out (and list) upstream records that cannot be read.")
    ] = False,
    workers: Annotated[int, typer.Option(help="Sandbox worker processes (default: one per core).")] = 0,
    allow_weak_sandbox: AllowWeakSandboxImport = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
) -> None:
    """Import ACEBench's agent tasks: the scenario classes as tools, one scenario per task with upstream's
    end-to-end and process checks."""
    from harness.benchmarks.acebench.importer import (
        AceBenchImport,
        AceBenchImportError,
        import_acebench,
        read_acebench,
    )
    from harness.benchmarks.acebench.source import AceBenchSource, AceBenchSourceError
    from harness.sandbox.spec import CodeOrigin, JailSpec

    try:
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise AceBenchImportError(f"{out} already exists and is not empty; choose another --out")
        # Everything the import needs is read (and refused when it must be) before the jail starts.
        release = read_acebench(AceBenchSource(source), category, language)

        async def run() -> AceBenchImport:
            jail = JailSpec.for_code(CodeOrigin.SOURCE, allow_weak_sandbox=allow_weak_sandbox, workers=workers)
            async with jail.pool() as pool:
                return await import_acebench(release, pool)

        result = run_to_end(run())
    except (AceBenchSourceError, AceBenchImportError) as exc:
        if debug:
            raise
        err_console.print(labelled("error", "red", exc), soft_wrap=True)
        raise typer.Exit(2) from None
    if result.bad_records and not skip_bad_records:
        for problem in result.bad_records:
            err_console.print(labelled("bad record", "red", problem), soft_wrap=True)
        err_console.print(
            labelled("nothing written:", "red", f"{len(result.bad_records)} bad record(s); --skip-bad-records")
        )
        raise typer.Exit(1)
    for problem in result.bad_records:
        err_console.print(labelled("skipped", "yellow", problem), soft_wrap=True)
    for problem in result.unsolvable:
        err_console.print(labelled("gold does not reach the expected state", "yellow", problem), soft_wrap=True)
    if not result.scenarios:
        err_console.print(labelled("nothing written:", "red", "no task could be imported"))
        raise typer.Exit(1)
    write_libraries(result.environments, result.scenarios, out)
    console.print(
        outside(
            f"ACEBench agent {category} ({language}): {len(result.scenarios)} tasks → {out} "
            f"({len(result.unsolvable)} whose gold does not reach upstream's expected state, "
            f"{len(result.bad_records)} bad records skipped)"
        ),
        soft_wrap=True,
    )


def export_acebench_command(
    run_dir: Annotated[Path, typer.Argument(help="A run folder (of an imported ACEBench library).")],
    out: Annotated[Path, typer.Option("--out", help="Folder to write result_all/… into.")],
    library: Annotated[
        Path | None, typer.Option(help="The library the run read (default: the one its manifest names).")
    ] = None,
    allow_weak_sandbox: AllowWeakSandbox = False,
) -> None:
    """A run as ACEBench's result files (``result_all/result_<lang>/<model>/data_agent_<category>_result.json``)."""
    from harness.benchmarks.acebench.export import AceBenchExportError, export_run
    from harness.errors import BadInput
    from harness.library import load_library
    from harness.metrics import open_run

    try:
        stored = open_run(run_dir)
        records = load_library(library or stored.manifest.dataset.source)

        async def run() -> list[Path]:
            async with records.jail(allow_weak_sandbox=allow_weak_sandbox, workers=1).pool() as pool:
                return [f.path for f in await export_run(stored.results, records, pool, out)]

        written = run_to_end(run())
    except (FileNotFoundError, ValueError, AceBenchExportError) as error:
        raise BadInput(f"cannot export {run_dir}: {error}") from error
    for path in written:
        console.print(outside(f"Wrote {path}"), soft_wrap=True)


def register(import_app: typer.Typer, export_app: typer.Typer) -> None:
    import_app.command("acebench", cls=RefusingCommand)(import_acebench_command)
    export_app.command("acebench", cls=RefusingCommand)(export_acebench_command)
