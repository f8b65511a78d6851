"""The tool dependency graph (EnvFactory): tools and their parameters as nodes, an edge from tool A to tool B when
an output of A can feed an input of B.

Every input and output parameter is embedded as ``"name (type): description"``; A → B is added when the cosine
similarity of an output of A and an input of B is above a threshold. A tool's outputs come, in order of
preference, from a ``Returns:`` section of its docstring, from a model asked once per tool to list them, or from
reading the method's source: what its ``"data"`` holds (records of a state collection, the keys of a dict
literal, an id it creates). Edges stay within one environment unless cross-environment edges are asked for
(an airline's ``customer_id`` does not feed a food-delivery order). An optional model pass prunes spurious
embedding edges, another may add edges within one environment (tools without parameters get their logical
predecessors this way). Each input is classed as given by the user or produced by a tool, by a model or by the
rule that an identifier some tool outputs is internal.
"""

from __future__ import annotations

import ast
import functools
import logging
import math
import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, Field

from harness.schema import Environment, StateEntity
from harness.toolspec import find_class

logger = logging.getLogger(__name__)

GRAPH_SCHEMA_VERSION = "1"
DEFAULT_THRESHOLD = 0.85

EmbedFunction = Callable[[list[str]], Awaitable[list[list[float]]]]
InputSource = Literal["user", "tool"]
OutputOrigin = Literal["docstring", "model", "source", "none"]

_RETURNS_HEADER = re.compile(r"^\s*(Returns?|Yields?):\s*$", re.MULTILINE)
_RETURN_FIELD = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:\(([^)]*)\))?\s*:\s*(.*)$")
_ID_NAME = re.compile(r"(^|_)ids?$")
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


class ParameterNode(BaseModel):
    id: str
    tool: str = Field(description="Id of the tool node this parameter belongs to.")
    name: str
    direction: Literal["input", "output"]
    type: str = "string"
    description: str = ""
    required: bool = False
    source: InputSource | None = Field(default=None, description="Inputs only: who provides the value.")

    @property
    def text(self) -> str:
        return embedding_text(self.name, self.type, self.description)


class ToolNode(BaseModel):
    id: str = Field(description="environment_id.tool_name")
    environment_id: str
    name: str
    description: str = ""
    state_changing: bool = False
    inputs: list[str] = Field(default_factory=list)
    outputs: list[str] = Field(default_factory=list)
    outputs_from: OutputOrigin = "none"


class ToolEdge(BaseModel):
    source: str
    target: str
    output: str | None = Field(default=None, description="Output of the source; None for a model-added edge.")
    input: str | None = Field(default=None, description="Input of the target it feeds; None if not parameter-bound.")
    similarity: float | None = None
    via: Literal["embedding", "name", "model"] = "embedding"
    reason: str | None = None


