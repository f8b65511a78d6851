"""The agent tools' parameter models, written as source for the jail from upstream's signatures and docstrings.

Upstream (``tau2/environment/tool.py``) builds each tool's JSON schema with pydantic's ``create_model`` from the
method's signature, each documented parameter's description from its Google-style docstring (parsed with
``docstring_parser``), and the description as the short description, a blank line and the long one. Here the
docstring is parsed as text in the harness and the ``create_model`` fields are written as source that the
jail runs, so the schema is the one pydantic makes from upstream's own annotations.
"""

from __future__ import annotations

import ast

from harness.benchmarks.tau2.source import Tau2SourceError

_SECTION_TITLES = frozenset(
    {
        "Args:",
        "Arguments:",
        "Parameters:",
        "Params:",
        "Raises:",
        "Raise:",
        "Exceptions:",
        "Except:",
        "Attributes:",
        "Attribute:",
        "Example:",
        "Examples:",
        "Returns:",
        "Return:",
        "Yields:",
        "Yield:",
    }
)
_PARAMETER_TITLES = frozenset({"Args:", "Arguments:", "Parameters:", "Params:"})


def parse_docstring(text: str) -> tuple[str, str, dict[str, str]]:
    """Short description, long description and parameter descriptions, as docstring_parser's Google style
    reads a cleaned docstring."""
    lines = text.split("\n")
    start = next(
        (i for i, line in enumerate(lines) if line.strip() in _SECTION_TITLES and not line.startswith(" ")),
        len(lines),
    )
    parts = "\n".join(lines[:start]).split("\n", 1)
    short = parts[0]
    long = parts[1].strip() if len(parts) > 1 else ""
    params: dict[str, str] = {}
    section = ""
    current: tuple[str, int] | None = None
    for line in lines[start:]:
        if line.strip() in _SECTION_TITLES and not line.startswith(" "):
            section, current = line.strip(), None
            continue
        stripped = line.strip()
        if section not in _PARAMETER_TITLES or not stripped:
            continue
        indent = len(line) - len(line.lstrip())
        if current is not None and indent > current[1]:
            params[current[0]] += "\n" + stripped
            continue
        head, _, rest = stripped.partition(":")
        name = head.split("(")[0].strip()
        params[name] = rest.strip()
        current = (name, indent)
    return short, long, params


def tool_parameters_source(tools_source: str, toolkit_class: str) -> str:
    """``TOOL_PARAMETERS = [(name, description, {field: (annotation, default)}), ...]`` in definition order."""
    tree = ast.parse(tools_source)
    toolkit = next(
        (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == toolkit_class),
        None,
    )
    if toolkit is None:
        raise Tau2SourceError(f"tools.py defines no class {toolkit_class}")
    entries: list[str] = []
    for node in toolkit.body:
        if not isinstance(node, ast.FunctionDef) or not any(_is_tool_decorator(d) for d in node.decorator_list):
            continue
        short, long, documented = parse_docstring(ast.get_docstring(node, clean=True) or "")
        description = f"{short}\n\n{long}" if long else (short or node.name)
        positional = node.args.args[1:]
        defaults: list[ast.expr | None] = [None] * (len(positional) - len(node.args.defaults))
        defaults += list(node.args.defaults)
        fields: list[str] = []
        for arg, default in zip(positional, defaults, strict=True):
            annotation = ast.unparse(arg.annotation) if arg.annotation is not None else "Any"
            value = "..." if default is None else ast.unparse(default)
            if arg.arg in documented:
                value = f"Field({value}, description={documented[arg.arg]!r})"
            fields.append(f"{arg.arg!r}: ({annotation}, {value})")
        entries.append(f"    ({node.name!r}, {description!r}, {{{', '.join(fields)}}}),")
    return "\n\nTOOL_PARAMETERS = [\n" + "\n".join(entries) + "\n]\n"


def _is_tool_decorator(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "is_tool"
