"""The grammar that constrains the embedded local model to one tool call or one text reply."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from harness.llm.local_prompt import tool_functions

logger = logging.getLogger(__name__)

_SCHEMA_KEYS_KEPT = frozenset(
    {
        "type",
        "properties",
        "required",
        "items",
        "prefixItems",
        "enum",
        "const",
        "anyOf",
        "oneOf",
        "minItems",
        "maxItems",
    }
)
_PRIMITIVE_TYPES = frozenset({"string", "number", "integer", "boolean", "null", "object", "array"})
_ANY_JSON_VALUE: dict[str, Any] = {"type": ["string", "number", "boolean", "null", "object", "array"]}


def _inline_refs(schema: Any, definitions: dict[str, Any], depth: int = 0) -> Any:
    if isinstance(schema, list):
        return [_inline_refs(item, definitions, depth) for item in schema]
    if not isinstance(schema, dict):
        return schema
    reference = schema.get("$ref")
    if isinstance(reference, str):
        target = definitions.get(reference.rsplit("/", 1)[-1])
        if target is None or depth > 8:
            return dict(_ANY_JSON_VALUE)
        return _inline_refs(target, definitions, depth + 1)
    return {key: _inline_refs(value, definitions, depth) for key, value in schema.items()}


def _grammar_schema(schema: Any) -> dict[str, Any]:
    """Reduce a JSON schema to the keywords the grammar converter handles, closing objects."""
    if not isinstance(schema, dict):
        return dict(_ANY_JSON_VALUE)
    reduced: dict[str, Any] = {}
    for key in _SCHEMA_KEYS_KEPT & schema.keys():
        value = schema[key]
        if key == "properties" and isinstance(value, dict):
            reduced[key] = {name: _grammar_schema(sub) for name, sub in value.items()}
        elif key == "items" and isinstance(value, dict):
            reduced[key] = _grammar_schema(value)
        elif key in ("prefixItems", "anyOf", "oneOf") and isinstance(value, list) and value:
            reduced[key] = [_grammar_schema(sub) for sub in value]
        elif key == "required" and isinstance(value, list):
            reduced[key] = [name for name in value if name in schema.get("properties", {})]
        elif key == "type":
            kinds = value if isinstance(value, list) else [value]
            known = [kind for kind in kinds if kind in _PRIMITIVE_TYPES]
            if known:
                reduced[key] = known if isinstance(value, list) else known[0]
        elif key in ("const", "minItems", "maxItems") or (key == "enum" and isinstance(value, list) and value):
            reduced[key] = value
    if not reduced:
        return dict(_ANY_JSON_VALUE)
    return reduced


def arguments_schema(parameters: Any) -> dict[str, Any]:
    """The grammar schema for one tool's arguments: an object with exactly the declared keys."""
    if not isinstance(parameters, dict):
        return {"type": "object", "properties": {}}
    definitions = {**parameters.get("definitions", {}), **parameters.get("$defs", {})}
    resolved = _inline_refs(parameters, definitions)
    reduced = _grammar_schema(resolved)
    if reduced.get("type") != "object" or "properties" not in reduced:
        reduced = {
            "type": "object",
            "properties": reduced.get("properties", {}),
            **({"required": reduced["required"]} if "required" in reduced else {}),
        }
    return reduced


def tool_choice_schema(tools: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One alternative per tool (its name fixed, its arguments shaped by its schema), plus a text reply;
    with no tools, only the text reply."""
    text_reply = {"type": "object", "properties": {"response": {"type": "string"}}, "required": ["response"]}
    if not tools:
        return text_reply
    alternatives: list[dict[str, Any]] = []
    for function in tool_functions(tools):
        call = {
            "type": "object",
            "properties": {
                "name": {"const": function["name"]},
                "arguments": arguments_schema(function.get("parameters")),
            },
            "required": ["name", "arguments"],
        }
        alternatives.append({"type": "object", "properties": {"tool_call": call}, "required": ["tool_call"]})
    alternatives.append(text_reply)
    return {"oneOf": alternatives}


def tool_choice_gbnf(tools: Sequence[dict[str, Any]]) -> str:
    """The GBNF grammar for :func:`tool_choice_schema`; a tool whose schema cannot be converted
    falls back to accepting any JSON object as its arguments."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    functions = tool_functions(tools)
    try:
        return str(json_schema_to_gbnf(json.dumps(tool_choice_schema(functions))))
    except Exception:
        logger.warning("a tool schema could not be turned into a grammar; converting tool by tool")
    safe: list[dict[str, Any]] = []
    for function in functions:
        try:
            json_schema_to_gbnf(json.dumps(tool_choice_schema([function])))
            safe.append(function)
        except Exception:
            logger.warning("tool %r: arguments not constrained by its schema", function["name"])
            safe.append({**function, "parameters": {"type": "object"}})
    return str(json_schema_to_gbnf(json.dumps(tool_choice_schema(safe))))
