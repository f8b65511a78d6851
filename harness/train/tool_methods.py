"""Python methods whose signature and Google-style docstring say exactly what a tool's JSON schema says.

Trainers that discover tools by introspection (TRL reads methods through transformers' ``get_json_schema``) then
show the model our schemas. The method body takes any keywords, so a call the schema rejects still reaches the
adapter, which records it instead of Python raising ``TypeError`` in the trainer.
"""

from __future__ import annotations

import inspect
import keyword
from collections.abc import Callable
from typing import Any, Literal, Union

from harness.schema import ToolSpec

RESERVED_NAMES = frozenset({"reset", "get_reward"})
"""Method names a trainer treats as the environment's own, never as tools."""

_SCALAR_HINTS: dict[str, Any] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "object": dict,
    "null": type(None),
}


class UnrepresentableTool(ValueError):
    """A tool whose name or parameters cannot be a Python method (a keyword, a reserved or private name)."""


def type_hint(schema: dict[str, Any]) -> Any:
    """The Python type hint that transformers turns back into ``schema`` (``Any`` for what it cannot say)."""
    if schema.get("enum"):
        return Literal[tuple(schema["enum"])]
    if "anyOf" in schema:
        members = tuple(type_hint(member) for member in schema["anyOf"])
        return Union[members]  # noqa: UP007 - built from a runtime tuple
    kind = schema.get("type")
    if isinstance(kind, list):
        members = tuple(type_hint({"type": member}) for member in kind)
        return Union[members] if len(members) > 1 else members[0]  # noqa: UP007
    if kind == "array":
        items = schema.get("items")
        if isinstance(items, dict) and items:
            item_hint = type_hint(items)
            return list.__class_getitem__(item_hint)
        return list
    if isinstance(kind, str) and kind in _SCALAR_HINTS:
        return _SCALAR_HINTS[kind]
    return Any


def _one_line(text: str) -> str:
    return " ".join(text.split())


def google_docstring(spec: ToolSpec) -> str:
    """The tool's description and one ``Args:`` line per parameter (its name when the schema gives no words)."""
    parameters = spec.function.parameters or {}
    properties: dict[str, Any] = parameters.get("properties") or {}
    lines = [_one_line(spec.function.description or spec.function.name)]
    if properties:
        lines += ["", "Args:"]
        lines += [
            f"    {name}: {_one_line(str(schema.get('description') or name))}" for name, schema in properties.items()
        ]
    return "\n".join(lines)


def _check_name(name: str, what: str) -> None:
    if not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_"):
        raise UnrepresentableTool(f"{what} {name!r} cannot be a Python method's name")


def tool_method(spec: ToolSpec, forward: Callable[[Any, str, dict[str, Any]], Any]) -> Callable[..., Any]:
    """A method named after the tool that hands its keywords to ``forward(self, tool_name, arguments)``."""
    name = spec.function.name
    _check_name(name, "tool")
    if name in RESERVED_NAMES:
        raise UnrepresentableTool(f"tool {name!r} has a name the trainer reserves for the environment itself")
    parameters = spec.function.parameters or {}
    properties: dict[str, Any] = parameters.get("properties") or {}
    required = set(parameters.get("required") or [])
    signature_parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    # Required parameters first: a Python signature cannot put a parameter without a default after one with it.
    ordered = [p for p in properties if p in required] + [p for p in properties if p not in required]
    for parameter in ordered:
        _check_name(parameter, f"parameter of {name!r}")
        hint = type_hint(properties[parameter] if isinstance(properties[parameter], dict) else {})
        annotations[parameter] = hint
        default = inspect.Parameter.empty if parameter in required else None
        signature_parameters.append(
            inspect.Parameter(parameter, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hint)
        )

    def method(self: Any, **arguments: Any) -> Any:
        return forward(self, name, arguments)

    method.__name__ = name
    method.__qualname__ = name
    method.__doc__ = google_docstring(spec)
    method.__annotations__ = annotations
    method.__signature__ = inspect.Signature(signature_parameters)  # type: ignore[attr-defined]  # read by inspect
    return method
