"""ACEBench's scenario classes, turned into one standalone environment class for the jail.

Upstream's scenario modules (``model_inference/<category>/scenarios<lang>/...``) are embedded verbatim except for
their imports of each other (``from model_inference... import BaseApi``): the modules are concatenated so that a
module comes after the ones it imports. The environment class below does what upstream's
``execute_agent_func_call`` does (``model_inference/<category>/<category>_utils.py``): one instance per involved
class, each loaded with its own initial configuration and then with ``BaseApi``'s; a call runs on every involved
instance that has a public method of that name, in the order of ``involved_classes``, and the last one's result
is the call's; results are formatted as upstream's execution role formats them (``execution_role*.py``):
``json.dumps`` of a dict and ``str`` of anything else, each then read back with ``json.loads`` where it parses,
the list shown with ``str``. The saved attributes (upstream's ``SAVED_CLASS``) of every instance are the state's
``result``, read back through JSON as upstream's result file is.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from harness.benchmarks.acebench.source import AceBenchSource, AceBenchSourceError

DISPATCHER = "execute_call"
ENVIRONMENT_CLASS = "AceBenchEnvironment"
_IMPORT_ROOT = "model_inference"

ENVIRONMENT_SOURCE = '''

import copy as _acebench_copy
import json as _acebench_json

ACEBENCH_CLASSES = {classes}
ACEBENCH_SAVED = {saved}
ACEBENCH_MULTI_TURN = {multi_turn}
# multi_turn's execute_agent_func_call returns this string (its braces are not formatted) and the execution role
# then iterates over its characters; multi_step appends the formatted message instead.
ACEBENCH_TURN_ERROR = "Error during execution: {{str(e)}}"
# What Python says when upstream's loop appends the result of a call whose name no involved class has.
ACEBENCH_UNKNOWN = "cannot access local variable 'func_call_result' where it is not associated with a value"


def _acebench_parsed(text):
    try:
        return _acebench_json.loads(text)
    except ValueError:
        return text


def _acebench_formatted(value):
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        try:
            return _acebench_json.dumps(value)
        except (TypeError, ValueError):
            return str(value)
    return str(value)


class {cls}:
    """ACEBench's involved scenario classes behind one dispatcher."""

    def __init__(self, init_config):
        config = dict(init_config)
        init_config.clear()
        initial = config.get("initial_config") or {{}}
        self.involved_classes = list(config.get("involved_classes") or [])
        self.instances = {{}}
        self.methods = {{}}
        for name in self.involved_classes:
            instance = ACEBENCH_CLASSES[name]()
            instance._load_scenario(_acebench_copy.deepcopy(initial.get(name, {{}})), long_context=False)
            instance._load_scenario(_acebench_copy.deepcopy(initial.get("BaseApi", {{}})), long_context=False)
            self.instances[name] = instance
            self.methods[name] = [
                method for method in dir(instance)
                if not method.startswith("_") and callable(getattr(instance, method))
            ]
        self.recorded = False
        self.result = []

    def execute_call(self, name, arguments):
        owners = [owner for owner in self.involved_classes if name in self.methods[owner]]
        try:
            if not owners:
                raise UnboundLocalError(ACEBENCH_UNKNOWN)
            for owner in owners:
                value = getattr(self.instances[owner], name)(**arguments)
        except Exception as e:
            self._save(recorded=not ACEBENCH_MULTI_TURN)
            if ACEBENCH_MULTI_TURN:
                return str([_acebench_parsed(char) for char in ACEBENCH_TURN_ERROR])
            return str([_acebench_parsed(f"Error during execution: {{str(e)}}")])
        self._save(recorded=True)
        return str([_acebench_parsed(_acebench_formatted(value))])

    def _save(self, recorded):
        self.recorded = self.recorded or recorded
        saved = []
        for name in self.involved_classes:
            instance = self.instances[name]
            kept = {{}}
            for attribute in ACEBENCH_SAVED.get(name, []):
                if hasattr(instance, attribute):
                    kept[attribute] = getattr(instance, attribute)
            saved.append({{name: kept}})
        self.result = _acebench_json.loads(_acebench_json.dumps(saved, ensure_ascii=False, default=str))
