"""Reading a checkout of τ-bench (sierra-research/tau-bench) as text, never importing it.

A domain is a folder ``tau_bench/envs/<domain>/`` with ``env.py`` (its splits, as ``case "<split>": from
...tasks_<split> import <NAME> as tasks``, and its ``terminate_tools``), ``tools/__init__.py`` (``ALL_TOOLS``, each
class imported from its own module), ``data/__init__.py`` (``load_data``: JSON files read into one dict) and
``wiki.md``. Tasks are the literal ``Task(...)``/``Action(...)`` calls of the split's module, read with ``ast``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

PACKAGE = "tau_bench"
SOURCE_LICENSE = "mit"
SOURCE_LICENSE_NOTE = "MIT (Copyright (c) 2024 Sierra Research)"
_MARKERS = ("tau_bench/envs/base.py", "tau_bench/types.py")


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
    """``load_data``'s key → the JSON file it reads."""


def _literal(node: ast.expr, where: str) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError as exc:
        raise TauBenchSourceError(f"{where}: not a literal ({ast.unparse(node)[:80]}): {exc}") from exc


class TauBenchSource:
    """A τ-bench checkout (a folder holding ``tau_bench/``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if not path.exists():
            raise TauBenchSourceError(f"{path} does not exist")
        if not path.is_dir():
            raise TauBenchSourceError(f"{path} is a file; expected a τ-bench checkout folder (git clone of tau-bench)")
        missing = [marker for marker in _MARKERS if not (path / marker).is_file()]
        if missing:
            found = sorted(p.name + ("/" if p.is_dir() else "") for p in path.iterdir())[:8]
            raise TauBenchSourceError(
                f"{path} is not a τ-bench checkout: found {', '.join(found) or 'nothing'}; expected "
                f"{' and '.join(_MARKERS)} with tau_bench/envs/<domain>/(env.py, tools/, data/)"
            )
        self.envs = path / PACKAGE / "envs"
        self.license = SOURCE_LICENSE
        self.commit = self._commit()

    def _commit(self) -> str:
        """The checkout's commit, read from ``.git`` as text ("unknown" without one)."""
        git = self.path / ".git"
        try:
            head = (git / "HEAD").read_text().strip()
            if not head.startswith("ref: "):
                return head
            ref = head[5:]
            if (git / ref).is_file():
                return (git / ref).read_text().strip()
            for line in (git / "packed-refs").read_text().splitlines():
                if line.endswith(f" {ref}"):
                    return line.split()[0]
        except OSError:
            pass
        return "unknown"

    def domains(self) -> list[str]:
        return sorted(
            d.name
            for d in self.envs.iterdir()
            if d.is_dir() and all((d / f).is_file() for f in ("env.py", "tools/__init__.py", "data/__init__.py"))
        )

    def read_text(self, relative: str) -> str:
        target = self.envs / relative
        if not target.is_file():
            raise TauBenchSourceError(f"{self.path} has no {PACKAGE}/envs/{relative}")
        return target.read_text(encoding="utf-8")

    def read_json(self, relative: str) -> Any:
        try:
            return orjson.loads((self.envs / relative).read_bytes())
        except (OSError, orjson.JSONDecodeError) as exc:
            raise TauBenchSourceError(f"{self.path}: {PACKAGE}/envs/{relative} is not readable JSON: {exc}") from exc

    def parse(self, relative: str) -> ast.Module:
        try:
            return ast.parse(self.read_text(relative))
        except SyntaxError as exc:
            raise TauBenchSourceError(f"{PACKAGE}/envs/{relative} does not parse: {exc}") from exc

    def layout(self, domain: str) -> DomainLayout:
        available = self.domains()
        if domain not in available:
            raise TauBenchSourceError(
                f"no domain {domain!r} in {self.path}; it holds {', '.join(available) or 'no domain'}"
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
