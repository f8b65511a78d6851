"""What an environment's source says about its tools: the state keys its constructor sets, whether each tool
changes the state, and its output fields (from a ``Returns:`` section of its docstring, or read off what the
method's ``"data"`` holds)."""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass, field
from typing import Any

from harness.schema import Environment, StateEntity
from harness.toolspec import find_class
from synth.graph.records import OutputField, OutputOrigin, is_identifier_name

_RETURNS_HEADER = re.compile(r"^\s*(Returns?|Yields?):\s*$", re.MULTILINE)
_RETURN_FIELD = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:\(([^)]*)\))?\s*:\s*(.*)$")
_MUTATING_METHODS = frozenset(
    {"append", "extend", "insert", "pop", "popitem", "remove", "clear", "update", "setdefault", "add", "discard"}
)
_PASS_THROUGH_CALLS = frozenset({"sorted", "list", "dict", "deepcopy", "copy", "reversed", "tuple", "set"})
_PY_TO_JSON_TYPE = {
    "str": "string",
    "int": "integer",
    "float": "number",
    "bool": "boolean",
    "list": "array",
    "dict": "object",
    "NoneType": "null",
}


def docstring_outputs(docstring: str) -> list[OutputField]:
    """Fields listed under a ``Returns:`` section, one ``name (type): description`` per line."""
    header = _RETURNS_HEADER.search(docstring)
    if header is None:
        return []
    fields: list[OutputField] = []
    for line in docstring[header.end() :].splitlines():
        if not line.strip():
            if fields:
                break
            continue
        if re.match(r"^\s*[A-Z][a-z]+:\s*$", line):
            break
        match = _RETURN_FIELD.match(line)
        if match:
            fields.append(OutputField(match.group(1), (match.group(2) or "string").strip(), match.group(3).strip()))
    return fields


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _plural_forms(word: str) -> set[str]:
    forms = {word, word + "s", word + "es"}
    if word.endswith("y"):
        forms.add(word[:-1] + "ies")
    return forms


@dataclass
class CollectionInfo:
    """What the records of one state collection hold."""

    name: str
    entity: str
    description: str
    fields: dict[str, str] = field(default_factory=dict)  # field name -> JSON type


def collection_infos(
    environment: Environment, class_node: ast.ClassDef, sample_state: dict[str, Any] | None
) -> dict[str, CollectionInfo]:
    """State collections and their record fields: from a sample state when one is given, else from the
    environment's state entities matched to the constructor's containers, else from TypedDict annotations."""
    typed_dicts = _typed_dicts(class_node)
    containers = _constructor_containers(class_node)
    infos: dict[str, CollectionInfo] = {}
    for collection, annotation in containers.items():
        entity = _entity_for(collection, environment.state_entities)
        info = CollectionInfo(
            name=collection,
            entity=entity.name if entity else collection.rstrip("s").replace("_", " ").title().replace(" ", ""),
            description=entity.description if entity else "",
        )
        if sample_state and isinstance(sample_state.get(collection), dict) and sample_state[collection]:
            record = next(iter(sample_state[collection].values()))
            if isinstance(record, dict):
                info.fields = {k: _PY_TO_JSON_TYPE.get(type(v).__name__, "string") for k, v in record.items()}
        if not info.fields and entity is not None:
            info.fields = dict.fromkeys(entity.attributes, "string")
        if not info.fields and annotation in typed_dicts:
            info.fields = typed_dicts[annotation]
        infos[collection] = info
    return infos


def _typed_dicts(class_node: ast.ClassDef) -> dict[str, dict[str, str]]:
    module = class_node
    while not isinstance(module, ast.Module) and hasattr(module, "parent"):
        module = module.parent
    found: dict[str, dict[str, str]] = {}
    if isinstance(module, ast.Module):
        for node in module.body:
            if isinstance(node, ast.ClassDef) and any(
                (isinstance(b, ast.Name) and b.id == "TypedDict") for b in node.bases
            ):
                found[node.name] = {
                    item.target.id: _annotation_type(item.annotation)
                    for item in node.body
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                }
    return found


def _annotation_type(node: ast.expr) -> str:
    name = node.id if isinstance(node, ast.Name) else getattr(getattr(node, "value", None), "id", "")
    return _PY_TO_JSON_TYPE.get(name, "string")