'''


@dataclass
class ScenarioCode:
    modules: list[str]
    """The scenario modules' files, in the order they are embedded."""
    body: str
    classes: list[str]

    def environment_code(self, saved: dict[str, list[str]], multi_turn: bool) -> str:
        classes = "{" + ", ".join(f"{name!r}: {name}" for name in self.classes) + "}"
        return self.body + ENVIRONMENT_SOURCE.format(
            classes=classes, saved=repr(saved), multi_turn=repr(multi_turn), cls=ENVIRONMENT_CLASS
        )


def _imports_of(tree: ast.Module) -> list[str]:
    """The ``model_inference`` modules a scenario module imports (as dotted names)."""
    found = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == _IMPORT_ROOT:
            found.append(node.module or "")
        elif isinstance(node, ast.Import):
            found.extend(a.name for a in node.names if a.name.split(".")[0] == _IMPORT_ROOT)
    return found


def _strip_imports(source: str, tree: ast.Module) -> str:
    drop: list[tuple[int, int]] = []
    for node in tree.body:
        ours = isinstance(node, ast.ImportFrom | ast.Import) and _imports_of(ast.Module(body=[node], type_ignores=[]))
        if ours or (isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)):
            drop.append((node.lineno, node.end_lineno or node.lineno))
    lines = source.splitlines()
    kept = [line for number, line in enumerate(lines, 1) if not any(a <= number <= b for a, b in drop)]
    return "\n".join(kept) + "\n"


def build_scenario_code(source: AceBenchSource, class_modules: dict[str, str]) -> ScenarioCode:
    """Every module of ``class_modules`` (and the modules they import), each after its imports."""
    texts: dict[str, str] = {}
    trees: dict[str, ast.Module] = {}
    pending = list(dict.fromkeys(class_modules.values()))
    while pending:
        relative = pending.pop(0)
        if relative in texts:
            continue
        text, tree = source.read_python(relative)
        texts[relative], trees[relative] = text, tree
        pending.extend(module.replace(".", "/") + ".py" for module in _imports_of(tree))
    ordered: list[str] = []
    stripped = {relative: _strip_imports(texts[relative], trees[relative]) for relative in texts}
    shapes = {relative: ast.dump(ast.parse(stripped[relative])) for relative in texts}
    same_as: dict[str, str] = {}
    """A module whose code (imports aside) is another's is embedded once (upstream's multi_step modules import
    multi_turn's copy of base_api.py, which is the same file as multi_step's)."""

    def visit(relative: str, seen: tuple[str, ...]) -> None:
        if relative in ordered or relative in same_as:
            return
        if relative in seen:
            raise AceBenchSourceError(f"{source.path}: {relative} imports itself through {', '.join(seen)}")
        for module in _imports_of(trees[relative]):
            visit(module.replace(".", "/") + ".py", (*seen, relative))
        twin = next((other for other in ordered if shapes[other] == shapes[relative]), None)
        if twin is not None:
            same_as[relative] = twin
        else:
            ordered.append(relative)

    for relative in texts:
        visit(relative, ())
    defined: dict[str, str] = {}
    for relative in ordered:
        for node in trees[relative].body:
            if isinstance(node, ast.ClassDef | ast.FunctionDef):
                if node.name in defined and defined[node.name] != relative:
                    raise AceBenchSourceError(
                        f"{source.path}: {node.name} is defined in both {defined[node.name]} and {relative}"
                    )
                defined[node.name] = relative
    for name, relative in class_modules.items():
        if defined.get(name) != same_as.get(relative, relative):
            raise AceBenchSourceError(f"{source.path}: {relative} defines no class {name}")
    body = "".join(f"\n# ---- {relative}\n" + stripped[relative] for relative in ordered)
    return ScenarioCode(modules=ordered, body=body, classes=list(class_modules))
