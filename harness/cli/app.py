"""The ``harness`` command: the root typer app, its global options, and every command group registered on it.

Each command group lives in a module of this package with a ``register(app)`` function; :func:`register_commands`
calls them. The only module of ``harness`` that wires in the other folders (with the rest of this package).
"""

from __future__ import annotations

import logging
import sys
from typing import Annotated

import typer

from harness.cli.errors import CommandLine
from harness.console import TerminalLogHandler, err_console

app = typer.Typer(
    name="harness",
    help="Synthesize stateful tool environments, run agents on them, score final states, publish to the Hub.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

command_line = CommandLine(app, err_console)


@app.callback()
def configure(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log at debug level.")] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Print the traceback of an error.")] = False,
) -> None:
    from harness.redact import RedactingFilter

    command_line.debug = debug
    handler = TerminalLogHandler(console=err_console, show_path=False, rich_tracebacks=False)
    handler.addFilter(RedactingFilter())
    if not verbose:
        handler.addFilter(command_line.repeats)
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING, format="%(message)s", handlers=[handler], force=True
    )
    # Python's warnings would otherwise reach stderr uncleaned (a library's warning may quote outside text).
    logging.captureWarnings(True)
    for noisy in ("LiteLLM", "litellm", "httpx", "httpcore", "urllib3", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING if not verbose else logging.INFO)


def register_commands() -> None:
    """Every command group of ``harness``, in the order ``harness --help`` lists them. A new group is a module
    of this package with a ``register(app)`` function, called here."""
    from harness.cli import (
        doctor,
        export,
        interop,
        leaderboard,
        publish,
        rescore,
        run,
        serve,
        sft,
        synth,
        synth_scenarios,
        train,
    )

    run.register(app)
    doctor.register(app)
    sft.register(app)
    publish.register(app)
    leaderboard.register(app)
    rescore.register(app)
    serve.register(app)
    export.register(interop.export_app)
    interop.register(app)
    train.register(app)
    synth_scenarios.register(synth.synth_app)
    synth.register(app)


register_commands()


def with_default_ray_address(argv: list[str]) -> list[str]:
    """``--ray`` given without an address means a local cluster: typer options always take a value."""
    result = list(argv)
    for index, argument in enumerate(result):
        if argument == "--ray" and (index + 1 == len(result) or result[index + 1].startswith("-")):
            result.insert(index + 1, "local")
    return result


def main() -> None:
    sys.argv[1:] = with_default_ray_address(sys.argv[1:])
    sys.exit(command_line())