class ToolGraph(BaseModel):
    schema_version: str = GRAPH_SCHEMA_VERSION
    embedding_model: str = ""
    threshold: float = DEFAULT_THRESHOLD
    cross_environment: bool = False
    tools: list[ToolNode] = Field(default_factory=list)
    parameters: list[ParameterNode] = Field(default_factory=list)
    edges: list[ToolEdge] = Field(default_factory=list)
    details: dict[str, Any] = Field(default_factory=dict)

    def model_post_init(self, _context: Any) -> None:
        self._index()

    def _index(self) -> None:
        self._tools = {t.id: t for t in self.tools}
        self._parameters = {p.id: p for p in self.parameters}
        self._producers: dict[tuple[str, str], list[str]] = {}
        self._successors: dict[str, list[str]] = {}
        self._predecessors: dict[str, list[str]] = {}
        for edge in self.edges:
            if edge.input is not None:
                bucket = self._producers.setdefault((edge.target, edge.input), [])
                if edge.source not in bucket:
                    bucket.append(edge.source)
            successors = self._successors.setdefault(edge.source, [])
            if edge.target not in successors:
                successors.append(edge.target)
            predecessors = self._predecessors.setdefault(edge.target, [])
            if edge.source not in predecessors:
                predecessors.append(edge.source)

    def tool(self, tool_id: str) -> ToolNode:
        return self._tools[tool_id]

    def has_tool(self, tool_id: str) -> bool:
        return tool_id in self._tools

    def parameter(self, tool_id: str, direction: str, name: str) -> ParameterNode:
        return self._parameters[parameter_id(tool_id, direction, name)]

    def inputs(self, tool_id: str) -> list[ParameterNode]:
        tool = self._tools[tool_id]
        return [self._parameters[parameter_id(tool_id, "input", name)] for name in tool.inputs]

    def outputs(self, tool_id: str) -> list[ParameterNode]:
        tool = self._tools[tool_id]
        return [self._parameters[parameter_id(tool_id, "output", name)] for name in tool.outputs]

    def producers(self, tool_id: str, input_name: str) -> list[str]:
        """Tools with an output that feeds this input (sorted, so sampling is reproducible)."""
        return sorted(self._producers.get((tool_id, input_name), []))

    def successors(self, tool_id: str) -> list[str]:
        return sorted(self._successors.get(tool_id, []))

    def predecessors(self, tool_id: str) -> list[str]:
        return sorted(self._predecessors.get(tool_id, []))

    def has_edge(self, source: str, target: str) -> bool:
        return target in self._successors.get(source, [])

    def tools_of(self, environment_id: str) -> list[ToolNode]:
        return [t for t in self.tools if t.environment_id == environment_id]

    @property
    def environment_ids(self) -> list[str]:
        return sorted({t.environment_id for t in self.tools})

    def add_edges(self, edges: Iterable[ToolEdge]) -> None:
        self.edges.extend(edges)
        self._index()

    def replace_edges(self, edges: Iterable[ToolEdge]) -> None:
        self.edges = list(edges)
        self._index()

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(orjson.dumps(self.model_dump(mode="json"), option=orjson.OPT_INDENT_2))

    @classmethod
    def load(cls, path: Path) -> ToolGraph:
        return cls.model_validate(orjson.loads(path.read_bytes()))


def parameter_id(tool_id: str, direction: str, name: str) -> str:
    return f"{tool_id}:{'in' if direction == 'input' else 'out'}:{name}"


def tool_id(environment_id: str, tool_name: str) -> str:
    return f"{environment_id}.{tool_name}"


def embedding_text(name: str, type_name: str, description: str) -> str:
    return f"{name} ({type_name}): {description}".strip()


def is_identifier_name(name: str) -> bool:
    return bool(_ID_NAME.search(name))


# ---------------------------------------------------------------------------------------- output fields


@dataclass(frozen=True)
class OutputField:
    name: str
    type: str = "string"
    description: str = ""


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
            child.parent = parent  # type: ignore[attr-defined]
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


# ---------------------------------------------------------------------------------------------- building


OutputLister = Callable[[Environment, str], Awaitable[list[OutputField] | None]]
SourceClassifier = Callable[[Environment, list[ParameterNode]], Awaitable[dict[str, InputSource] | None]]
EdgeProposer = Callable[[Environment, ToolGraph], Awaitable[list[ToolEdge]]]
EdgePruner = Callable[[Environment, ToolGraph, list[ToolEdge]], Awaitable[list[ToolEdge]]]


@dataclass
class GraphModel:
    """Model-backed passes of graph construction; each may be left out (the deterministic rule is used)."""

    list_outputs: OutputLister | None = None
    classify_inputs: SourceClassifier | None = None
    propose_edges: EdgeProposer | None = None
    prune_edges: EdgePruner | None = None  # given the embedding edges into one environment: the spurious ones


