"""BFCL's API classes turned into one environment class per set of involved classes.

Each BFCL module becomes a function that runs the module's body in its own scope and returns the API class, so
modules keep their own globals (two modules define ``DEFAULT_STATE``; one imports the module ``datetime``, another
the class). Three edits make the code fit the sandbox without changing what it computes:

- the long-context constants it imports from ``long_context.py`` are inlined, and unused imports are dropped;
- the API classes' ``__eq__`` methods are dropped: states are compared as data (the classes' public attributes),
  which is what BFCL's checker compares, never through these methods;
- ``Directory.parent`` becomes ``Directory._parent``: BFCL's ``Directory.__eq__`` ignores the back-reference,
  and as a public attribute it would make the state a cycle instead of a tree.

- ``datetime.strptime(text, format)`` becomes ``_bfcl_strptime(datetime, text, format)``, a transcription of
  CPython's ``_strptime`` for the directives BFCL's formats use: the sandbox refuses the lazy ``import
  _strptime`` that the C implementation makes.

The composed class holds one instance per API class under the class's name and runs every call through
``execute_call`` exactly as BFCL's executor does: results become text (``json.dumps`` for a dict, ``str()``
otherwise), an exception becomes ``"Error during execution: ..."``, and a name no class defines fails the way
BFCL's ``eval`` does.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from dataclasses import dataclass, field

from harness.benchmarks.bfcl.source import CLASS_SOURCE_FOLDER, BfclSource, BfclSourceError

DISPATCHER = "execute_call"
LONG_CONTEXT_MODULE = "long_context"
_PRIVATE_ATTRIBUTES: dict[str, set[str]] = {"gorilla_file_system": {"parent"}}
_BLOCKED_NAMES = ("kill", "exit", "quit", "remove", "unlink", "popen", "Popen", "run")


@dataclass
class ClassModule:
    """One BFCL API class, rewritten as a function that returns it."""

    class_name: str
    module: str
    function_name: str
    source: str
    methods: dict[str, list[str]] = field(default_factory=dict)
    """Public methods and their parameter names, in order (for positional ground-truth calls)."""
    required_modules: list[str] = field(default_factory=list)
    """Modules beyond the standard library that the class imports (the sandbox must allow them)."""


def _used_names(tree: ast.AST) -> set[str]:
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}


class _ReplaceStrptime(ast.NodeTransformer):
    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "strptime" and isinstance(func.value, ast.Name):
            if len(node.args) != 2 or not isinstance(node.args[1], ast.Constant) or node.keywords:
                raise BfclSourceError(f"line {node.lineno}: strptime with a format that is not a literal")
            fmt = node.args[1].value
            unsupported = set(re.findall(r"%(.)", str(fmt))) - set(_STRPTIME_DIRECTIVES)
            if unsupported:
                raise BfclSourceError(f"line {node.lineno}: strptime directives {sorted(unsupported)} not supported")
            return ast.Call(
                func=ast.Name(id="_bfcl_strptime", ctx=ast.Load()), args=[func.value, *node.args], keywords=[]
            )
        return node


# CPython's _strptime patterns for the directives BFCL uses.
_STRPTIME_DIRECTIVES = {
    "Y": r"(?P<Y>\d\d\d\d)",
    "m": r"(?P<m>1[0-2]|0[1-9]|[1-9])",
    "d": r"(?P<d>3[01]|[12]\d|0[1-9]|[1-9]| [1-9])",
    "H": r"(?P<H>2[0-3]|[0-1]\d|\d)",
    "I": r"(?P<I>1[0-2]|0[1-9]|[1-9])",
    "p": r"(?P<p>am|pm)",
    "M": r"(?P<M>[0-5]\d|\d)",
    "S": r"(?P<S>6[0-1]|[0-5]\d|\d)",
}

STRPTIME_SOURCE = rf"""
_BFCL_STRPTIME_DIRECTIVES = {_STRPTIME_DIRECTIVES!r}


def _bfcl_strptime(cls, data_string, format):
    if not isinstance(data_string, str):
        raise TypeError(f"strptime() argument 1 must be str, not {{type(data_string).__name__}}")
    pattern = ''
    index = 0
    while index < len(format):
        char = format[index]
        if char == '%' and index + 1 < len(format):
            pattern += _BFCL_STRPTIME_DIRECTIVES[format[index + 1]]
            index += 2
            continue
        pattern += r'\s+' if char.isspace() else re.escape(char)
        index += 1
    found = re.match(pattern, data_string, re.IGNORECASE)
    if found is None:
        raise ValueError(f"time data {{data_string!r}} does not match format {{format!r}}")
    if len(data_string) != found.end():
        raise ValueError(f"unconverted data remains: {{data_string[found.end():]}}")
    values = found.groupdict()
    hour = int(values.get('H') or 0)
    if values.get('I'):
        hour = int(values['I'])
        meridiem = (values.get('p') or '').lower()
        if meridiem in ('', 'am') and hour == 12:
            hour = 0
        elif meridiem == 'pm' and hour != 12:
            hour += 12
    return cls(
        int(values.get('Y') or 1900),
        int(values.get('m') or 1),
        int(values.get('d') or 1),
        hour,
        int(values.get('M') or 0),
        int(values.get('S') or 0),
    )
