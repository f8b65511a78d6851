"""ACEBench's calls written as text, ``[ApiName(key='value', other=2), ...]``, read as its agent category reads
them (``decode_function_list``, ``ast_parse``, ``resolve_ast_by_type`` in ``model_inference/multi_turn/
APIModel_agent.py``, ``execution_role.py`` and ``multi_step/execution_role_step.py``), with :mod:`ast` only: nothing
the model writes is evaluated.

Upstream's reading: one leading space is dropped, a ``[`` and a ``]`` are added when missing, then every ``[``,
``]`` and ``'`` at either end is stripped and the rest parsed as one Python expression: a call, or a tuple or list
whose elements are calls (multi_turn skips elements that are not calls, multi_step refuses the whole text; any
other expression is no call at all). Only keyword arguments are read (positional ones are dropped); a value is a
literal, a list, a tuple, a dict, a name (its own text), a call without keywords or a subscript (their source
text), or a negated number (upstream negates the operand whatever the unary operator). Arithmetic on literals is
computed, as upstream's ``eval`` of it would; a lambda, an f-string, a comparison or anything else does not read.
Values cross to the jail as JSON: a tuple arrives as a list, and a value JSON cannot carry (bytes, a complex
number, a dict key that is not a string, a number that is not finite) does not read. A call with keyword arguments
used as a value is taken as its source text (upstream would call it with ``eval``).
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.schema import ToolCall

_ROUTED = re.compile(r"\[.*\]")
_ARITHMETIC: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_MAX_EXPONENT = 64
_MAX_TEXT = 100_000


class UnreadableCalls(ValueError):
    """Text that upstream's reader would fail on."""


@dataclass
class ParsedCalls:
    """The calls read from one agent message; ``error`` says why the text did not read (then ``calls`` is empty).
    A text that reads as an expression without calls (``[1]``) has no calls and no error."""

    calls: list[ToolCall] = field(default_factory=list)
    error: str | None = None


EXECUTION = "execution"
"""The name of the messages upstream's execution role sends that are not tool results."""
NOT_CALLS_REPLY = "Please do not ask me any questions, use the known conditions to solve the problem"
"""What multi_step's execution role answers to an agent message that does not read as calls (upstream's wording,
``execution_role_step.py``)."""


def has_call_brackets(text: str) -> bool:
    """multi_turn's first test: a message without ``[...]`` on one line goes to the user (``APIAgent_turn.respond``;
    one with them goes to execution only when it reads as calls)."""
    return _ROUTED.search(text) is not None


def parse_calls(text: str, *, skip_non_calls: bool) -> ParsedCalls:
    """The calls of ``text`` as upstream reads them; ``skip_non_calls``: multi_turn's reader (elements of the list
    that are not calls are left out), else multi_step's (they make the text unreadable)."""
    try:
        return ParsedCalls(calls=_read(text, skip_non_calls))
    except UnreadableCalls as exc:
        return ParsedCalls(error=str(exc))


def _read(text: str, skip_non_calls: bool) -> list[ToolCall]:
    if not text:
        raise UnreadableCalls("the message is empty")
    if len(text) > _MAX_TEXT:
        raise UnreadableCalls(f"the message is longer than {_MAX_TEXT} characters")
    if text[0] == " ":
        text = text[1:]
    if not text.startswith("["):
        text = "[" + text
    if not text.endswith("]"):
        text = text + "]"
    cleaned = text.strip("[]'")
    try:
        body = ast.parse(cleaned, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        detail = exc.msg if isinstance(exc, SyntaxError) else type(exc).__name__
        raise UnreadableCalls(f"not a Python expression ({detail}): {cleaned[:80]!r}") from None
    if isinstance(body, ast.Call):
        return [_call(body)]
    if not isinstance(body, ast.Tuple | ast.List):
        return []
    calls = []
    for element in body.elts:
        if isinstance(element, ast.Call):
            calls.append(_call(element))
        elif not skip_non_calls:
            raise UnreadableCalls(f"an element is not a function call: {ast.unparse(element)[:80]!r}")
    return calls


def _call(node: ast.Call) -> ToolCall:
    parts = []
    function: ast.expr = node.func
    while isinstance(function, ast.Attribute):
        parts.append(function.attr)
        function = function.value
    if isinstance(function, ast.Name):
        parts.append(function.id)
    arguments: dict[str, Any] = {}
    for keyword in node.keywords:
        if keyword.arg is None:
            raise UnreadableCalls(f"unpacks arguments: {ast.unparse(node)[:80]!r}")
        arguments[keyword.arg] = _value(keyword.value)
    return ToolCall(id="", name=".".join(reversed(parts)), arguments=arguments)


def _value(node: ast.expr) -> Any:
    if isinstance(node, ast.Constant):
        if node.value is Ellipsis:
            return "..."
        if isinstance(node.value, bytes | complex):
            raise UnreadableCalls(f"a value JSON cannot carry: {ast.unparse(node)[:80]!r}")
        return _finite(node.value, node)
    if isinstance(node, ast.UnaryOp):
        operand = node.operand
        if isinstance(operand, ast.Constant) and isinstance(operand.value, int | float):
            return -operand.value
        raise UnreadableCalls(f"a unary operator on something else than a number: {ast.unparse(node)[:80]!r}")
    if isinstance(node, ast.List | ast.Tuple):
        return [_value(element) for element in node.elts]
    if isinstance(node, ast.Dict):
        value = {}
        for key_node, item in zip(node.keys, node.values, strict=True):
            if key_node is None:
                raise UnreadableCalls(f"a dict unpacks another: {ast.unparse(node)[:80]!r}")
            key = _value(key_node)
            if not isinstance(key, str):
                raise UnreadableCalls(f"a dict key that is not a string: {ast.unparse(key_node)[:80]!r}")
            value[key] = _value(item)
        return value
    if isinstance(node, ast.BinOp):
        return _finite(_arithmetic(node), node)
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Call):
        return ast.unparse(node)
    if isinstance(node, ast.Subscript):
        return ast.unparse(node.value) + "[" + ast.unparse(node.slice) + "]"
    raise UnreadableCalls(f"unsupported value {type(node).__name__}: {ast.unparse(node)[:80]!r}")


def _arithmetic(node: ast.expr) -> Any:
    """A literal expression's value, computed without eval: numbers (and strings for ``+``) only."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float | str):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        operand = _arithmetic(node.operand)
        if isinstance(operand, int | float):
            return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        left, right = _arithmetic(node.left), _arithmetic(node.right)
        numbers = isinstance(left, int | float) and isinstance(right, int | float)
        texts = isinstance(left, str) and isinstance(right, str) and isinstance(node.op, ast.Add)
        if isinstance(node.op, ast.Pow) and numbers and abs(right) > _MAX_EXPONENT:
            raise UnreadableCalls(f"an exponent above {_MAX_EXPONENT}: {ast.unparse(node)[:80]!r}")
        if numbers or texts:
            try:
                return _ARITHMETIC[type(node.op)](left, right)
            except (ArithmeticError, ValueError) as exc:
                raise UnreadableCalls(f"{type(exc).__name__} in {ast.unparse(node)[:80]!r}") from None
    raise UnreadableCalls(f"an expression that is not arithmetic on literals: {ast.unparse(node)[:80]!r}")


def _finite(value: Any, node: ast.expr) -> Any:
    if (isinstance(value, float) and not math.isfinite(value)) or isinstance(value, complex):
        raise UnreadableCalls(f"a value JSON cannot carry: {ast.unparse(node)[:80]!r}")
    return value