def _constructor_containers(class_node: ast.ClassDef) -> dict[str, str]:
    """``self.X`` attributes set in ``__init__`` and the record annotation of ``dict[str, Record]`` ones."""
    containers: dict[str, str] = {}
    for node in class_node.body:
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            for statement in ast.walk(node):
                target: ast.expr | None = None
                annotation: ast.expr | None = None
                if isinstance(statement, ast.AnnAssign):
                    target, annotation = statement.target, statement.annotation
                elif isinstance(statement, ast.Assign) and len(statement.targets) == 1:
                    target = statement.targets[0]
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
                    if target.value.id != "self":
                        continue
                    record_type = ""
                    if isinstance(annotation, ast.Subscript) and isinstance(annotation.slice, ast.Tuple):
                        last = annotation.slice.elts[-1]
                        record_type = last.id if isinstance(last, ast.Name) else ""
                    containers[target.attr] = record_type
    return containers


# What is read from an environment's source depends on its code alone; synthesis asks again for every candidate
# scenario of the same environment, so the answers are kept (keyed by the code) instead of parsing it each time.
_SOURCE_CACHE_SIZE = 256


def state_keys(environment: Environment) -> list[str]:
    """The keys of an initial state: the attributes the constructor sets."""
    return list(_state_keys(environment.code, environment.class_name))


@functools.lru_cache(maxsize=_SOURCE_CACHE_SIZE)
def _state_keys(code: str, class_name: str) -> tuple[str, ...]:
    return tuple(_constructor_containers(find_class(ast.parse(code), class_name)))


def configured_state_keys(environment: Environment) -> list[str]:
    """The attributes the constructor takes from its configuration (``init_config``); the others have defaults."""
    return list(_configured_state_keys(environment.code, environment.class_name))


@functools.lru_cache(maxsize=_SOURCE_CACHE_SIZE)
def _configured_state_keys(code: str, class_name: str) -> tuple[str, ...]:
    class_node = find_class(ast.parse(code), class_name)
    keys: list[str] = []
    for node in class_node.body:
        if not (isinstance(node, ast.FunctionDef) and node.name == "__init__" and len(node.args.args) > 1):
            continue
        config_name = node.args.args[1].arg
        for statement in ast.walk(node):
            value = statement.value if isinstance(statement, ast.Assign | ast.AnnAssign) else None
            target = (
                statement.targets[0]
                if isinstance(statement, ast.Assign) and len(statement.targets) == 1
                else getattr(statement, "target", None)
            )
            if value is None or not isinstance(target, ast.Attribute) or not isinstance(target.value, ast.Name):
                continue
            reads_config = any(isinstance(n, ast.Name) and n.id == config_name for n in ast.walk(value))
            if target.value.id == "self" and reads_config and target.attr not in keys:
                keys.append(target.attr)
    return tuple(keys)


def _entity_for(collection: str, entities: list[StateEntity]) -> StateEntity | None:
    for entity in entities:
        if collection in _plural_forms(_snake(entity.name)):
            return entity
    for entity in entities:
        snake = _snake(entity.name)
        if collection.endswith(snake + "s") or collection.endswith(snake):
            return entity
    return None