def _nodes_for(environment: Environment, sources: dict[str, ToolSource]) -> tuple[list[ToolNode], list[ParameterNode]]:
    tools: list[ToolNode] = []
    parameters: list[ParameterNode] = []
    for spec in environment.tools:
        source = sources.get(spec.name)
        node_id = tool_id(environment.id, spec.name)
        schema = spec.function.parameters or {}
        required = set(schema.get("required") or [])
        inputs = []
        for name, prop in (schema.get("properties") or {}).items():
            inputs.append(name)
            parameters.append(
                ParameterNode(
                    id=parameter_id(node_id, "input", name),
                    tool=node_id,
                    name=name,
                    direction="input",
                    type=str(prop.get("type") or "string"),
                    description=str(prop.get("description") or ""),
                    required=name in required,
                )
            )
        outputs = []
        for output in source.outputs if source else []:
            outputs.append(output.name)
            parameters.append(
                ParameterNode(
                    id=parameter_id(node_id, "output", output.name),
                    tool=node_id,
                    name=output.name,
                    direction="output",
                    type=output.type,
                    description=output.description,
                )
            )
        tools.append(
            ToolNode(
                id=node_id,
                environment_id=environment.id,
                name=spec.name,
                description=spec.function.description,
                state_changing=source.state_changing if source else True,
                inputs=inputs,
                outputs=outputs,
                outputs_from=source.outputs_from if source else "none",
            )
        )
    return tools, parameters


def _normalized(vectors: Sequence[Sequence[float]]) -> Any:
    import numpy as np

    matrix = np.asarray(vectors, dtype=np.float32)
    if matrix.ndim != 2:
        matrix = matrix.reshape(len(vectors), -1)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return matrix / norms


def similarity_edges(
    graph_tools: list[ToolNode],
    parameters: list[ParameterNode],
    vectors: dict[str, Any],
    threshold: float,
    cross_environment: bool,
) -> list[ToolEdge]:
    """A → B for every (output of A, input of B) pair whose cosine similarity is above ``threshold``; the best
    pair per (A, B, input of B) is kept. Computed as one matrix product per block of outputs."""
    import numpy as np

    outputs = [p for p in parameters if p.direction == "output"]
    inputs = [p for p in parameters if p.direction == "input"]
    if not outputs or not inputs:
        return []
    tool_index = {t.id: i for i, t in enumerate(graph_tools)}
    environment_index = {e: i for i, e in enumerate(sorted({t.environment_id for t in graph_tools}))}
    tool_environment = np.asarray([environment_index[t.environment_id] for t in graph_tools])
    output_tool = np.asarray([tool_index[p.tool] for p in outputs])
    input_tool = np.asarray([tool_index[p.tool] for p in inputs])
    output_matrix = _normalized([vectors[p.text] for p in outputs])
    input_matrix = _normalized([vectors[p.text] for p in inputs])
    found_rows, found_columns, found_scores = [], [], []
    block = 1024
    for start in range(0, len(outputs), block):
        scores = output_matrix[start : start + block] @ input_matrix.T
        rows, columns = np.nonzero(scores > threshold)
        keep = output_tool[start + rows] != input_tool[columns]
        if not cross_environment:
            keep &= tool_environment[output_tool[start + rows]] == tool_environment[input_tool[columns]]
        found_rows.append(start + rows[keep])
        found_columns.append(columns[keep])
        found_scores.append(scores[rows[keep], columns[keep]])
    rows = np.concatenate(found_rows)
    columns = np.concatenate(found_columns)
    similarity = np.concatenate(found_scores)
    if not len(rows):
        return []
    # The best output of each source tool for each input: one edge per (source tool, input parameter).
    keys = output_tool[rows].astype(np.int64) * len(inputs) + columns
    order = np.lexsort((-similarity, keys))
    _, first = np.unique(keys[order], return_index=True)
    edges = []
    for position in order[first].tolist():
        output = outputs[int(rows[position])]
        target = inputs[int(columns[position])]
        edges.append(
            ToolEdge(
                source=output.tool,
                target=target.tool,
                output=output.name,
                input=target.name,
                similarity=round(float(similarity[position]), 4),
            )
        )
    return sorted(edges, key=lambda e: (e.source, e.target, e.input or ""))


