"""The one output layer of the command line: the consoles every command prints through, and the cleaning of
text from outside the project before a terminal sees it.

Text that came from an environment, a library, a model, a Hub card or an import may hold terminal escape
sequences (a window title, the clipboard through OSC 52, cursor movement) and Rich markup (``[bold]``, an
unbalanced ``[/x]`` that makes Rich raise). :func:`terminal_text` removes the sequences whole and every other
control character; :func:`markup_text` also escapes the markup, for outside text placed inside a markup string;
:func:`outside` wraps it in a ``Text`` that is never parsed as markup. The consoles clean every string and every
rendered segment once more, so a command that forgets a helper still cannot write a control character to the
terminal, and a printed string whose markup does not parse is shown as written instead of raising. Files and
JSON written to disk keep the exact text: only the terminal is cleaned.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Iterable
from typing import Any

from rich.console import (
    Console,
    ConsoleDimensions,
    ConsoleOptions,
    ConsoleRenderable,
    HighlighterType,
    JustifyMethod,
    OverflowMethod,
    RenderableType,
)
from rich.errors import MarkupError
from rich.logging import RichHandler
from rich.markup import escape
from rich.segment import Segment
from rich.style import Style
from rich.text import Text

PIPED_WIDTH = 160
"""Columns of a console that does not write to a terminal (CI logs, files) unless COLUMNS says otherwise, so the
tables' columns stay readable."""

# A terminal string (OSC, DCS, SOS, PM, APC, 7-bit or 8-bit introducer) runs to BEL or ST, or to the next ESC
# (which ends it on a terminal too); an unterminated one would swallow what follows, so it goes to the end.
_STRING_SEQUENCE = r"(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c|(?=\x1b)|$)"
_CSI_SEQUENCE = r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
_OTHER_ESCAPE = r"\x1b[ -/]*[0-~]?"
_SEQUENCES = re.compile(f"{_STRING_SEQUENCE}|{_CSI_SEQUENCE}|{_OTHER_ESCAPE}")
_CONTROL_KEEPING_LINES = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_LINE_BREAKS = re.compile(r"\r\n|[\n\t\r\x0b\x0c]")


def terminal_text(value: object, *, multiline: bool = True, limit: int | None = None) -> str:
    """``value`` as text safe to write to a terminal: escape sequences removed whole, every other C0 and C1
    control character removed; newlines and tabs are kept when ``multiline``, else each line break becomes a
    space. ``limit`` cuts the result to that many characters and says how many more there were."""
    text = "" if value is None else str(value)
    if not multiline:
        text = _LINE_BREAKS.sub(" ", text)
    elif "\r" in text:
        text = text.replace("\r\n", "\n")
    text = _SEQUENCES.sub("", text)
    text = (_CONTROL_KEEPING_LINES if multiline else _CONTROL).sub("", text)
    if limit is not None and len(text) > limit:
        text = text[:limit] + f" … ({len(text) - limit} more characters)"
    return text


def markup_text(value: object, *, multiline: bool = True, limit: int | None = None) -> str:
    """Outside text to place inside a Rich markup string: cleaned as by :func:`terminal_text`, its markup
    escaped so that it shows literally."""
    return escape(terminal_text(value, multiline=multiline, limit=limit))


def outside(value: object, style: str | Style = "", *, multiline: bool = True, limit: int | None = None) -> Text:
    """Outside text as a ``Text`` in ``style``: cleaned, and never parsed as markup."""
    return Text(terminal_text(value, multiline=multiline, limit=limit), style=style)


class TerminalConsole(Console):
    """A console that cleans what it writes: every string before its markup is parsed (a string whose markup
    does not parse is shown literally rather than raising), and every rendered segment, whatever built it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rendering = threading.local()  # per thread: a live progress bar renders from a thread of its own

    def render_str(
        self,
        text: str,
        *,
        style: str | Style = "",
        justify: JustifyMethod | None = None,
        overflow: OverflowMethod | None = None,
        emoji: bool | None = None,
        markup: bool | None = None,
        highlight: bool | None = None,
        highlighter: HighlighterType | None = None,
    ) -> Text:
        cleaned = terminal_text(text)
        options: dict[str, Any] = {
            "style": style,
            "justify": justify,
            "overflow": overflow,
            "emoji": emoji,
            "highlight": highlight,
            "highlighter": highlighter,
        }
        try:
            return super().render_str(cleaned, markup=markup, **options)
        except MarkupError:
            return super().render_str(cleaned, markup=False, **options)

    @property
    def size(self) -> ConsoleDimensions:
        dimensions = super().size
        if self._width is None and not self.is_terminal and not os.environ.get("COLUMNS"):
            return ConsoleDimensions(PIPED_WIDTH, dimensions.height)
        return dimensions

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self._width, self._height = new_size

    def render(self, renderable: RenderableType, options: ConsoleOptions | None = None) -> Iterable[Segment]:
        # Nested renders (a table's cells) pass through the outermost one, which cleans their segments once.
        if getattr(self.rendering, "active", False):
            yield from super().render(renderable, options)
            return
        self.rendering.active = True
        try:
            for segment in super().render(renderable, options):
                if segment.control is None and _CONTROL_KEEPING_LINES.search(segment.text):
                    yield Segment(terminal_text(segment.text), segment.style)
                else:
                    yield segment
        finally:
            self.rendering.active = False


def make_console(*, stderr: bool = False) -> TerminalConsole:
    """A console on stdout (or stderr) as wide as the terminal; when it writes to a pipe or a file, as wide as
    COLUMNS says or else ``PIPED_WIDTH``."""
    return TerminalConsole(stderr=stderr)


class TerminalLogHandler(RichHandler):
    """Log lines on a console, their messages cleaned (a message may quote an environment's error)."""

    def render_message(self, record: logging.LogRecord, message: str) -> ConsoleRenderable:
        return super().render_message(record, terminal_text(message))


def labelled(label: str, style: str | Style, message: object, *, multiline: bool = True) -> Text:
    """A line of the project's ``label`` in ``style`` followed by outside text (an error, a skipped record)."""
    return Text.assemble((label, style), " ", outside(message, multiline=multiline))


console = make_console()
"""What a command prints as its result."""
err_console = make_console(stderr=True)
"""Errors, warnings, logs and progress notes."""
