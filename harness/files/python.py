"""Python files of a source, read as text and parsed, never run: the parse refused in one line whatever the text.

``ast.parse`` of hostile text can fail in more ways than a syntax error: a million unary minus signs exhaust the
parser's memory, a million chained attributes its recursion. Each is a refusal naming the file, not a crash."""

from __future__ import annotations

import ast
import re

from harness.files.budget import UnsafeFile

_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


def parse_python(text: str, where: str) -> ast.Module:
    """The module ``text`` holds (``where`` names its file in the error)."""
    try:
        return ast.parse(text)
    except SyntaxError as exc:
        raise UnsafeFile(f"{where} does not parse: {exc.msg} (line {exc.lineno})") from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise UnsafeFile(f"{where} does not parse: {type(exc).__name__} {exc}".rstrip()) from None


def require_module_name(name: str, named_by: str) -> str:
    """``name`` if it is a dotted Python module name (``pkg.module``): what a source names as a module to read
    can then only be a file inside the source. ``named_by`` says what named it."""
    if not isinstance(name, str) or not _MODULE_NAME.fullmatch(name):
        raise UnsafeFile(f"{named_by} names the module {str(name)[:80]!r}, which is not a dotted module name")
    return name


def module_file(name: str, named_by: str) -> str:
    """The relative file of dotted module ``name`` (``pkg/module.py``), once it is checked to be one."""
    return require_module_name(name, named_by).replace(".", "/") + ".py"


def literal_message_contents(statements: list[ast.stmt], role: str) -> list[str]:
    """The ``content`` of every ``{"role": <role>, "content": "<text>"}`` dict literal in ``statements`` (how a
    benchmark's code writes a fixed chat message), in source order."""
    found: list[str] = []
    for statement in statements:
        for node in ast.walk(statement):
            if not isinstance(node, ast.Dict):
                continue
            fields = {
                key.value: value
                for key, value in zip(node.keys, node.values, strict=True)
                if isinstance(key, ast.Constant) and isinstance(key.value, str)
            }
            said, content = fields.get("role"), fields.get("content")
            if (
                isinstance(said, ast.Constant)
                and said.value == role
                and isinstance(content, ast.Constant)
                and isinstance(content.value, str)
            ):
                found.append(content.value)
    return found