def name_edges(
    graph_tools: list[ToolNode], parameters: list[ParameterNode], existing: list[ToolEdge]
) -> list[ToolEdge]:
    """A → B within one environment when A outputs an identifier with exactly the name of an input of B: the
    same name for an id in one system is the same thing, however far apart the two descriptions embed."""
    environment_of = {t.id: t.environment_id for t in graph_tools}
    producers: dict[tuple[str, str], list[str]] = {}
    for parameter in parameters:
        if parameter.direction == "output" and is_identifier_name(parameter.name):
            producers.setdefault((environment_of[parameter.tool], parameter.name), []).append(parameter.tool)
    present = {(e.source, e.target, e.input) for e in existing}
    added: list[ToolEdge] = []
    for parameter in parameters:
        if parameter.direction != "input":
            continue
        for source in producers.get((environment_of[parameter.tool], parameter.name), []):
            if source != parameter.tool and (source, parameter.tool, parameter.name) not in present:
                added.append(
                    ToolEdge(
                        source=source, target=parameter.tool, output=parameter.name, input=parameter.name, via="name"
                    )
                )
    return sorted(added, key=lambda e: (e.source, e.target, e.input or ""))


def classify_by_rule(graph: ToolGraph, environment_id: str) -> dict[str, InputSource]:
    """An input is produced by a tool when it names an identifier and some tool of its environment outputs it
    (by name or by an edge into it); every other input comes from the user."""
    output_names = {
        name for tool in graph.tools_of(environment_id) for name in tool.outputs if is_identifier_name(name)
    }
    classes: dict[str, InputSource] = {}
    for tool in graph.tools_of(environment_id):
        for parameter in graph.inputs(tool.id):
            produced = parameter.name in output_names or any(
                graph.tool(p).environment_id == environment_id for p in graph.producers(tool.id, parameter.name)
            )
            classes[parameter.id] = "tool" if is_identifier_name(parameter.name) and produced else "user"
    return classes


async def build_graph(
    environments: Sequence[Environment],
    *,
    embed: EmbedFunction | None = None,
    embedding_model: str | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    cross_environment: bool = False,
    sample_states: dict[str, dict[str, Any]] | None = None,
    model: GraphModel | None = None,
    match_names: bool = True,
) -> ToolGraph:
    """Build the graph of ``environments``. ``embed`` defaults to :func:`harness.llm.embeddings.embed` with
    ``embedding_model`` (None: the offline all-MiniLM-L6-v2). ``sample_states`` (environment id → a state)
    let output fields be read off real records. ``match_names`` adds the same-name identifier edges of
    :func:`name_edges` to the similarity edges."""
    model = model or GraphModel()
    if embed is None:
        from harness.llm.embeddings import embed as default_embed

        async def embed_texts(texts: list[str]) -> list[list[float]]:
            return await default_embed(texts, embedding_model)

        embed = embed_texts
    tools: list[ToolNode] = []
    parameters: list[ParameterNode] = []
    for environment in environments:
        sources = read_tools(environment, (sample_states or {}).get(environment.id))
        if model.list_outputs is not None:
            for name, source in sources.items():
                if source.outputs_from == "docstring":
                    continue
                listed = await model.list_outputs(environment, name)
                if listed:
                    source.outputs, source.outputs_from = listed, "model"
        env_tools, env_parameters = _nodes_for(environment, sources)
        tools.extend(env_tools)
        parameters.extend(env_parameters)
    texts = sorted({p.text for p in parameters})
    embedded = await embed(texts) if texts else []
    vectors = dict(zip(texts, embedded, strict=True))
    graph = ToolGraph(
        embedding_model=embedding_model or "all-MiniLM-L6-v2",
        threshold=threshold,
        cross_environment=cross_environment,
        tools=tools,
        parameters=parameters,
        edges=similarity_edges(tools, parameters, vectors, threshold, cross_environment),
    )
    by_id = {e.id: e for e in environments}
    pruned: list[ToolEdge] = []
    if model.prune_edges is not None:
        for environment in environments:
            into = [e for e in graph.edges if graph.tool(e.target).environment_id == environment.id]
            if not into:
                continue
            spurious = {_edge_key(e) for e in await model.prune_edges(environment, graph, into)}
            pruned += [e for e in into if _edge_key(e) in spurious]
        dropped = {_edge_key(e) for e in pruned}
        graph.replace_edges(e for e in graph.edges if _edge_key(e) not in dropped)
    if match_names:
        graph.add_edges(name_edges(tools, parameters, graph.edges))
    if model.propose_edges is not None:
        added: list[ToolEdge] = []
        for environment in environments:
            for edge in await model.propose_edges(environment, graph):
                if _valid_model_edge(graph, edge, environment.id):
                    added.append(edge.model_copy(update={"via": "model"}))
        graph.add_edges(added)
    classes: dict[str, InputSource] = {}
    for environment_id in graph.environment_ids:
        classes.update(classify_by_rule(graph, environment_id))
        if model.classify_inputs is not None:
            inputs = [p for t in graph.tools_of(environment_id) for p in graph.inputs(t.id)]
            answer = await model.classify_inputs(by_id[environment_id], inputs) if inputs else None
            for parameter_key, given_by in (answer or {}).items():
                if parameter_key in classes:
                    classes[parameter_key] = given_by
    for parameter in graph.parameters:
        if parameter.direction == "input":
            parameter.source = classes.get(parameter.id, "user")
    graph.details = {
        "environments": len(environments),
        "tools": len(tools),
        "parameters": len(parameters),
        "edges": len(graph.edges),
        "edges_by_rule": {via: sum(e.via == via for e in graph.edges) for via in ("embedding", "name", "model")},
        "cross_environment_edges": sum(
            graph.tool(e.source).environment_id != graph.tool(e.target).environment_id for e in graph.edges
        ),
        "pruned": [e.model_dump(mode="json") for e in pruned],
        "outputs_from": {
            origin: sum(t.outputs_from == origin for t in tools) for origin in ("docstring", "model", "source", "none")
        },
    }
    return graph