"""


class _RenameAttributes(ast.NodeTransformer):
    def __init__(self, names: set[str]):
        self.names = names

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        if node.attr in self.names:
            node.attr = "_" + node.attr
        return node


def _long_context_assignments(source: BfclSource, names: list[str]) -> list[ast.stmt]:
    tree = source.parse(f"{CLASS_SOURCE_FOLDER}/{LONG_CONTEXT_MODULE}.py")
    found: dict[str, ast.stmt] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id in names:
                    found[target.id] = node
    missing = [name for name in names if name not in found]
    if missing:
        raise BfclSourceError(f"{LONG_CONTEXT_MODULE}.py defines no {', '.join(missing)}")
    return [_as_json_text(found[name]) for name in names]


def _json_faithful(value: object) -> bool:
    """Whether JSON gives ``value`` back exactly (same types, key order and values)."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_faithful(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_json_faithful(item) for item in value)
    return value is None or (isinstance(value, str | bool | int | float) and value == value)


def _as_json_text(node: ast.stmt) -> ast.stmt:
    """A large literal as ``json.loads`` of its JSON text: the same value, but one string constant to compile
    (compiling the literal itself costs a quarter of a second per session for TradingBot's long-context data)."""
    assert isinstance(node, ast.Assign)
    try:
        value = ast.literal_eval(node.value)
    except ValueError:
        return node
    if not isinstance(value, dict | list) or not _json_faithful(value):
        return node
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    call = ast.Call(func=ast.Name(id="_bfcl_json_loads", ctx=ast.Load()), args=[ast.Constant(text)], keywords=[])
    return ast.fix_missing_locations(ast.copy_location(ast.Assign(targets=node.targets, value=call), node))


def build_class_module(source: BfclSource, class_name: str, module: str) -> ClassModule:
    """Read ``module``'s source and rewrite it as a function returning ``class_name``."""
    tree = source.parse(f"{CLASS_SOURCE_FOLDER}/{module}.py")
    body: list[ast.stmt] = []
    required: list[str] = []
    class_node: ast.ClassDef | None = None
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("bfcl_eval"):
            if not (node.module or "").endswith(f".{LONG_CONTEXT_MODULE}"):
                raise BfclSourceError(f"{module}.py imports {node.module}, which this importer does not know")
            body.extend(_long_context_assignments(source, [alias.name for alias in node.names]))
            continue
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            node.body = [
                item for item in node.body if not (isinstance(item, ast.FunctionDef) and item.name == "__eq__")
            ]
            class_node = node
        body.append(node)
    if class_node is None:
        raise BfclSourceError(f"{module}.py defines no class {class_name}")
    used = _used_names(ast.Module(body=body, type_ignores=[]))
    kept: list[ast.stmt] = []
    for node in body:
        if isinstance(node, ast.Import):
            node.names = [alias for alias in node.names if (alias.asname or alias.name.split(".")[0]) in used]
            if not node.names:
                continue
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in required:
                    required.append(top)
        elif isinstance(node, ast.ImportFrom):
            top = (node.module or "").split(".")[0]
            if top not in sys.stdlib_module_names and top not in required:
                required.append(top)
        kept.append(node)
    kept = [_ReplaceStrptime().visit(node) for node in kept]
    renamed = _PRIVATE_ATTRIBUTES.get(module)
    if renamed:
        kept = [_RenameAttributes(renamed).visit(node) for node in kept]
    function_name = f"_bfcl_module_{module}"
    function = ast.parse(f"def {function_name}():\n    pass\n").body[0]
    assert isinstance(function, ast.FunctionDef)
    function.body = [*kept, ast.Return(value=ast.Name(id=class_name, ctx=ast.Load()))]
    ast.fix_missing_locations(function)
    methods: dict[str, list[str]] = {}
    for item in class_node.body:
        if isinstance(item, ast.FunctionDef) and not item.name.startswith("_"):
            methods[item.name] = [arg.arg for arg in [*item.args.posonlyargs, *item.args.args][1:]]
    return ClassModule(class_name, module, function_name, ast.unparse(function), methods, required)


