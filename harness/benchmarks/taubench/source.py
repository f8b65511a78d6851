"""Reading a checkout of τ-bench (sierra-research/tau-bench) as text, never importing it.

A domain is a folder ``tau_bench/envs/<domain>/`` with ``env.py`` (its splits, as ``case "<split>": from
...tasks_<split> import <NAME> as tasks``, and its ``terminate_tools``), ``tools/__init__.py`` (``ALL_TOOLS``, each
class imported from its own module), ``data/__init__.py`` (``load_data``: JSON files read into one dict) and
``wiki.md``. Tasks are the literal ``Task(...)``/``Action(...)`` calls of the split's module, read with ``ast``.

Every file is read through :class:`harness.files.SourceTree`: a symbolic link is refused with its path, a file
name the checkout's own code gives (``load_data``'s JSON files) must stay inside the domain's data folder, sizes
and JSON are bounded, and the commit is read from ``.git`` and validated (:func:`harness.files.checkout_commit`).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.files import (
    FOLDER,
    RELEASE_BUDGET,
    SOURCE_TEXT_BYTES,
    SYMLINK,
    SourceTree,
    checkout_commit,
    parse_python,
    require_relative,
)
from harness.names import is_safe_id

PACKAGE = "tau_bench"
SOURCE_LICENSE = "mit"
SOURCE_LICENSE_NOTE = "MIT (Copyright (c) 2024 Sierra Research)"
_MARKERS = ("tau_bench/envs/base.py", "tau_bench/types.py")
_DOMAIN_FILES = ("env.py", "tools/__init__.py", "data/__init__.py")


class TauBenchSourceError(ValueError):
    """The source is not a usable τ-bench checkout."""


@dataclass
class DomainLayout:
    """What a domain's ``env.py``, ``tools/__init__.py`` and ``data/__init__.py`` say, read as text."""

    domain: str
    splits: dict[str, tuple[str, str]]
    """split → (module file name without ``.py``, list name) of its tasks."""
    terminate_tools: list[str]
    tools: list[tuple[str, str]]
    """(module file name without ``.py``, class name) of each tool, in ``ALL_TOOLS`` order."""
    data_files: dict[str, str] = field(default_factory=dict)
    """``load_data``'s key → the JSON file it reads (a path inside the domain's ``data`` folder)."""


def _literal(node: ast.expr, where: str) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError) as exc:
        raise TauBenchSourceError(f"{where}: not a literal ({ast.unparse(node)[:80]}): {exc}") from None


