"""One τ² domain's data model and agent tools, turned into one standalone environment class for the jail.

Upstream's ``data_model.py`` and ``tools.py`` are embedded verbatim except for their imports: what they import
from ``tau2`` (``DB``, ``ToolKitBase``, ``ToolType``, ``is_tool``) is replaced by the few lines below that do the
same, ``loguru``'s logger by one that drops messages, and the functions that load the database from a path are
left out. The domain's database is validated by upstream's own pydantic models when a session opens (the
database is the scenario's initial state: the sandbox caps code at 1 MB). The class receives every call through
``execute_call`` and answers as upstream's
``Environment.get_response`` does: the result through ``to_json_str``, an exception as ``"Error: <message>"``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from harness.benchmarks.arithmetic import ARITHMETIC_SOURCE, EVAL_CALL, EVAL_REPLACEMENT
from harness.benchmarks.tau2.source import Tau2Source, Tau2SourceError
from harness.benchmarks.tau2.tool_docs import tool_parameters_source

DISPATCHER = "execute_call"
ENVIRONMENT_CLASS = "Tau2Environment"
SCHEMA_PROBE_CLASS = "Tau2SchemaProbe"
ERROR_PREFIX = "Error: "
_DROPPED_IMPORT_ROOTS = ("tau2", "loguru")
_DROPPED_FUNCTIONS = ("get_db",)

# What upstream's domain code takes from tau2's own modules (logging, the database base, tool types), in the jail.
UPSTREAM_BASE_CLASSES = '''\
class _QuietLogger:
    def debug(self, *args, **kwargs):
        return None

    info = warning = error = debug


logger = _QuietLogger()


class BaseModelNoExtra(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DB(BaseModelNoExtra):
    """Domain database."""


class ToolType(str, Enum):
    READ = "read"
    WRITE = "write"
    THINK = "think"
    GENERIC = "generic"
'''

BASE_SOURCE = (
    """
import hashlib
import json
from copy import deepcopy
from datetime import date, datetime
from enum import Enum
from typing import Annotated, Any, Callable, Dict, List, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, create_model


"""
    + UPSTREAM_BASE_CLASSES
    + """

TOOL_TYPES = {}


def is_tool(tool_type=ToolType.READ):
    def decorator(func):
        TOOL_TYPES[func.__name__] = tool_type
        return func

    return decorator


class ToolKitBase:
    def __init__(self, db=None):
        self.db = db

"""
)
BASE_SOURCE += ARITHMETIC_SOURCE

ENVIRONMENT_SOURCE = '''

def to_json_str(resp):
    def _process(resp):
        if isinstance(resp, BaseModel):
            return resp.model_dump()
        elif isinstance(resp, str):
            return resp
        elif resp is None:
            return resp
        elif isinstance(resp, (int, float, bool)):
            return str(resp)
        elif isinstance(resp, list):
            return [_process(item) for item in resp]
        elif isinstance(resp, tuple):
            return tuple(_process(item) for item in resp)
        elif isinstance(resp, dict):
            return {{k: _process(v) for k, v in resp.items()}}
        elif isinstance(resp, (datetime, date)):
            return resp.isoformat()
        else:
            raise ValueError(f"Unsupported type: {{type(resp)}}")

    if not isinstance(resp, str):
        return json.dumps(_process(resp), default=str)
    return resp


class {cls}({toolkit}):
    """τ² {domain}: the agent's tools over the domain database (``db``)."""

    def __init__(self, init_config):
        # The session sets every key of its initial state as an attribute after construction: the keys are
        # taken here so that the database stays the one attribute (upstream's task initialisation data).
        config = dict(init_config)
        init_config.clear()
        super().__init__({db_class}.model_validate(config.get("db") or {{}}))
        agent_data = config.get("agent_data")
        if agent_data:
            self.db = _update_model(self.db, agent_data)
        for action in config.get("initialization_actions") or []:
            getattr(self, action["func_name"])(**action.get("arguments", {{}}))

    def execute_call(self, name, arguments):
        try:
            if name not in TOOL_TYPES or name.startswith("_"):
                raise ValueError(f"Tool '{{name}}' not found.")
            resp = getattr(self, name)(**arguments)
        except Exception as e:
            resp = f"Error: {{e}}"
        return to_json_str(resp)


