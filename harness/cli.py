"""The ``harness`` command line. The only module of ``harness`` that wires in the other folders."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import Annotated

import orjson
import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.table import Table

app = typer.Typer(
    name="harness",
    help="Synthesize stateful tool environments, run agents on them, score final states, publish to the Hub.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
import_app = typer.Typer(help="Import other projects' releases into our records.", no_args_is_help=True)
app.add_typer(import_app, name="import")

console = Console()
err_console = Console(stderr=True)


@app.callback()
def _configure(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log at debug level.")] = False,
) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(message)s",
        handlers=[RichHandler(console=err_console, show_path=False, rich_tracebacks=False)],
    )
    for noisy in ("LiteLLM", "litellm", "httpx", "httpcore", "urllib3", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING if not verbose else logging.INFO)


@app.command()
def validate(
    path: Annotated[str, typer.Argument(help="A folder of environments and scenarios, or a Hub dataset id.")] = "",
    json_output: Annotated[bool, typer.Option("--json", help="Print a JSON report instead of a table.")] = False,
    workers: Annotated[int, typer.Option(help="Sandbox worker processes (default: one per core).")] = 0,
    show_all: Annotated[bool, typer.Option("--all", help="List valid records too.")] = False,
) -> None:
    """Check that environments load and that scenarios are sound (solvable, not solved at reset)."""
    from harness.library import load_library
    from harness.sandbox import SandboxPool
    from harness.validate import validate_library

    library = load_library(path or None)

    async def run() -> object:
        async with SandboxPool(workers=workers or None) as pool:
            return await validate_library(library, pool)

    from harness.validate import ValidationReport

    report = asyncio.run(run())
    assert isinstance(report, ValidationReport)
    if json_output:
        payload = {
            "source": report.source,
            "ok": report.ok,
            "records": [{**r.model_dump(mode="json"), "ok": r.ok} for r in report.records],
        }
        sys.stdout.write(orjson.dumps(payload, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        table = Table(title=f"Validation of {report.source}")
        for column in ("kind", "id", "status", "problems / warnings"):
            table.add_column(column, overflow="fold")
        for record in report.records:
            if record.ok and not show_all and not record.warnings:
                continue
            status = "[green]ok[/green]" if record.ok else "[red]invalid[/red]"
            notes = "\n".join([*record.problems, *(f"[yellow]{w}[/yellow]" for w in record.warnings)])
            table.add_row(record.kind, record.id, status, notes)
        environments = sum(r.kind == "environment" for r in report.records)
        scenarios = sum(r.kind == "scenario" for r in report.records)
        if table.row_count:
            console.print(table)
        console.print(
            f"{environments} environments, {scenarios} scenarios: "
            + ("[green]all valid[/green]" if report.ok else f"[red]{len(report.invalid)} invalid[/red]")
        )
    raise typer.Exit(0 if report.ok else 1)


@import_app.command("envscaler")
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
    console.print(f"Imported {len(report.environments)} environments and {len(report.scenarios)} scenarios into {out}")
    for problem in report.problems:
        err_console.print(f"[yellow]skipped[/yellow] {problem}")
    raise typer.Exit(0 if report.environments or report.scenarios else 1)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