class TauBenchSource:
    """A τ-bench checkout (a folder holding ``tau_bench/``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if not path.exists():
            raise TauBenchSourceError(f"{path} does not exist")
        if not path.is_dir():
            raise TauBenchSourceError(f"{path} is a file; expected a τ-bench checkout folder (git clone of tau-bench)")
        self.tree = SourceTree(path, budget=RELEASE_BUDGET)
        missing = [marker for marker in _MARKERS if not self.tree.exists(marker)]
        if missing:
            entries = self.tree.entries()
            found = sorted(name + ("/" if kind == FOLDER else "") for name, kind in entries.items())[:8]
            raise TauBenchSourceError(
                f"{path} is not a τ-bench checkout: found {', '.join(found) or 'nothing'}; expected "
                f"{' and '.join(_MARKERS)} with tau_bench/envs/<domain>/(env.py, tools/, data/)"
            )
        self.envs = self.tree.sub(f"{PACKAGE}/envs")
        self.license = SOURCE_LICENSE
        self.commit = checkout_commit(self.tree) or "unknown"

    def where(self, relative: str) -> str:
        """How a message names file ``relative`` of ``tau_bench/envs``."""
        return self.envs.where(relative)

    def domains(self) -> list[str]:
        """The domain folders of ``tau_bench/envs`` (a symbolic link among them is refused, not skipped)."""
        found = []
        for name, kind in self.envs.entries().items():
            if kind == SYMLINK:
                self.envs.is_dir(name)  # raises, naming the link
            if kind == FOLDER and all(self.envs.exists(f"{name}/{file}") for file in _DOMAIN_FILES):
                found.append(name)
        return sorted(found)

    def read_text(self, relative: str) -> str:
        if not self.envs.exists(relative):
            raise TauBenchSourceError(f"{self.path} has no {PACKAGE}/envs/{relative}")
        return self.envs.read_text(relative, max_bytes=SOURCE_TEXT_BYTES)

    def read_json(self, relative: str) -> Any:
        """A JSON file of ``tau_bench/envs``, decoded under the reader's budget of bytes, values and nesting."""
        if not self.envs.exists(relative):
            raise TauBenchSourceError(f"{self.path} has no {PACKAGE}/envs/{relative}")
        return self.envs.read_json(relative)

    def read_python(self, relative: str) -> tuple[str, ast.Module]:
        """A module's text and its syntax tree (it is parsed, never run)."""
        text = self.read_text(relative)
        return text, parse_python(text, self.where(relative))

    def parse(self, relative: str) -> ast.Module:
        return self.read_python(relative)[1]

    def layout(self, domain: str) -> DomainLayout:
        available = self.domains()
        if domain not in available:
            raise TauBenchSourceError(
                f"no domain {domain!r} in {self.path}; it holds {', '.join(available) or 'no domain'}"
            )
        if not is_safe_id(f"taubench-{domain}"):
            raise TauBenchSourceError(
                f"{self.where(domain)}: the domain's folder name cannot name an environment (use letters, digits, "
                "'.', '_' or '-')"
            )
        splits, terminate = self._env_py(domain)
        return DomainLayout(
            domain=domain,
            splits=splits,
            terminate_tools=terminate,
            tools=self._tools(domain),
            data_files=self._data_files(domain),
        )

    def _env_py(self, domain: str) -> tuple[dict[str, tuple[str, str]], list[str]]:
        tree = self.parse(f"{domain}/env.py")
        splits: dict[str, tuple[str, str]] = {}
        terminate: list[str] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.match_case) and isinstance(node.pattern, ast.MatchValue):
                split = node.pattern.value
                imports = [s for s in node.body if isinstance(s, ast.ImportFrom)]
                if isinstance(split, ast.Constant) and isinstance(split.value, str) and imports:
                    module = (imports[0].module or "").rsplit(".", 1)[-1]
                    splits[split.value] = (module, imports[0].names[0].name)
            elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Attribute) and t.attr == "terminate_tools" for t in node.targets
            ):
                terminate = [str(name) for name in _literal(node.value, f"{domain}/env.py terminate_tools")]
        if not splits:
            raise TauBenchSourceError(f"{PACKAGE}/envs/{domain}/env.py names no task split (match task_split)")
        return splits, terminate

    def _tools(self, domain: str) -> list[tuple[str, str]]:
        tree = self.parse(f"{domain}/tools/__init__.py")
        modules: dict[str, str] = {}
        order: list[str] = []
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
                for alias in node.names:
                    modules[alias.asname or alias.name] = node.module
            elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "ALL_TOOLS" for t in node.targets
            ):
                if not isinstance(node.value, ast.List) or not all(isinstance(e, ast.Name) for e in node.value.elts):
                    raise TauBenchSourceError(f"{domain}/tools/__init__.py: ALL_TOOLS is not a list of names")
                order = [e.id for e in node.value.elts if isinstance(e, ast.Name)]
        if not order:
            raise TauBenchSourceError(f"{PACKAGE}/envs/{domain}/tools/__init__.py defines no ALL_TOOLS list")
        unknown = [name for name in order if name not in modules]
        if unknown:
            raise TauBenchSourceError(f"{domain}/tools/__init__.py: {', '.join(unknown)} not imported from a module")
        return [(modules[name], name) for name in order]

    def _data_files(self, domain: str) -> dict[str, str]:
        tree = self.parse(f"{domain}/data/__init__.py")
        load = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "load_data"), None)
        if load is None:
            raise TauBenchSourceError(f"{PACKAGE}/envs/{domain}/data/__init__.py defines no load_data")
        files: dict[str, str] = {}
        keys: dict[str, str] = {}
        for node in ast.walk(load):
            if isinstance(node, ast.With):
                names = [
                    c.value
                    for item in node.items
                    for c in ast.walk(item.context_expr)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str) and c.value.endswith(".json")
                ]
                targets = [
                    t.id
                    for s in node.body
                    if isinstance(s, ast.Assign)
                    for t in s.targets
                    if isinstance(t, ast.Name) and "json.load" in ast.unparse(s.value)
                ]
                if len(names) == 1 and len(targets) == 1:
                    files[targets[0]] = names[0]
            elif isinstance(node, ast.Return) and isinstance(node.value, ast.Dict):
                for key, value in zip(node.value.keys, node.value.values, strict=True):
                    if isinstance(key, ast.Constant) and isinstance(value, ast.Name):
                        keys[str(key.value)] = value.id
        mapping = {key: files[var] for key, var in keys.items() if var in files}
        if not mapping or len(mapping) != len(keys):
            raise TauBenchSourceError(
                f"{domain}/data/__init__.py: load_data is not 'read JSON files, return {{key: data}}'"
            )
        named_by = f"{self.where(f'{domain}/data/__init__.py')}: load_data"
        for file in mapping.values():
            require_relative(file, named_by)  # read from the domain's data folder, never beside or above it
        return mapping

    def tasks(self, domain: str, module: str, name: str) -> list[dict[str, Any]]:
        """The split's tasks: ``user_id``, ``instruction``, ``actions`` (``name``, ``kwargs``), ``outputs``."""
        label = f"{domain}/{module}.py"
        tree = self.parse(label)
        value: ast.expr | None = None
        for node in tree.body:
            if isinstance(node, ast.Assign | ast.AnnAssign) and any(
                isinstance(t, ast.Name) and t.id == name
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
            ):
                value = node.value
        if not isinstance(value, ast.List):
            raise TauBenchSourceError(f"{label}: {name} is not a list of Task(...)")
        return [_task(element, f"{label} {name}[{index}]") for index, element in enumerate(value.elts)]


