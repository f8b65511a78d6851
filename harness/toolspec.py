"""Tool schemas derived statically from an environment class's source (signature, hints, docstring).

Nothing is executed: the class is read from its AST, so this is safe on model-written code.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from harness.sandbox.static import UnparsableCode, parse_untrusted
from harness.schema import FunctionSpec, ToolSpec

_SIMPLE_TYPES: dict[str, dict[str, Any]] = {
    "str": {"type": "string"},
    "int": {"type": "integer"},
    "float": {"type": "number"},
    "bool": {"type": "boolean"},
    "dict": {"type": "object"},
    "Dict": {"type": "object"},
    "list": {"type": "array"},
    "List": {"type": "array"},
    "tuple": {"type": "array"},
    "Tuple": {"type": "array"},
    "set": {"type": "array"},
    "Any": {},
    "object": {},
}


class ToolDerivationError(ValueError):
    pass


def _annotation_schema(node: ast.expr | None) -> tuple[dict[str, Any], bool]:
    """JSON schema for an annotation, and whether it is Optional."""
    if node is None:
        return {}, False
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return {}, False
    if isinstance(node, ast.Constant) and node.value is None:
        return {"type": "null"}, True
    if isinstance(node, ast.Name):
        return dict(_SIMPLE_TYPES.get(node.id, {})), False
    if isinstance(node, ast.Attribute):
        return dict(_SIMPLE_TYPES.get(node.attr, {})), False
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _union_schema([node.left, node.right])
    if isinstance(node, ast.Subscript):
        base = node.value.id if isinstance(node.value, ast.Name) else getattr(node.value, "attr", "")
        args = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
        if base == "Optional":
            inner, _ = _annotation_schema(args[0])
            return inner, True
        if base == "Union":
            return _union_schema(args)
        if base in ("list", "List", "set", "Set", "Sequence", "tuple", "Tuple"):
            item, _ = _annotation_schema(args[0]) if args else ({}, False)
            return ({"type": "array", "items": item} if item else {"type": "array"}), False
        if base in ("dict", "Dict", "Mapping"):
            return {"type": "object"}, False
        if base == "Literal":
            values = [a.value for a in args if isinstance(a, ast.Constant)]
            enum: dict[str, Any] = {"enum": values}
            if values and all(isinstance(v, str) for v in values):
                enum["type"] = "string"
            return enum, False
    return {}, False


def _union_schema(members: list[ast.expr]) -> tuple[dict[str, Any], bool]:
    optional = False
    schemas = []
    for member in members:
        schema, member_optional = _annotation_schema(member)
        optional = optional or member_optional
        if schema.get("type") == "null":
            optional = True
            continue
        schemas.append(schema)
    if len(schemas) == 1:
        return schemas[0], optional
    types = [s.get("type") for s in schemas]
    if all(isinstance(t, str) for t in types) and all(len(s) == 1 for s in schemas):
        return {"type": types}, optional
    return ({"anyOf": schemas} if schemas else {}), optional


_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters|Params)\s*:\s*$", re.IGNORECASE)
_SECTION_HEADER = re.compile(r"^\s*[A-Z][A-Za-z ]*:\s*$")
_PARAM_LINE = re.compile(r"^\s*\*?\*?(\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into its first paragraph and per-parameter descriptions."""
    description: list[str] = []
    params: dict[str, str] = {}
    section = "description"
    current: str | None = None
    param_indent: int | None = None
    for line in doc.strip("\n").splitlines():
        stripped = line.strip()
        if _ARGS_HEADER.match(line):
            section, current, param_indent = "args", None, None
            continue
        if _SECTION_HEADER.match(line):
            section, current = "other", None
            continue
        if section == "description":
            description.append(stripped)
        elif section == "args" and stripped:
            indent = len(line) - len(line.lstrip())
            match = _PARAM_LINE.match(line)
            if match and (param_indent is None or indent <= param_indent):
                param_indent, current = indent, match.group(1)
                params[current] = match.group(3).strip()
            elif current:
                params[current] = f"{params[current]} {stripped}".strip()
    text = "\n".join(description).strip()
    first_paragraph = re.split(r"\n\s*\n", text)[0] if text else ""
    return " ".join(first_paragraph.split()), params


def find_class(tree: ast.Module, class_name: str) -> ast.ClassDef:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            return node
    raise ToolDerivationError(f"class {class_name!r} is not defined at the top level of the environment code")


def public_methods(cls: ast.ClassDef) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [
        node
        for node in cls.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and not node.name.startswith("_")
        and not any(_decorator_name(d) in ("staticmethod", "classmethod", "property") for d in node.decorator_list)
    ]


def _decorator_name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def method_tool(method: ast.FunctionDef | ast.AsyncFunctionDef) -> ToolSpec:
    doc = ast.get_docstring(method) or ""
    description, param_docs = parse_docstring(doc)
    args = method.args
    positional = [*args.posonlyargs, *args.args][1:]  # drop self
    defaults_start = len(positional) - len(args.defaults)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for index, arg in enumerate(positional):
        schema, optional = _annotation_schema(arg.annotation)
        if param_docs.get(arg.arg):
            schema["description"] = param_docs[arg.arg]
        properties[arg.arg] = schema
        if index < defaults_start and not optional:
            required.append(arg.arg)
    for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        schema, optional = _annotation_schema(arg.annotation)
        if param_docs.get(arg.arg):
            schema["description"] = param_docs[arg.arg]
        properties[arg.arg] = schema
        if default is None and not optional:
            required.append(arg.arg)
    parameters = {"type": "object", "properties": properties, "required": required}
    return ToolSpec(function=FunctionSpec(name=method.name, description=description, parameters=parameters))


def derive_tools(code: str, class_name: str) -> list[ToolSpec]:
    """OpenAI tool schemas for every public method of ``class_name`` in ``code``."""
    try:
        tree = parse_untrusted(code)
    except UnparsableCode as exc:
        raise ToolDerivationError(f"environment code does not parse: {exc}") from exc
    try:
        return [method_tool(m) for m in public_methods(find_class(tree, class_name))]
    except (RecursionError, MemoryError) as exc:
        raise ToolDerivationError("environment code nests too deeply to read its tools") from exc
