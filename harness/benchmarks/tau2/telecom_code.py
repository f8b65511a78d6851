"""τ²'s telecom domain as one standalone environment class for the jail: both sides of its dual control.

Upstream's telecom environment (``tau2/domains/telecom/environment.py``) holds two toolkits: the agent's
(``TelecomTools`` over the company's database) and the user's (``TelecomUserTools`` over the user's phone and
surroundings), and after every call it synchronises the two states with its ``sync_tools``. Here upstream's
``data_model.py``, ``user_data_model.py``, ``tools.py`` and ``user_tools.py`` are embedded verbatim but for their
imports (as :mod:`harness.benchmarks.tau2.code` does for airline and retail), the date helper of ``utils.py``
and the ``sync_tools`` method of upstream's environment class are taken from their files by name, and the few
lines below replace what they import from ``tau2``. The class receives every call through ``execute_call`` with
the caller (``requestor``: the agent's ``assistant`` or the ``user``), runs it on that side's toolkit, then syncs,
and answers as upstream's ``Environment.get_response`` does.

The instance's state is ``tools`` (the agent's database ``db`` and the id counter) and ``user_tools`` (the user's
database ``db``). :meth:`TelecomCode.check_code` is the same code for the check process, where the
environment-assertion check rebuilds an instance from a recorded state.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from harness.benchmarks.tau2.code import UPSTREAM_BASE_CLASSES, strip_module
from harness.benchmarks.tau2.source import Tau2Source, Tau2SourceError
from harness.benchmarks.tau2.tool_docs import tool_parameters_source

TELECOM_CLASS = "Tau2TelecomEnvironment"
TELECOM_PROBE_CLASS = "Tau2TelecomSchemaProbe"
DOMAIN = "telecom"

BASE = (
    """
import datetime as _datetime_module
import hashlib
import json
from copy import deepcopy
from enum import Enum
from typing import Annotated, Any, Callable, Dict, List, Literal, Optional, Tuple, Union

import pydantic
from pydantic import BaseModel, ConfigDict, Field, create_model


"""
    + UPSTREAM_BASE_CLASSES
    + '''

_MARKED_TOOLS = {}


def is_tool(tool_type=ToolType.READ):
    def decorator(func):
        _MARKED_TOOLS[func] = tool_type
        return func

    return decorator


class ToolKitType(type):
    """Each toolkit class gets ``TOOL_TYPES``: its tools and its bases' by name, as upstream's metaclass finds them."""

    def __init__(cls, name, bases, attrs):
        found = {}
        for base in bases:
            found.update(getattr(base, "TOOL_TYPES", {}))
        for key, member in attrs.items():
            if isinstance(member, property):
                member = member.fget
            if callable(member) and member in _MARKED_TOOLS:
                found[key] = _MARKED_TOOLS[member]
        cls.TOOL_TYPES = found


def _merge(target, update):
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = value
    return target


def update_pydantic_model_with_dict(model_instance, update_data):
    return type(model_instance).model_validate(_merge(model_instance.model_dump(), update_data))


class ToolKitBase(metaclass=ToolKitType):
    def __init__(self, db=None):
        self.db = db

    def use_tool(self, tool_name, **kwargs):
        if tool_name not in self.TOOL_TYPES:
            raise ValueError(f"Tool '{tool_name}' not found.")
        return getattr(self, tool_name)(**kwargs)

    def update_db(self, update_data=None):
        if update_data is None:
            update_data = {}
        if self.db is None:
            raise ValueError("Database has not been initialized.")
        self.db = update_pydantic_model_with_dict(self.db, update_data)
'''
)

ENVIRONMENT = '''

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
        elif isinstance(resp, (_datetime_module.datetime, _datetime_module.date)):
            return resp.isoformat()
        else:
            raise ValueError(f"Unsupported type: {{type(resp)}}")

    if not isinstance(resp, str):
        return json.dumps(_process(resp), default=str)
    return resp


class {cls}:
    """τ² telecom: the agent's toolkit (``tools``) and the user's (``user_tools``), synced after every call."""

    def __init__(self, init_config):
        # The session sets every key of its initial state as an attribute after construction: the keys are
        # taken here so that the two toolkits stay the only attributes.
        config = dict(init_config)
        init_config.clear()
        self.tools = TelecomTools(TelecomDB.model_validate(config.get("db") or {{}}))
        self.user_tools = TelecomUserTools(TelecomUserDB.model_validate(config.get("user_db") or {{}}))
        self.sync_tools()
        data = config.get("initialization_data") or {{}}
        if data.get("agent_data"):
            self.tools.update_db(data["agent_data"])
        if data.get("user_data"):
            self.user_tools.update_db(data["user_data"])
        for action in config.get("initialization_actions") or []:
            self.run_env_function_call(action)
        self.sync_tools()

{sync_tools}

    def run_env_function_call(self, call):
        kit = self.user_tools if call.get("env_type") == "user" else self.tools
        result = getattr(kit, call["func_name"])(**(call.get("arguments") or {{}}))
        self.sync_tools()
        return result

    def execute_call(self, name, arguments, requestor="assistant"):
        try:
            kit = self.user_tools if requestor == "user" else self.tools
            resp = kit.use_tool(name, **arguments)
            self.sync_tools()
        except Exception as e:
            resp = f"Error: {{e}}"
        return to_json_str(resp)
'''

STATE_LOADER = """