class _MethodReader:
    """Reads what one method's ``"data"`` holds, following local names back to state collections."""

    def __init__(self, method: ast.FunctionDef, helpers: dict[str, ast.FunctionDef], infos: dict[str, CollectionInfo]):
        self.method = method
        self.helpers = helpers
        self.infos = infos
        self.bindings: dict[str, list[ast.expr]] = {}
        self.parameters = {a.arg for a in method.args.args[1:]}
        for node in ast.walk(method):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        self.bindings.setdefault(target.id, []).append(node.value)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                self.bindings.setdefault(node.target.id, []).append(node.value)
            elif isinstance(node, ast.For | ast.comprehension) and isinstance(node.target, ast.Name):
                self.bindings.setdefault(node.target.id, []).append(_IterationOf(node.iter))

    def data_expressions(self) -> list[ast.expr]:
        found: list[ast.expr] = []
        for node in ast.walk(self.method):
            if isinstance(node, ast.Return) and isinstance(node.value, ast.Dict):
                for key, value in zip(node.value.keys, node.value.values, strict=True):
                    if isinstance(key, ast.Constant) and key.value == "data":
                        found.append(value)
        return found

    def fields(self, expression: ast.expr, depth: int = 0, name_hint: str = "") -> dict[str, OutputField]:
        if depth > 6:
            return {}
        if isinstance(expression, _IterationOf):
            return self.fields(expression.iterable, depth + 1)
        collection = _collection_of(expression)
        if collection is not None and collection in self.infos:
            return self._record_fields(self.infos[collection])
        if isinstance(expression, ast.Dict):
            out: dict[str, OutputField] = {}
            for key, value in zip(expression.keys, expression.values, strict=True):
                if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                    continue
                nested = self.fields(value, depth + 1)
                if nested and not is_identifier_name(key.value):
                    out.update(nested)
                else:
                    out[key.value] = OutputField(key.value, _literal_type(value), key.value.replace("_", " "))
            return out
        if isinstance(expression, ast.ListComp | ast.GeneratorExp | ast.SetComp):
            return self.fields(expression.elt, depth + 1)
        if isinstance(expression, ast.Call):
            function = expression.func
            if isinstance(function, ast.Name) and function.id in _PASS_THROUGH_CALLS and expression.args:
                return self.fields(expression.args[0], depth + 1)
            if isinstance(function, ast.Attribute) and isinstance(function.value, ast.Name):
                if function.value.id == "self" and function.attr in self.helpers:
                    helper = _MethodReader(self.helpers[function.attr], self.helpers, self.infos)
                    merged: dict[str, OutputField] = {}
                    for node in ast.walk(helper.method):
                        if isinstance(node, ast.Return) and node.value is not None:
                            merged.update(helper.fields(node.value, depth + 1))
                    if merged:
                        return merged
                elif function.attr in ("get", "copy"):
                    return self.fields(function.value, depth + 1)
        if isinstance(expression, ast.Subscript):
            return self.fields(expression.value, depth + 1)
        if isinstance(expression, ast.Name):
            merged = {}
            for bound in self.bindings.get(expression.id, []):
                merged.update(self.fields(bound, depth + 1, name_hint=expression.id))
            if merged:
                return merged
            if is_identifier_name(expression.id):
                # An id the method holds (a parameter, or a freshly created id): the tool gives it back.
                return {expression.id: OutputField(expression.id, "string", expression.id.replace("_", " "))}
        return {}

    def _record_fields(self, info: CollectionInfo) -> dict[str, OutputField]:
        return {
            name: OutputField(name, type_name, self._field_description(info, name))
            for name, type_name in info.fields.items()
        }

    def _field_description(self, info: CollectionInfo, name: str) -> str:
        """Worded like a parameter's own description ("The customer's id"), which embeds close to it."""
        owner = info
        words = name.replace("_", " ")
        if is_identifier_name(name):
            stem = re.sub(r"_?ids?$", "", name)
            for other in self.infos.values():
                if stem and stem in (_snake(other.entity), other.name.rstrip("s")):
                    owner = other
                    break
            if owner is not info or stem in (_snake(info.entity), info.name.rstrip("s")):
                return f"The {_words(owner.entity)}'s id{_gloss(owner)}."
        return f"The {_words(info.entity)}'s {words}{_gloss(info)}."


class _IterationOf(ast.expr):
    """Marks a loop variable: it stands for one item of ``iterable``."""

    def __init__(self, iterable: ast.expr):
        super().__init__()
        self.iterable = iterable


def _collection_of(expression: ast.expr) -> str | None:
    """``self.X``, ``self.X.values()``, ``self.X[k]``, ``self.X.get(k)`` → ``X``."""
    node = expression
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("values", "get"):
        node = node.func.value
    elif isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


def _words(entity: str) -> str:
    return _snake(entity).replace("_", " ")


def _gloss(info: CollectionInfo) -> str:
    """`` (user: a customer account)`` from the entity's description, when it has one."""
    first = re.split(r"[.;]", info.description)[0].strip()
    if not first:
        return ""
    first = first[0].lower() + first[1:]
    return f" ({_words(info.entity)}: {first[:80]})"


def _literal_type(node: ast.expr) -> str:
    if isinstance(node, ast.Constant):
        return _PY_TO_JSON_TYPE.get(type(node.value).__name__, "string")
    if isinstance(node, ast.List | ast.ListComp):
        return "array"
    if isinstance(node, ast.Dict):
        return "object"
    return "string"