def _edge_key(edge: ToolEdge) -> tuple[str, str, str | None, str | None]:
    return (edge.source, edge.target, edge.output, edge.input)


def _valid_model_edge(graph: ToolGraph, edge: ToolEdge, environment_id: str) -> bool:
    if edge.source == edge.target or not graph.has_tool(edge.source) or not graph.has_tool(edge.target):
        return False
    if graph.tool(edge.source).environment_id != environment_id:
        return False
    if graph.tool(edge.target).environment_id != environment_id or graph.has_edge(edge.source, edge.target):
        return False
    return edge.input is None or edge.input in graph.tool(edge.target).inputs


# ---------------------------------------------------------------------------------------------- picture


EDGE_STYLES: dict[str, tuple[str, Literal["solid", "dashed", "dotted"], str]] = {
    "embedding": ("tab:gray", "solid", "embedding similarity"),
    "name": ("tab:green", "dashed", "same identifier name"),
    "model": ("tab:purple", "dotted", "added by the model"),
}
PANEL_SIZE = (6.4, 4.8)


COLUMN_NAMES = ("entry points", "lookups", "state changes")


def _columns(graph: ToolGraph, environment_id: str) -> dict[str, int]:
    """Each tool's column: 0 for tools nothing in their environment feeds (where chains start), 1 for the
    other read tools, 2 for state-changing tools (where chains end)."""
    members = graph.tools_of(environment_id)
    inside = {t.id for t in members}
    fed = {e.target for e in graph.edges if e.source in inside and e.source != e.target}
    return {t.id: 2 if t.state_changing else (1 if t.id in fed else 0) for t in members}