def load_telecom_state(state):
    \"\"\"An environment whose two toolkits hold the databases of a recorded state (its initialisation is not
    re-run; the sync it opens with changes nothing in a state that was synced after its last call).\"\"\"
    return {cls}({{"db": state["tools"]["db"], "user_db": state["user_tools"]["db"]}})
"""

FRAMELESS = "__pydantic_reset_parent_namespace__=False"
"""Keeps pydantic from reading the defining frame when it builds a model class (``sys._getframe``, which the check
process refuses); the models are all defined at module level, where that frame adds nothing to the namespace."""

PROBE = """

class {probe}:
    def __init__(self, init_config):
        init_config.clear()

    def execute_call(self, name, arguments, requestor="assistant"):
        schemas = []
        for kit, entries in ((TelecomTools, TOOL_PARAMETERS), (TelecomUserTools, USER_TOOL_PARAMETERS)):
            side = []
            for tool_name, description, fields in entries:
                model = create_model("parameters", **fields)
                side.append({{"type": "function", "function": {{"name": tool_name, "description": description,
                             "parameters": model.model_json_schema()}}, "tool_type": kit.TOOL_TYPES[tool_name].value}})
            schemas.append(side)
        return json.dumps(schemas)
"""


@dataclass
class TelecomCode:
    body: str
    """The base definitions, upstream's two data models and two toolkits (imports removed), the date helpers."""
    sync_tools: str
    """Upstream's ``TelecomEnvironment.sync_tools``, indented as a method."""
    parameters: str

    def environment_code(self) -> str:
        return self.body + ENVIRONMENT.format(cls=TELECOM_CLASS, sync_tools=self.sync_tools)

    def check_code(self) -> str:
        """The environment for a check process: its model classes built without reading the caller's frame, and
        a loader from a recorded state (for the environment-assertion check)."""
        return frameless_models(self.environment_code()) + STATE_LOADER.format(cls=TELECOM_CLASS)

    def schema_probe_code(self) -> str:
        return self.body + self.parameters + PROBE.format(probe=TELECOM_PROBE_CLASS)


def frameless_models(source: str) -> str:
    """``source`` with :data:`FRAMELESS` added to the header of every class derived from a pydantic model."""
    models = {"BaseModel"}
    inserts: list[tuple[int, int]] = []
    for node in ast.parse(source).body:
        if not isinstance(node, ast.ClassDef):
            continue
        if any(isinstance(base, ast.Name) and base.id in models for base in node.bases):
            models.add(node.name)
            last = node.keywords[-1].value if node.keywords else node.bases[-1]
            assert last.end_lineno is not None and last.end_col_offset is not None
            inserts.append((last.end_lineno, last.end_col_offset))
    lines = source.split("\n")
    for line, column in reversed(inserts):
        text = lines[line - 1].encode()
        lines[line - 1] = (text[:column] + f", {FRAMELESS}".encode() + text[column:]).decode()
    return "\n".join(lines)


def _function_source(source: str, name: str, label: str, *, in_class: str | None = None) -> str:
    tree = ast.parse(source)
    body: list[ast.stmt] = tree.body
    if in_class is not None:
        owner = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == in_class), None)
        if owner is None:
            raise Tau2SourceError(f"{label} defines no class {in_class}")
        body = owner.body
    node = next((n for n in body if isinstance(n, ast.FunctionDef) and n.name == name), None)
    if node is None:
        raise Tau2SourceError(f"{label} defines no function {name}")
    segment = ast.get_source_segment(source, node, padded=True)
    if segment is None:
        raise Tau2SourceError(f"{label}: {name} has no source")
    return segment


def build_telecom_code(source: Tau2Source) -> TelecomCode:
    folder = f"domains/{DOMAIN}"
    files = {name: source.read_python(f"{folder}/{name}") for name in ("data_model.py", "user_data_model.py")}
    tools = source.read_python(f"{folder}/tools.py")
    user_tools = source.read_python(f"{folder}/user_tools.py")
    utils = source.read_python(f"{folder}/utils.py")
    environment = source.read_python(f"{folder}/environment.py")
    try:
        helpers = "\n\n" + "\n\n".join(_function_source(utils, name, f"{folder}/utils.py") for name in ("get_today",))
        sync = _function_source(environment, "sync_tools", f"{folder}/environment.py", in_class="TelecomEnvironment")
        parameters = tool_parameters_source(tools, "TelecomTools") + tool_parameters_source(
            user_tools, "TelecomUserTools"
        ).replace("TOOL_PARAMETERS =", "USER_TOOL_PARAMETERS =", 1)
    except Tau2SourceError as exc:
        raise Tau2SourceError(f"{source.path}: {exc}; is it τ²-bench {source.version}?") from exc
    body = (
        BASE
        + "\nfrom datetime import date, timedelta\n"
        + helpers
        + "\n\n"
        + strip_module(files["data_model.py"], f"{folder}/data_model.py")
        + strip_module(files["user_data_model.py"], f"{folder}/user_data_model.py")
        + strip_module(tools, f"{folder}/tools.py")
        + strip_module(user_tools, f"{folder}/user_tools.py")
    )
    return TelecomCode(body=body, sync_tools=sync, parameters=parameters)