def _mutates_state(method: ast.FunctionDef, helpers: dict[str, ast.FunctionDef], seen: set[str]) -> bool:
    """Whether the method writes to the state: an assignment, deletion or mutating call on ``self.…`` or on a
    local name that aliases part of it (not on a copy such as ``dict(record)``); helpers it calls are followed."""
    self_derived = {"self"}
    if method.name.startswith("_"):
        # A helper may be handed records to change: its parameters count as parts of the state.
        self_derived.update(a.arg for a in method.args.args)
    changed = True
    while changed:
        before = len(self_derived)
        for node in ast.walk(method):
            if isinstance(node, ast.Assign) and _aliases(node.value, self_derived):
                for target in node.targets:
                    elements = target.elts if isinstance(target, ast.Tuple) else [target]
                    self_derived.update(e.id for e in elements if isinstance(e, ast.Name))
            if (
                isinstance(node, ast.For | ast.comprehension)
                and isinstance(node.target, ast.Name)
                and _reads_self(node.iter, self_derived)
            ):
                self_derived.add(node.target.id)
        changed = len(self_derived) > before
    for node in ast.walk(method):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = [t for t in node.targets if not isinstance(t, ast.Name)]
        elif isinstance(node, ast.AugAssign | ast.AnnAssign) and not isinstance(node.target, ast.Name):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        if any(_root_name(t) in self_derived for t in targets):
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in _MUTATING_METHODS and _root_name(node.func.value) in self_derived:
                return True
            if isinstance(node.func.value, ast.Name) and node.func.value.id == "self":
                helper = helpers.get(node.func.attr)
                if helper is not None and helper.name not in seen:
                    seen.add(helper.name)
                    if _mutates_state(helper, helpers, seen):
                        return True
    return False


def _aliases(expression: ast.expr, names: set[str]) -> bool:
    """Whether the value is (part of) an object the names refer to, rather than a new object."""
    if isinstance(expression, ast.Name | ast.Attribute | ast.Subscript):
        return _root_name(expression) in names
    if isinstance(expression, ast.Call) and isinstance(expression.func, ast.Attribute):
        owner = expression.func.value
        if isinstance(owner, ast.Name) and owner.id == "self":
            return True  # a helper's result: helpers hand out the records they look up
        return expression.func.attr in ("get", "setdefault", "pop") and _root_name(owner) in names
    if isinstance(expression, ast.IfExp):
        return _aliases(expression.body, names) or _aliases(expression.orelse, names)
    if isinstance(expression, ast.BoolOp):
        return any(_aliases(value, names) for value in expression.values)
    return False


def _reads_self(expression: ast.expr, names: set[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(expression))


def _root_name(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


@dataclass
class ToolSource:
    """Everything read from one tool's method."""

    name: str
    docstring: str
    state_changing: bool
    outputs: list[OutputField]
    outputs_from: OutputOrigin


def state_changing_tools(environment: Environment) -> dict[str, bool]:
    """Per tool with a method in the class: whether it changes the state (as :func:`read_tools` says)."""
    return dict(_state_changing(environment.code, environment.class_name, tuple(environment.tool_names)))


@functools.lru_cache(maxsize=_SOURCE_CACHE_SIZE)
def _state_changing(code: str, class_name: str, tools: tuple[str, ...]) -> tuple[tuple[str, bool], ...]:
    class_node = find_class(ast.parse(code), class_name)
    methods = {n.name: n for n in class_node.body if isinstance(n, ast.FunctionDef)}
    helpers = {name: node for name, node in methods.items() if name.startswith("_") and name != "__init__"}
    return tuple((name, _mutates_state(methods[name], helpers, set())) for name in tools if name in methods)


def read_tools(environment: Environment, sample_state: dict[str, Any] | None = None) -> dict[str, ToolSource]:
    """Per tool of the environment: its docstring, whether it changes the state, and its output fields."""
    tree = ast.parse(environment.code)
    for parent in ast.walk(tree):
        for child in ast.iter_child_nodes(parent):
            child.parent = parent  # type: ignore[attr-defined]  # ast nodes have no parent link; added for the walk up
    class_node = find_class(tree, environment.class_name)
    methods = {n.name: n for n in class_node.body if isinstance(n, ast.FunctionDef)}
    helpers = {name: node for name, node in methods.items() if name.startswith("_") and name != "__init__"}
    infos = collection_infos(environment, class_node, sample_state)
    read: dict[str, ToolSource] = {}
    for spec in environment.tools:
        method = methods.get(spec.name)
        if method is None:
            continue
        docstring = ast.get_docstring(method) or ""
        outputs = docstring_outputs(docstring)
        origin: OutputOrigin = "docstring" if outputs else "none"
        if not outputs:
            reader = _MethodReader(method, helpers, infos)
            merged: dict[str, OutputField] = {}
            for expression in reader.data_expressions():
                merged.update(reader.fields(expression))
            outputs = list(merged.values())
            origin = "source" if outputs else "none"
        read[spec.name] = ToolSource(
            name=spec.name,
            docstring=docstring,
            state_changing=_mutates_state(method, helpers, set()),
            outputs=outputs,
            outputs_from=origin,
        )
    return read