def composed_class_name(class_names: list[str]) -> str:
    return "Bfcl" + "".join(class_names)


def compose(modules: list[ClassModule], stateless: set[str]) -> str:
    """The source of one environment class over ``modules``' API classes (in BFCL's order: on a shared
    method name, the later class wins, as in BFCL's executor)."""
    names = [m.class_name for m in modules]
    owners: dict[str, str] = {}
    for module in modules:
        for method in module.methods:
            owners[method] = module.class_name
    class_name = composed_class_name(names)
    locals_prefixes = [f"{m.function_name}.<locals>." for m in modules]
    lines = [
        f'"""BFCL multi-turn: {", ".join(names)} in one environment (generated from bfcl-eval\'s sources)."""',
        "",
        "import json",
        "import re",
        "from copy import deepcopy",
        "from json import loads as _bfcl_json_loads",
        "",
        STRPTIME_SOURCE,
    ]
    for module in modules:
        lines += ["", module.source, ""]
    lines += [
        "",
        f"_BFCL_CLASSES = {{{', '.join(f'{m.class_name!r}: {m.function_name}()' for m in modules)}}}",
        f"_BFCL_BLOCKED = {_BLOCKED_NAMES!r}",
        f"_BFCL_LOCALS_PREFIXES = {tuple(locals_prefixes)!r}",
        "",
        "",
        "def _bfcl_error(exc):",
        "    text = str(exc)",
        "    for prefix in _BFCL_LOCALS_PREFIXES:",
        "        text = text.replace(prefix, '')",
        "    return 'Error during execution: ' + text",
        "",
        "",
        "def _bfcl_text(result):",
        "    if type(result) == str:",
        "        return result",
        "    if type(result) == dict:",
        "        try:",
        "            return json.dumps(result)",
        "        except Exception:",
        "            return str(result)",
        "    return str(result)",
        "",
        "",
        f"class {class_name}:",
        f'    """Tools of {", ".join(names)}; each runs on the instance of the class that defines it."""',
        "",
        f"    _TOOL_OWNERS = {owners!r}",
        "",
        "    def __init__(self, init_config):",
        "        config = init_config.get('initial_config') or {}",
        "        long_context = bool(init_config.get('long_context'))",
    ]
    for name in names:
        lines.append(f"        self.{name} = _BFCL_CLASSES[{name!r}]()")
        if name not in stateless:
            lines.append(
                f"        self.{name}._load_scenario(deepcopy(config.get({name!r}, {{}})), long_context=long_context)"
            )
    lines += [
        "",
        f"    def {DISPATCHER}(self, name, arguments):",
        '        """Run one call as BFCL\'s executor does and return its result as text."""',
        "        if name in _BFCL_BLOCKED:",
        "            return f'Error during execution: Function call {name} is not allowed.'",
        "        owner = self._TOOL_OWNERS.get(name)",
        "        if owner is None:",
        "            return f\"Error during execution: name '{name}' is not defined\"",
        "        method = getattr(getattr(self, owner), name)",
        "        try:",
        "            result = method(**arguments)",
        "        except Exception as exc:",
        "            return _bfcl_error(exc)",
        "        return _bfcl_text(result)",
        "",
    ]
    return "\n".join(lines)


_CALL = re.compile(r"^\s*[A-Za-z_]\w*\s*\(")


def parse_call(text: str, methods: dict[str, list[str]]) -> tuple[str, dict[str, object]]:
    """A ground-truth call string (``mv(source='a', destination='b')`` or ``sort('a')``) as a name and keyword
    arguments; positional arguments take the method's parameter names."""
    if not _CALL.match(text):
        raise ValueError(f"not a function call: {text!r}")
    node = ast.parse(text.strip(), mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a plain function call: {text!r}")
    name = node.func.id
    parameters = methods.get(name)
    if parameters is None:
        raise ValueError(f"{name!r} is not a method of the involved classes")
    arguments: dict[str, object] = {}
    if len(node.args) > len(parameters):
        raise ValueError(f"{text!r}: more positional arguments than {name} takes")
    for parameter, value in zip(parameters, node.args, strict=False):
        arguments[parameter] = _json_value(ast.literal_eval(value))
    for item in node.keywords:
        if item.arg is None:
            raise ValueError(f"{text!r}: ** arguments are not supported")
        arguments[item.arg] = _json_value(ast.literal_eval(item.value))
    return name, arguments


def _json_value(value: object) -> object:
    if isinstance(value, tuple | list):
        return [_json_value(item) for item in value]
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    return value
