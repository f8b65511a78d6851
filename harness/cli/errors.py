"""How the command line ends: one line per problem, honest exit statuses, a traceback only with ``--debug``.

Every command refuses input one way: it raises :class:`harness.errors.BadInput` (or lets a pydantic
``ValidationError`` or a missing file escape). :class:`RefusingCommand`, the class every command of ``harness`` is
registered with, turns that into :class:`Refused`, a click error with status 2 (so that typer's test runner sees
the same refusal); :class:`CommandLine` prints its lines through the console layer, with the traceback under
``--debug``.

Exit statuses: 0 everything asked was done; 1 an infrastructure failure (an endpoint that does not answer,
episodes ended in infrastructure errors, an unexpected error); 2 bad input (nothing was done); 3 ``--cost-limit``
stopped the work before everything asked was done; 130 and 143 a run stopped by SIGINT or SIGTERM after a clean
stop.
"""

from __future__ import annotations

import logging
import re
import signal
import traceback
from collections.abc import Callable
from typing import Any

import typer
from pydantic import ValidationError
from rich.console import Console
from typer._click import exceptions as click_errors
from typer.core import TyperCommand

from harness.console import markup_text
from harness.errors import BadInput, Unavailable
from harness.redact import redact

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_COST_LIMIT = 3


def exit_status_for_signal(number: int) -> int:
    return 128 + number


EXIT_SIGINT = exit_status_for_signal(signal.SIGINT)
EXIT_SIGTERM = exit_status_for_signal(signal.SIGTERM)

_FILE_ERRORS = (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError, FileExistsError)
_NUMBERS = re.compile(r"\b\d+(\.\d+)?\b|\b[0-9a-f]{12,}\b")


def _flag(location: tuple[Any, ...], flags: dict[str, str]) -> str:
    parts = [str(part) for part in location]
    if not parts:
        return "input"
    head = flags.get(parts[0]) or "--" + parts[0].replace("_", "-")
    return head + "".join(f"[{p}]" for p in parts[1:])


def validation_lines(error: ValidationError, flags: dict[str, str] | None = None) -> list[str]:
    """A pydantic error as one line per field, named like the command-line flag (``flags`` maps a field to
    the flag that sets it when their names differ)."""
    lines = []
    for item in error.errors():
        message = item["msg"][0].lower() + item["msg"][1:] if item["msg"] else "invalid"
        lines.append(f"{_flag(tuple(item['loc']), flags or {})}: {message} (got {item.get('input')!r})")
    return lines


def error_lines(error: BaseException) -> tuple[list[str], int]:
    """What to print for ``error`` (one line per problem) and the exit status."""
    if isinstance(error, BadInput):
        return error.problems, EXIT_BAD_INPUT
    if isinstance(error, ValidationError):
        return validation_lines(error), EXIT_BAD_INPUT
    if isinstance(error, _FILE_ERRORS):
        name = error.filename if error.filename is not None else ""
        reason = error.strerror or type(error).__name__
        return [f"{name}: {reason.lower()}" if name else str(error)], EXIT_BAD_INPUT
    from harness.sandbox.errors import SandboxError

    if isinstance(error, Unavailable | SandboxError):
        return str(error).splitlines() or [type(error).__name__], EXIT_FAILED
    text = " ".join(str(error).split()) or "(no message)"
    return [f"unexpected {type(error).__name__}: {text} (--debug prints the traceback)"], EXIT_FAILED


class Refused(click_errors.ClickException):
    """Bad input a command refused: its lines, status 2."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class Interrupted(click_errors.ClickException):
    """Ctrl-C outside a run's own clean stop (while models are probed, a library loads): status 130."""

    exit_code = EXIT_SIGINT

    def __init__(self) -> None:
        super().__init__(_stopped_line("SIGINT"))