def draw_graph(graph: ToolGraph, path: Path, *, environments: Sequence[str] | None = None) -> None:
    """A PNG with one panel per environment: tools in three columns (entry points, lookups, state changes; read
    tools blue, state-changing tools orange), edges styled by how they were found, and a legend. Edges between
    environments cannot be drawn across panels; each panel's title counts those that leave it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    chosen = list(environments) if environments else graph.environment_ids
    columns = max(1, math.ceil(math.sqrt(len(chosen))))
    rows = max(1, math.ceil(len(chosen) / columns))
    figure, grid = plt.subplots(
        rows, columns, figsize=(PANEL_SIZE[0] * columns, PANEL_SIZE[1] * rows + 0.8), squeeze=False
    )
    for axes in grid.flat:
        axes.set_axis_off()
    for axes, environment_id in zip(grid.flat, chosen, strict=False):
        column_of = _columns(graph, environment_id)
        by_column: dict[int, list[str]] = {}
        for tool_key in sorted(column_of):
            by_column.setdefault(column_of[tool_key], []).append(tool_key)
        tallest = max((len(m) for m in by_column.values()), default=1)
        positions: dict[str, tuple[float, float]] = {}
        for column, members in by_column.items():
            step = tallest / max(1, len(members))
            for row, tool_key in enumerate(members):
                positions[tool_key] = (float(column), -(row + 0.5) * step)
        leaving = 0
        for edge in graph.edges:
            if (edge.source in positions) != (edge.target in positions):
                leaving += 1
                continue
            if edge.source not in positions or edge.source == edge.target:
                continue
            color, style, _ = EDGE_STYLES[edge.via]
            axes.annotate(
                "",
                xy=positions[edge.target],
                xytext=positions[edge.source],
                arrowprops={
                    "arrowstyle": "-|>",
                    "color": color,
                    "linestyle": style,
                    "lw": 0.9,
                    "alpha": 0.7,
                    "shrinkA": 7,
                    "shrinkB": 7,
                    "connectionstyle": "arc3,rad=0.12",
                },
            )
        for tool_key, (x, y) in positions.items():
            tool = graph.tool(tool_key)
            axes.scatter([x], [y], s=60, color="tab:orange" if tool.state_changing else "tab:blue", zorder=3)
            side = {0: ("right", -0.06), 1: ("center", 0.0), 2: ("left", 0.06)}[column_of[tool_key]]
            offset = 0.0 if column_of[tool_key] != 1 else 0.25
            axes.text(x + side[1], y + offset, tool.name, fontsize=7, ha=side[0], va="center", zorder=4)
        for column, label in enumerate(COLUMN_NAMES):
            if column in by_column:
                axes.text(column, 0.45, label, fontsize=7, ha="center", color="dimgray", style="italic")
        title = f"{environment_id}: {len(positions)} tools"
        if leaving:
            title += f", {leaving} cross-environment edges (not drawn)"
        axes.set_title(title, fontsize=9)
        axes.set_xlim(-1.1, 3.1)
        axes.set_ylim(-tallest - 0.3, 0.8)
    handles = [
        Line2D([], [], marker="o", linestyle="", color="tab:blue", label="read tool"),
        Line2D([], [], marker="o", linestyle="", color="tab:orange", label="state-changing tool"),
        *(Line2D([], [], color=c, linestyle=ls, label=f"edge: {label}") for c, ls, label in EDGE_STYLES.values()),
    ]
    figure.legend(handles=handles, loc="lower center", ncol=3, fontsize=8, frameon=False)
    figure.suptitle(
        f"Tool dependency graph: {sum(len(graph.tools_of(e)) for e in chosen)} tools, "
        f"embedding threshold {graph.threshold}",
        fontsize=10,
    )
    figure.tight_layout(rect=(0, 0.07, 1, 0.97))
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=150, bbox_inches="tight")
    plt.close(figure)


# ------------------------------------------------------------------------------------------- model passes


def model_graph_passes(asker: Any, usage: Any, *, prune: bool = False) -> GraphModel:
    """The model-backed passes (output listing, input classing, edge proposals, and with ``prune`` the pruning
    of spurious embedding edges), asked through a :class:`synth.answers.Asker` (answers are validated and
    cached by the model client, so each tool's outputs are asked for once)."""
    from synth.records import Answer, Reasoned
    from synth.templates import load_template

    class OutputItem(Answer):
        name: str
        type: str = "string"
        description: str = ""

    class OutputsAnswer(Reasoned):
        outputs: list[OutputItem] = Field(default_factory=list)

    class SourcesAnswer(Reasoned):
        sources: dict[str, Literal["user", "tool"]] = Field(default_factory=dict)

    class EdgeItem(Answer):
        source: str
        target: str
        input: str | None = None
        reason: str = ""

    class EdgesAnswer(Reasoned):
        edges: list[EdgeItem] = Field(default_factory=list)

    class SpuriousItem(Answer):
        source: str
        target: str
        output: str | None = None
        input: str | None = None
        reason: str = ""

    class PruneAnswer(Reasoned):
        spurious: list[SpuriousItem] = Field(default_factory=list)

    async def list_outputs(environment: Environment, tool_name: str) -> list[OutputField] | None:
        class_node = find_class(ast.parse(environment.code), environment.class_name)
        method = next((n for n in class_node.body if isinstance(n, ast.FunctionDef) and n.name == tool_name), None)
        if method is None:
            return None
        messages = load_template("query_graph_outputs").render(
            tool=tool_name, source=ast.get_source_segment(environment.code, method) or ""
        )
        answer = await asker.json(messages, OutputsAnswer, "graph_outputs", usage)
        return [OutputField(o.name, o.type, o.description) for o in answer.outputs if o.name.isidentifier()]

    async def classify_inputs(environment: Environment, inputs: list[ParameterNode]) -> dict[str, InputSource]:
        listing = "\n".join(f"{p.id}: {p.tool.split('.', 1)[1]}, {p.name}, {p.description}" for p in inputs)
        messages = load_template("query_graph_sources").render(environment=environment.name, parameters=listing)
        answer = await asker.json(messages, SourcesAnswer, "graph_sources", usage)
        return dict(answer.sources)

    async def propose_edges(environment: Environment, graph: ToolGraph) -> list[ToolEdge]:
        tools = graph.tools_of(environment.id)
        listing = "\n".join(f"- {t.name}(inputs: {t.inputs}; outputs: {t.outputs}): {t.description}" for t in tools)
        edges = "\n".join(
            f"- {e.source.split('.', 1)[1]} -> {e.target.split('.', 1)[1]}"
            for e in graph.edges
            if e.source.startswith(environment.id + ".") and e.target.startswith(environment.id + ".")
        )
        messages = load_template("query_graph_edges").render(
            environment=environment.name, tools=listing, edges=edges or "(none)"
        )
        answer = await asker.json(messages, EdgesAnswer, "graph_edges", usage)
        return [
            ToolEdge(
                source=tool_id(environment.id, e.source),
                target=tool_id(environment.id, e.target),
                input=e.input,
                via="model",
                reason=e.reason or None,
            )
            for e in answer.edges
        ]

    def short(node_id: str) -> str:
        return node_id.split(".", 1)[1]

    async def prune_edges(environment: Environment, graph: ToolGraph, edges: list[ToolEdge]) -> list[ToolEdge]:
        tools = graph.tools_of(environment.id)
        listing = "\n".join(f"- {t.name}(inputs: {t.inputs}; outputs: {t.outputs}): {t.description}" for t in tools)
        lines = "\n".join(
            f"- {e.source if graph.tool(e.source).environment_id != environment.id else short(e.source)}.{e.output}"
            f" -> {short(e.target)}.{e.input} ({e.similarity})"
            for e in edges
        )
        messages = load_template("query_graph_prune").render(environment=environment.name, tools=listing, edges=lines)
        answer = await asker.json(messages, PruneAnswer, "graph_prune", usage)
        named = {(s.source, s.output, s.target, s.input) for s in answer.spurious}
        return [
            e
            for e in edges
            if (short(e.source), e.output, short(e.target), e.input) in named
            or (e.source, e.output, short(e.target), e.input) in named
        ]

    return GraphModel(
        list_outputs=list_outputs,
        classify_inputs=classify_inputs,
        propose_edges=propose_edges,
        prune_edges=prune_edges if prune else None,
    )
