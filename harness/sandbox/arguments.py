"""Validation of a tool call against the tool's JSON schema, before it reaches environment code."""

from __future__ import annotations

import difflib
from typing import Any

from harness.jsonlimits import JSONLimits, UnsafeJSON, check_json
from harness.schema import ObservationKind, ToolCall, ToolSpec

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


class CallRejected(Exception):
    def __init__(self, kind: ObservationKind, message: str):
        self.kind = kind
        super().__init__(message)


def _suggest(name: str, options: list[str]) -> str:
    close = difflib.get_close_matches(name, options, n=1)
    return f" Did you mean {close[0]!r}?" if close else ""


def _type_matches(value: Any, schema: dict[str, Any]) -> bool:
    expected = schema.get("type")
    if expected is None:
        if "anyOf" in schema:
            return any(_type_matches(value, s) for s in schema["anyOf"])
        return True
    names = expected if isinstance(expected, list) else [expected]
    for name in names:
        types = _JSON_TYPES.get(name)
        if types is None:
            return True
        if isinstance(value, bool) and name in ("integer", "number"):
            continue
        if isinstance(value, types):
            return True
        if name == "integer" and isinstance(value, float) and value.is_integer():
            return True
    return False


def _describe_type(schema: dict[str, Any]) -> str:
    expected = schema.get("type")
    if isinstance(expected, list):
        return " or ".join(expected)
    return str(expected or "any")


def validate_call(call: ToolCall, tools: dict[str, ToolSpec]) -> dict[str, Any]:
    """The call's arguments, checked against its tool's schema. Raises CallRejected with a helpful message."""
    tool = tools.get(call.name)
    if tool is None:
        names = sorted(tools)
        raise CallRejected(
            ObservationKind.UNKNOWN_TOOL,
            f"Unknown tool {call.name!r}.{_suggest(call.name, names)} Available tools: {', '.join(names)}.",
        )
    if call.arguments is None:
        raw = (call.raw_arguments or "")[:200]
        raise CallRejected(
            ObservationKind.INVALID_ARGUMENTS,
            f"The arguments for {call.name!r} are not a JSON object: {raw!r}.",
        )
    parameters = tool.function.parameters or {}
    properties: dict[str, Any] = parameters.get("properties") or {}
    required: list[str] = parameters.get("required") or []
    problems: list[str] = []
    for name in call.arguments:
        if name not in properties:
            problems.append(f"unknown parameter {name!r}.{_suggest(name, list(properties))}")
    for name in required:
        if name not in call.arguments:
            problems.append(f"missing required parameter {name!r}")
    for name, value in call.arguments.items():
        schema = properties.get(name)
        if schema is None or (value is None and name not in required):
            continue
        if not _type_matches(value, schema):
            problems.append(f"parameter {name!r} must be {_describe_type(schema)}, got {type(value).__name__}")
        elif "enum" in schema and value not in schema["enum"]:
            problems.append(f"parameter {name!r} must be one of {schema['enum']}")
    if problems:
        valid = ", ".join(f"{n}{'' if n in required else '?'}" for n in properties) or "none"
        raise CallRejected(
            ObservationKind.INVALID_ARGUMENTS,
            f"Invalid arguments for {call.name!r}: {'; '.join(problems)}. Parameters: {valid}.",
        )
    return {
        name: int(value) if isinstance(value, float) and properties.get(name, {}).get("type") == "integer" else value
        for name, value in call.arguments.items()
    }


def check_arguments(arguments: dict[str, Any], max_depth: int) -> None:
    """Raise :class:`CallRejected` unless ``arguments`` are plain JSON the jail's channel can carry: integers within
    64 bits, finite numbers, nesting no deeper than ``max_depth`` (as deep as a reply may nest). Their size is not
    bounded here: a model's request already was, and a tool may take long text."""
    try:
        check_json(arguments, JSONLimits(max_depth=max_depth))
    except UnsafeJSON as exc:
        message = f"The arguments cannot be used: the value {exc}."
        raise CallRejected(ObservationKind.INVALID_ARGUMENTS, message) from None
