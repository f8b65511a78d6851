"""``harness import envscaler|bfcl`` and ``harness export bfcl``: other projects' formats in and out."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from harness.cli.aio import run_to_end
from harness.cli.errors import RefusingCommand
from harness.cli.options import AllowWeakSandboxImport
from harness.console import console, err_console, labelled, markup_text, outside

import_app = typer.Typer(help="Import other projects' releases into our records.", no_args_is_help=True)
export_app = typer.Typer(help="Write runs in other projects' formats.", no_args_is_help=True)


def import_envscaler_command(
    environments: Annotated[Path, typer.Option(help="EnvScaler environments file (JSON list or dict by env_id).")],
    out: Annotated[Path, typer.Option(help="Folder to write our records to.")],
    scenarios: Annotated[list[Path] | None, typer.Option(help="Scenario files (RL or SFT); repeatable.")] = None,
) -> None:
    """Import EnvScaler's released environments and scenarios."""
    from harness.importers import import_envscaler
    from harness.library import write_seed_layout

    report = import_envscaler(environments, list(scenarios or []))
    write_seed_layout(report.environments, report.scenarios, out)
    console.print(
        f"Imported {len(report.environments)} environments and {len(report.scenarios)} scenarios into {out}",
        markup=False,
        highlight=False,
    )
    for problem in report.problems:
        err_console.print(labelled("skipped", "yellow", problem), soft_wrap=True)
    raise typer.Exit(0 if report.environments or report.scenarios else 1)


def import_bfcl_command(
    source: Annotated[Path, typer.Option(help="The bfcl-eval wheel (pip download bfcl-eval --no-deps) or its folder.")],
    out: Annotated[Path, typer.Option(help="Folder to write the library to (must not exist, or be empty).")],
    category: Annotated[
        list[str] | None,
        typer.Option(
            help="multi_turn_base, multi_turn_miss_func, multi_turn_miss_param, multi_turn_long_context or all; "
            "repeatable."
        ),
    ] = None,
    verify: Annotated[
        bool, typer.Option(help="Load every class and replay every ground truth in the sandbox first.")
    ] = True,
    workers: Annotated[int, typer.Option(help="Sandbox worker processes for --verify (default: one per core).")] = 0,
    allow_weak_sandbox: AllowWeakSandboxImport = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
) -> None:
    """Import BFCL's multi-turn categories: environments, scenarios with scripted turns, ground truth per turn."""
    from harness.archives import ArchiveRefused
    from harness.importers.bfcl import BfclImportError, import_bfcl, verify_import, write_import
    from harness.importers.bfcl_source import BfclSourceError
    from harness.sandbox.spec import CodeOrigin, JailSpec

    started = time.perf_counter()
    try:
        result = import_bfcl(source, category or ["all"])
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise BfclImportError(f"{out} already exists and is not empty; choose another --out")
        unavailable: dict[str, list[str]] = {}
        if verify:

            async def check() -> tuple[list[str], dict[str, list[str]]]:
                jail = JailSpec.for_code(CodeOrigin.SOURCE, allow_weak_sandbox=allow_weak_sandbox, workers=workers)
                async with jail.pool() as pool:
                    verification = await verify_import(result, pool)
                return verification.problems, verification.unavailable

            problems, unavailable = run_to_end(check())
            if problems:
                for problem in problems:
                    err_console.print(labelled("error", "red", problem), soft_wrap=True)
                err_console.print(
                    labelled("nothing written:", "red", f"{len(problems)} problem(s) in {source}"), soft_wrap=True
                )
                raise typer.Exit(1)
        write_import(result, out)
    except ArchiveRefused:  # bad input: the command is refused (status 2)
        raise
    except (BfclSourceError, BfclImportError, OSError) as exc:
        if debug:
            raise
        err_console.print(labelled("error", "red", exc), soft_wrap=True)
        raise typer.Exit(1) from None
    table = Table(title=outside(f"BFCL {result.version} → {out}", multiline=False))
    table.add_column("category")
    table.add_column("entries", justify="right")
    for name, count in result.counts.items():
        table.add_row(outside(name, multiline=False), str(count))
    table.add_row("environments", str(len(result.environments)))
    console.print(table)
    for env_id, modules in sorted(unavailable.items()):
        scenarios = sum(1 for s in result.scenarios if s.environment_id == env_id)
        err_console.print(
            f"[yellow]warning[/yellow] {markup_text(env_id)} imports {markup_text(', '.join(modules))}, "
            "which this sandbox does not allow: "
            f"its {scenarios} scenarios will fail to load until it does (install the 'bfcl' extra)",
            soft_wrap=True,
        )
    console.print(f"Imported in {time.perf_counter() - started:.1f} s")


def export_bfcl_command(
    run_dir: Annotated[Path, typer.Argument(help="A run folder of BFCL scenarios.")],
    out: Annotated[
        Path, typer.Option(help="A .json file (one category) or a folder (BFCL_v4_<category>_result.json files).")
    ],
    envs: Annotated[str | None, typer.Option(help="The library the run used (default: the run's manifest).")] = None,
    trial: Annotated[int, typer.Option(help="Which trial to export (BFCL scores one response per entry).")] = 0,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
) -> None:
    """Write a run in BFCL's result-file format, for `bfcl evaluate`."""
    from harness.bfcl.export import export_run
    from harness.errors import BadInput
    from harness.library import LibraryError, load_library
    from harness.metrics import open_run

    try:
        run = open_run(run_dir)
    except (FileNotFoundError, ValueError) as exc:  # a run folder refused as it is: status 2
        raise BadInput(f"cannot export {run_dir}: {exc}") from exc
    try:
        library = load_library(envs or run.manifest.dataset.source)
        report = export_run(run.results, library, out, trial=trial)
    except BadInput:  # an --out or a library refused as given: status 2
        raise
    except (ValueError, LibraryError, OSError) as exc:
        if debug:
            raise
        err_console.print(labelled("error", "red", exc), soft_wrap=True)
        raise typer.Exit(1) from None
    for category, path in report.files.items():
        console.print(f"{category}: {report.entries[category]} entries → {path}", markup=False)
    for line in report.skipped:
        err_console.print(labelled("skipped", "yellow", line), soft_wrap=True)
    if not report.files:
        err_console.print("[red]error[/red] the run holds no BFCL episodes", soft_wrap=True)
    raise typer.Exit(0 if report.files and not report.skipped else 1)


def register(app: typer.Typer) -> None:
    """Add ``import`` (envscaler, bfcl) and ``export`` (bfcl) to the ``harness`` command."""
    import_app.command("envscaler", cls=RefusingCommand)(import_envscaler_command)
    import_app.command("bfcl", cls=RefusingCommand)(import_bfcl_command)
    export_app.command("bfcl", cls=RefusingCommand)(export_bfcl_command)
    app.add_typer(import_app, name="import")
    app.add_typer(export_app, name="export")