def _call_fields(node: ast.expr, callee: str, where: str) -> dict[str, ast.expr]:
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == callee) or node.args:
        raise TauBenchSourceError(f"{where}: expected {callee}(keyword=..., ...), found {ast.unparse(node)[:60]}")
    fields = {k.arg: k.value for k in node.keywords if k.arg is not None}
    if len(fields) != len(node.keywords):
        raise TauBenchSourceError(f"{where}: {callee}(**...) is not literal")
    return fields


def _task(node: ast.expr, where: str) -> dict[str, Any]:
    fields = _call_fields(node, "Task", where)
    missing = [f for f in ("user_id", "instruction", "actions", "outputs") if f not in fields]
    if missing:
        raise TauBenchSourceError(f"{where}: Task(...) lacks {', '.join(missing)}")
    actions_node = fields["actions"]
    if not isinstance(actions_node, ast.List):
        raise TauBenchSourceError(f"{where}: actions is not a list of Action(...)")
    actions = []
    for index, element in enumerate(actions_node.elts):
        action = _call_fields(element, "Action", f"{where} action {index}")
        actions.append(
            {
                "name": str(_literal(action["name"], where)),
                "kwargs": dict(_literal(action.get("kwargs", ast.Dict(keys=[], values=[])), where)),
            }
        )
    return {
        "user_id": str(_literal(fields["user_id"], where)),
        "instruction": str(_literal(fields["instruction"], where)),
        "actions": actions,
        "outputs": [str(o) for o in _literal(fields["outputs"], where)],
    }