def _merge(target, update):
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = value
    return target


def _update_model(model, update):
    return type(model).model_validate(_merge(model.model_dump(), update))

'''

SCHEMA_SOURCE = """

class {probe}({toolkit}):
    def __init__(self, init_config):
        super().__init__(None)

    def execute_call(self, name, arguments):
        schemas = []
        for tool_name, description, fields in TOOL_PARAMETERS:
            model = create_model("parameters", **fields)
            schemas.append({{"type": "function", "function": {{"name": tool_name, "description": description,
                            "parameters": model.model_json_schema()}}, "tool_type": TOOL_TYPES[tool_name].value}})
        return json.dumps(schemas)
"""


@dataclass
class DomainCode:
    domain: str
    toolkit_class: str
    db_class: str
    body: str
    """Base definitions, then upstream's data model and tools (imports removed)."""
    parameters: str
    """The tools' parameter fields as source (see :mod:`harness.benchmarks.tau2.tool_docs`)."""

    def environment_code(self) -> str:
        return self.body + ENVIRONMENT_SOURCE.format(
            cls=ENVIRONMENT_CLASS,
            toolkit=self.toolkit_class,
            domain=self.domain,
            db_class=self.db_class,
        )

    def schema_probe_code(self) -> str:
        return self.body + self.parameters + SCHEMA_SOURCE.format(probe=SCHEMA_PROBE_CLASS, toolkit=self.toolkit_class)


def _drops_import(node: ast.stmt) -> bool:
    if isinstance(node, ast.ImportFrom):
        return (node.module or "").split(".")[0] in _DROPPED_IMPORT_ROOTS
    if isinstance(node, ast.Import):
        return any(alias.name.split(".")[0] in _DROPPED_IMPORT_ROOTS for alias in node.names)
    return False


def strip_module(source: str, label: str) -> str:
    """``source`` without its imports of ``tau2``/``loguru`` and its database-loading functions, else verbatim."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise Tau2SourceError(f"{label} does not parse: {exc}") from exc
    drop: list[tuple[int, int]] = []
    for node in tree.body:
        end = node.end_lineno or node.lineno
        if _drops_import(node):
            drop.append((node.lineno, end))
        elif isinstance(node, ast.FunctionDef) and node.name in _DROPPED_FUNCTIONS:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            drop.append((first, end))
        elif isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            drop.append((node.lineno, end))
    lines = source.replace(EVAL_CALL, EVAL_REPLACEMENT).splitlines()
    kept = [line for number, line in enumerate(lines, 1) if not any(a <= number <= b for a, b in drop)]
    return "\n".join(kept) + "\n"


def _class_named(tree: ast.Module, base: str) -> str:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and any(isinstance(b, ast.Name) and b.id == base for b in node.bases):
            return node.name
    raise Tau2SourceError(f"no class derived from {base}")


def build_domain_code(source: Tau2Source, domain: str) -> DomainCode:
    data_model = source.read_python(f"domains/{domain}/data_model.py")
    tools = source.read_python(f"domains/{domain}/tools.py")
    try:
        db_class = _class_named(ast.parse(data_model), "DB")
        toolkit_class = _class_named(ast.parse(tools), "ToolKitBase")
    except Tau2SourceError as exc:
        raise Tau2SourceError(f"{source.path}: domains/{domain}: {exc}; is it τ²-bench {source.version}?") from exc
    body = (
        BASE_SOURCE
        + strip_module(data_model, f"domains/{domain}/data_model.py")
        + strip_module(tools, f"domains/{domain}/tools.py")
    )
    parameters = tool_parameters_source(tools, toolkit_class)
    return DomainCode(domain=domain, toolkit_class=toolkit_class, db_class=db_class, body=body, parameters=parameters)
