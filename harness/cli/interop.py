"""``harness import NAME`` and ``harness export NAME``: one command for each installed benchmark that declares an
importer or an export (``harness.registry``), its options built from what the benchmark declares.

An import reads the source (the benchmark's function), prints its notes, writes the library (a new folder, whole
or not at all, unless the benchmark writes into an existing one) and its summary. An export writes the run in the
benchmark's format and prints what it wrote. A source or a run the benchmark refuses is one line with its status.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.table import Table

from harness.cli.aio import run_to_end
from harness.cli.errors import RefusingCommand
from harness.console import console, err_console, labelled, outside
from harness.registry import Benchmark, CliOption, ImportNote, SourceRefused, benchmarks

import_app = typer.Typer(help="Import other projects' releases into our records.", no_args_is_help=True)
export_app = typer.Typer(help="Write runs in other projects' formats.", no_args_is_help=True)

_TYPES: dict[str, Any] = {
    "path": Path,
    "text": str,
    "integer": int,
    "flag": bool,
    "paths": list[Path],
    "texts": list[str],
}


def option_parameter(option: CliOption) -> inspect.Parameter:
    """The typer parameter of one declared option."""
    parsed = _TYPES[option.type]
    if option.argument:
        declared: Any = typer.Argument(help=option.help)
    else:
        names = [option.flag] if option.flag else []
        declared = typer.Option(*names, help=option.help, min=option.minimum)
    if option.required:
        default: Any = inspect.Parameter.empty
    elif option.type in ("paths", "texts") or option.default is None:
        parsed, default = parsed | None, None
    else:
        default = option.default
    return inspect.Parameter(
        option.name, inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[parsed, declared], default=default
    )


def with_options(command: Callable[..., None], options: tuple[CliOption, ...], help_text: str) -> Callable[..., None]:
    command.__signature__ = inspect.Signature([option_parameter(o) for o in options])  # type: ignore[attr-defined]  # read by typer
    command.__doc__ = help_text
    return command


T = TypeVar("T")


def finished(outcome: T | Coroutine[Any, Any, T]) -> T:
    """A benchmark function's result: as returned, or its coroutine run to its end."""
    if isinstance(outcome, Coroutine):
        result: T = run_to_end(outcome)
        return result
    return outcome


def print_note(note: ImportNote) -> None:
    err_console.print(labelled(note.label, "red" if note.severity == "error" else "yellow", note.text), soft_wrap=True)


def refused(error: SourceRefused, debug: bool) -> typer.Exit:
    """A source or a run the benchmark cannot use: its line (with ``--debug``, the error it came from raised)."""
    if debug:
        raise error.__cause__ or error
    err_console.print(labelled("error", "red", error), soft_wrap=True)
    return typer.Exit(error.status)


def import_command(benchmark: Benchmark) -> Callable[..., None]:
    importer = benchmark.importer
    assert importer is not None

    def run(**values: Any) -> None:
        from harness.library import write_new_library

        debug = bool(values.get("debug"))
        out: Path = values[importer.out_option]
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise refused(SourceRefused(f"{out} already exists and is not empty; choose another --out"), debug)
        try:
            result = finished(importer.run(values))
        except SourceRefused as error:
            raise refused(error, debug) from None
        for note in result.notes:
            print_note(note)
        if result.refusal is not None:
            err_console.print(labelled("nothing written:", "red", result.refusal), soft_wrap=True)
            raise typer.Exit(1)
        write_new_library(result.environments, result.scenarios, out)
        if result.table is not None:
            table = Table(title=outside(result.table.title, multiline=False))
            for column in result.table.columns:
                table.add_column(outside(column, multiline=False))
            for row in result.table.rows:
                table.add_row(*(outside(cell, multiline=False) for cell in row))
            console.print(table)
        for line in result.summary:
            console.print(outside(line), soft_wrap=True)
        raise typer.Exit(0 if result.complete else 1)

    return with_options(run, importer.options, importer.help)


def export_command(benchmark: Benchmark) -> Callable[..., None]:
    exporter = benchmark.exporter
    assert exporter is not None

    def run(**values: Any) -> None:
        try:
            result = finished(exporter.run(values))
        except SourceRefused as error:
            raise refused(error, bool(values.get("debug"))) from None
        for line in result.lines:
            console.print(outside(line), soft_wrap=True)
        for note in result.notes:
            print_note(note)
        raise typer.Exit(0 if result.complete else 1)

    return with_options(run, exporter.options, exporter.help)


def register(app: typer.Typer) -> None:
    """Add ``import`` and ``export`` to the ``harness`` command, with one subcommand per benchmark that declares
    one (the project's other exports are added by :mod:`harness.cli.export`)."""
    for benchmark in benchmarks():
        if benchmark.importer is not None:
            import_app.command(benchmark.name, cls=RefusingCommand)(import_command(benchmark))
        if benchmark.exporter is not None:
            export_app.command(benchmark.name, cls=RefusingCommand)(export_command(benchmark))
    app.add_typer(import_app, name="import")
    app.add_typer(export_app, name="export")
