"""A lint on model-written code, run on the AST before anything executes.

It gives honest mistakes a clear message before a process is forked (a forbidden import, ``open``, dunder
access). It is not the security boundary: the kernel confinement in ``harness.sandbox.confine`` is. It never
raises on hostile input: huge, deeply nested or oddly encoded sources come back as problems.
"""

from __future__ import annotations

import ast
import re
from collections import deque
from collections.abc import Iterable, Iterator

from harness.sandbox.policy import ALLOWED_MODULES, FORBIDDEN_NAMES, importable_roots, is_forbidden_attribute

_FORMAT_ATTRIBUTE_ESCAPE = re.compile(r"\{[^{}]*\.(__\w+__|gi_frame|f_globals|f_back|tb_frame)")
_REFLECTION_CALLS = {"getattr", "setattr", "delattr", "hasattr"}


MAX_SOURCE_CHARS = 1_000_000
"""Longer sources are refused before parsing (the seed library's largest class is about 20,000)."""


class UnparsableCode(ValueError):
    """Code that cannot be parsed safely: too large, too deep, not text, or not Python."""


def parse_untrusted(code: str) -> ast.Module:
    """Parse code that may be hostile; every failure is an UnparsableCode with a one-line reason."""
    if not isinstance(code, str):
        raise UnparsableCode(f"the code is a {type(code).__name__}, not text")
    if len(code) > MAX_SOURCE_CHARS:
        raise UnparsableCode(f"the code is {len(code):,} characters long; the limit is {MAX_SOURCE_CHARS:,}")
    if "\x00" in code:
        raise UnparsableCode("the code contains a NUL character")
    try:
        return ast.parse(code)
    except SyntaxError as exc:
        raise UnparsableCode(f"line {exc.lineno}: syntax error: {exc.msg}") from exc
    except (RecursionError, MemoryError) as exc:
        raise UnparsableCode("the code nests too deeply to parse") from exc
    except (UnicodeError, ValueError) as exc:
        raise UnparsableCode(f"the code is not valid text: {exc}") from exc


class StaticCheckError(ValueError):
    """Code that must not run. ``problems`` lists every finding with its line number."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("; ".join(problems))


def find_problems(code: str, jail_modules: Iterable[str] = ()) -> list[str]:
    """Every reason this code may not run in the sandbox (empty when it passes); ``jail_modules`` are the
    third-party modules it may import besides the standard ones."""
    try:
        tree = parse_untrusted(code)
    except UnparsableCode as exc:
        return [str(exc)]
    problems: list[str] = []
    allowed = importable_roots(jail_modules) if jail_modules else ALLOWED_MODULES
    try:
        _collect_problems(tree, problems, allowed)
    except (RecursionError, MemoryError):
        problems.append("the code nests too deeply to check")
    return problems


def _collect_problems(tree: ast.Module, problems: list[str], allowed: frozenset[str]) -> None:
    for node in _nodes(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] not in allowed:
                    problems.append(f"line {_line(node)}: import of {alias.name!r} is not allowed")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                problems.append(f"line {_line(node)}: relative imports are not allowed")
            elif (node.module or "").split(".")[0] not in allowed:
                problems.append(f"line {_line(node)}: import from {node.module!r} is not allowed")
        elif isinstance(node, ast.Name):
            if node.id in FORBIDDEN_NAMES:
                problems.append(f"line {_line(node)}: use of {node.id!r} is not allowed")
        elif isinstance(node, ast.Attribute):
            if is_forbidden_attribute(node.attr):
                problems.append(f"line {_line(node)}: access to attribute {node.attr!r} is not allowed")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _REFLECTION_CALLS:
            name = node.args[1] if len(node.args) >= 2 else None
            if isinstance(name, ast.Constant) and isinstance(name.value, str) and is_forbidden_attribute(name.value):
                problems.append(f"line {_line(node)}: {node.func.id}() of {name.value!r} is not allowed")
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and _FORMAT_ATTRIBUTE_ESCAPE.search(node.value)
        ):
            problems.append(f"line {_line(node)}: format strings may not reach private attributes")


def _nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node, in ``ast.walk``'s order, without its generator per node (the lint runs on every check's code
    at each run's start)."""
    todo = deque([tree])
    take, add, node_type = todo.popleft, todo.append, ast.AST
    while todo:
        node = take()
        for field in node._fields:
            value = getattr(node, field, None)
            if isinstance(value, node_type):
                add(value)
            elif type(value) is list:
                for item in value:
                    if isinstance(item, node_type):
                        add(item)
        yield node


def _line(node: ast.AST) -> object:
    return getattr(node, "lineno", "?")


def check_code(code: str, jail_modules: Iterable[str] = ()) -> None:
    """Raise StaticCheckError when the code may not run."""
    problems = find_problems(code, jail_modules)
    if problems:
        raise StaticCheckError(problems)
