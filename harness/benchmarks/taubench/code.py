"""One τ-bench domain's tools, turned into one standalone environment class for the jail.

Each tool module (``tau_bench/envs/<domain>/tools/<name>.py``) is embedded verbatim except for its imports from
``tau_bench`` (the ``Tool`` base class is replaced by the few lines below) and ``calculate``'s ``eval``, which the
jail does not have (:mod:`harness.benchmarks.arithmetic` computes the same value). The class holds the domain's
data as its one attribute ``data`` (the scenario's initial state) and answers each call as upstream's
``Env.step`` does (``tau_bench/envs/base.py``): the tool's ``invoke(data=..., **kwargs)`` result, an exception as
``"Error: <message>"``, a name that is no tool as ``"Unknown action <name>"``.
"""

from __future__ import annotations

import ast

from harness.benchmarks.arithmetic import ARITHMETIC_SOURCE, EVAL_CALL, EVAL_REPLACEMENT
from harness.benchmarks.taubench.source import PACKAGE, DomainLayout, TauBenchSource, TauBenchSourceError

DISPATCHER = "execute_call"
ENVIRONMENT_CLASS = "TauBenchEnvironment"
SCHEMA_PROBE_CLASS = "TauBenchSchemaProbe"

BASE_SOURCE = '''
import json


class Tool:
    """The base class of τ-bench's tools (tau_bench/envs/tool.py)."""

    @staticmethod
    def invoke(*args, **kwargs):
        raise NotImplementedError

    @staticmethod
    def get_info():
        raise NotImplementedError
'''

ENVIRONMENT_SOURCE = '''

TOOLS_MAP = {{tool.get_info()["function"]["name"]: tool for tool in ALL_TOOLS}}


class {cls}:
    """τ-bench {domain}: the domain's tools over its data (``data``)."""

    def __init__(self, init_config):
        # The session sets every key of its initial state as an attribute after construction: the keys are taken
        # here so that the data stays the one attribute.
        config = dict(init_config)
        init_config.clear()
        self.data = config.get("data") or {{}}

    def execute_call(self, name, arguments):
        if name in TOOLS_MAP:
            try:
                observation = TOOLS_MAP[name].invoke(data=self.data, **arguments)
            except Exception as e:
                observation = f"Error: {{e}}"
            return observation
        return f"Unknown action {{name}}"
'''

SCHEMA_SOURCE = """

class {probe}:
    def __init__(self, init_config):
        init_config.clear()

    def execute_call(self, name, arguments):
        return json.dumps([tool.get_info() for tool in ALL_TOOLS])
"""


def _drops(node: ast.stmt) -> bool:
    if isinstance(node, ast.ImportFrom):
        return (node.module or "").split(".")[0] == PACKAGE
    if isinstance(node, ast.Import):
        return any(alias.name.split(".")[0] == PACKAGE for alias in node.names)
    return isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)


def strip_module(source: str, label: str) -> str:
    """``source`` without its imports of ``tau_bench`` (and any ``__main__`` block), else verbatim."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise TauBenchSourceError(f"{label} does not parse: {exc}") from exc
    drop = [(node.lineno, node.end_lineno or node.lineno) for node in tree.body if _drops(node)]
    lines = source.replace(EVAL_CALL, EVAL_REPLACEMENT).splitlines()
    kept = [line for number, line in enumerate(lines, 1) if not any(a <= number <= b for a, b in drop)]
    return "\n".join(kept) + "\n"


def tools_source(source: TauBenchSource, layout: DomainLayout) -> str:
    """The base definitions, every tool module in ``ALL_TOOLS`` order, then ``ALL_TOOLS`` itself."""
    parts = [BASE_SOURCE, ARITHMETIC_SOURCE]
    seen: set[str] = set()
    for module, class_name in layout.tools:
        relative = f"{layout.domain}/tools/{module}.py"
        text, tree = source.read_python(relative)
        defined = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
        if class_name not in defined:
            raise TauBenchSourceError(f"{PACKAGE}/envs/{relative} defines no class {class_name}")
        if module not in seen:
            seen.add(module)
            parts.append(f"\n\n# ---- {relative}\n" + strip_module(text, relative))
    parts.append(f"\n\nALL_TOOLS = [{', '.join(name for _, name in layout.tools)}]\n")
    return "".join(parts)


def environment_code(tools: str, layout: DomainLayout) -> str:
    """The environment class around ``tools`` (:func:`tools_source`)."""
    return tools + ENVIRONMENT_SOURCE.format(cls=ENVIRONMENT_CLASS, domain=layout.domain)


def schema_probe_code(tools: str) -> str:
    """The class that answers each tool's ``get_info()`` around ``tools`` (:func:`tools_source`)."""
    return tools + SCHEMA_SOURCE.format(probe=SCHEMA_PROBE_CLASS)