class RefusingCommand(TyperCommand):
    """A command whose bad input (see :func:`error_lines`) ends as :class:`Refused`, and whose Ctrl-C ends as
    :class:`Interrupted` (typer would turn it into a silent status 130), whatever runs it."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise Interrupted() from None
        except Exception as error:
            lines, status = error_lines(error)
            if status != EXIT_BAD_INPUT:
                raise
            raise Refused(lines) from error


class RepeatFilter(logging.Filter):
    """Lets the first of each kind of message through and counts the rest (kinds differ in more than numbers
    and ids), so an error that strikes every episode is printed once, with a count at the end."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: dict[str, int] = {}
        self.first: dict[str, str] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: let logging report it as it would
            return True
        kind = _NUMBERS.sub("#", message)
        self.counts[kind] = self.counts.get(kind, 0) + 1
        if self.counts[kind] == 1:
            self.first[kind] = message.splitlines()[0] if message else ""
            return True
        return False

    def repeats(self) -> list[tuple[str, int]]:
        """(first message, times it was not printed again) for every message that repeated."""
        return [(self.first[kind], count - 1) for kind, count in self.counts.items() if count > 1]


class Terminated(SystemExit):
    """SIGTERM outside a run's own clean stop (which handles it itself). A SystemExit because that is what gets
    out of wherever the signal lands: asyncio logs and swallows any other exception raised in one of its
    callbacks, and typer turns a KeyboardInterrupt into a silent status 130."""

    def __init__(self) -> None:
        super().__init__(EXIT_SIGTERM)


def _raise_terminated(number: int, frame: object) -> None:
    raise Terminated


def _stopped_line(signal_name: str) -> str:
    return (
        f"stopped by {signal_name} before the command finished: what was already written is kept "
        "(a run folder resumes with --resume --out RUN_DIR)"
    )


class CommandLine:
    """Runs the click/typer app and turns everything that escapes it into lines and an exit status."""

    def __init__(self, app: Callable[..., Any], err_console: Console) -> None:
        self.app = app
        self.err_console = err_console
        self.debug = False
        self.repeats = RepeatFilter()

    def fail(self, lines: list[str]) -> None:
        for line in lines:
            self.err_console.print(f"[red]error:[/red] {markup_text(redact(line))}", soft_wrap=True, highlight=False)

    def print_traceback(self, error: BaseException) -> None:
        """With ``--debug``: the traceback of ``error`` and of the error it was raised from."""
        if self.debug:
            self.err_console.print(redact("".join(traceback.format_exception(error))), markup=False, highlight=False)

    def report_repeats(self) -> None:
        for message, count in self.repeats.repeats():
            shown = markup_text(redact(message), multiline=False)
            self.err_console.print(
                f"[yellow]({count} more like this were not printed: {shown})[/yellow]",
                soft_wrap=True,
                highlight=False,
            )

    def __call__(self, args: list[str] | None = None) -> int:
        previous = signal.signal(signal.SIGTERM, _raise_terminated)
        try:
            result = self.app(args=args, standalone_mode=False)
            return result if isinstance(result, int) else EXIT_OK
        except click_errors.NoArgsIsHelpError as error:
            typer.echo(error.ctx.get_help() if error.ctx is not None else str(error))
            return EXIT_OK
        except Interrupted as error:
            self.err_console.print(f"[yellow]{markup_text(error.message)}[/yellow]")
            return EXIT_SIGINT
        except Refused as error:
            self.print_traceback(error)
            self.fail(error.problems)
            return EXIT_BAD_INPUT
        except click_errors.UsageError as error:
            command = error.ctx.command_path if error.ctx is not None else "harness"
            self.fail([f"{error.format_message()} (see {command} --help)"])
            return EXIT_BAD_INPUT
        except click_errors.ClickException as error:
            self.fail([error.format_message()])
            return error.exit_code
        except typer.Exit as error:
            return error.exit_code
        except (typer.Abort, KeyboardInterrupt):
            self.err_console.print(f"[yellow]{_stopped_line('SIGINT')}[/yellow]")
            return EXIT_SIGINT
        except Terminated:
            self.err_console.print(f"[yellow]{_stopped_line('SIGTERM')}[/yellow]")
            return EXIT_SIGTERM
        except Exception as error:
            self.print_traceback(error)
            lines, status = error_lines(error)
            self.fail(lines)
            return status
        finally:
            signal.signal(signal.SIGTERM, previous)
            self.report_repeats()
