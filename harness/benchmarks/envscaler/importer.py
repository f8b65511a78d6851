"""Import EnvScaler's environments and scenarios (their release: JSON lists with JSON-string fields; their
repository: dicts keyed by ``env_id``) into our records. Quirks stay here and never leak inward.

Imported environments record the ``envscaler`` episode rules as their suggestion
(``provenance.details["suggested_rules"]``); ``harness run`` runs them under those rules unless told otherwise (the
benchmark's recommendation, found from ``provenance.source``), so an imported library scores as upstream's runtime
does. Scenario ids read naturally: the upstream task id when it already names its environment
(``env_1_rl-task_1``), else ``<env_id>-<task_id>``; a repeated id gets a ``-2``, ``-3``… suffix.

The files are read as hostile: each under the reader's size limit and JSON budget
(:func:`harness.files.read_named_json`), and the JSON held in their string fields under one more budget shared by
the whole file (:class:`harness.files.JsonAllowance`), so a file built to expand into millions of objects is
refused in one line before it is decoded.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.files import JsonAllowance, UnsafeFile, read_named_json
from harness.names import require_safe_id
from harness.schema import (
    Check,
    Environment,
    FunctionSpec,
    Provenance,
    Scenario,
    StateEntity,
    ToolSpec,
)
from harness.toolspec import derive_tools

logger = logging.getLogger(__name__)

SUGGESTED_RULES = "envscaler"
"""The episode rules imported environments suggest: upstream's runtime."""


@dataclass
class ImportReport:
    environments: list[Environment] = field(default_factory=list)
    scenarios: list[Scenario] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _records(data: Any) -> list[tuple[str | None, dict[str, Any]]]:
    """Both layouts as (key, record) pairs: a list of records, or a dict keyed by env_id."""
    if isinstance(data, list):
        return [(None, r) for r in data]
    if isinstance(data, dict):
        if "env_id" in data or "task_id" in data:
            return [(None, data)]
        return [(str(k), v) for k, v in data.items()]
    raise ValueError("expected a JSON list of records or an object keyed by env_id")


def _maybe_json(value: Any, allowance: JsonAllowance, label: str) -> Any:
    """Released copies store some fields as JSON strings."""
    if isinstance(value, str) and value[:1] in ("[", "{"):
        return allowance.decode(value, label)
    return value


def _tools(raw: Any, code: str, class_name: str, allowance: JsonAllowance, label: str) -> list[ToolSpec]:
    raw = _maybe_json(raw, allowance, label)
    if not raw:
        return derive_tools(code, class_name)
    tools = []
    for item in raw:
        spec = item.get("function", item) if isinstance(item, dict) else None
        if not isinstance(spec, dict) or "name" not in spec:
            raise ValueError(f"a tool entry has no name: {str(item)[:120]}")
        tools.append(
            ToolSpec(
                function=FunctionSpec(
                    name=spec["name"],
                    description=spec.get("description", ""),
                    parameters=spec.get("parameters") or {"type": "object", "properties": {}, "required": []},
                )
            )
        )
    return tools


def _entities(raw: Any, allowance: JsonAllowance, label: str) -> list[StateEntity]:
    entities = []
    for item in _maybe_json(raw, allowance, label) or []:
        attributes = item.get("attributes", "")
        if isinstance(attributes, str):
            attributes = [a.strip() for a in attributes.split(",") if a.strip()]
        entities.append(
            StateEntity(
                name=str(item.get("entity", "")), attributes=attributes, description=item.get("description", "")
            )
        )
    return entities


def convert_environment(
    record: dict[str, Any], key: str | None = None, *, allowance: JsonAllowance | None = None
) -> Environment:
    """One environment record as ours. ``allowance`` bounds the JSON its string fields hold (one per record
    unless the caller shares one across a file)."""
    allowance = allowance or JsonAllowance()
    env_id = str(record.get("env_id") or key or "")
    if not env_id:
        raise ValueError("record has no env_id")
    require_safe_id(env_id, "env_id")
    label = f"environment {env_id}"
    code = record.get("env_class_code")
    class_name = record.get("env_class_name")
    if not isinstance(code, str) or not code.strip():
        raise ValueError("env_class_code is missing")
    if not isinstance(class_name, str) or not class_name:
        raise ValueError("env_class_name is missing")
    return Environment(
        id=env_id,
        name=class_name,
        summary=record.get("environment_summary", "") or "",
        introduction=record.get("environment_introduction", "") or "",
        rules=[str(r) for r in _maybe_json(record.get("constraints_rules"), allowance, label) or []],
        state_entities=_entities(record.get("state_space_definition"), allowance, label),
        tools=_tools(record.get("tools"), code, class_name, allowance, label),
        class_name=class_name,
        code=code,
        provenance=Provenance(
            source="envscaler",
            upstream_id=env_id,
            details={
                "operation_list": _maybe_json(record.get("operation_list"), allowance, label) or [],
                "suggested_rules": SUGGESTED_RULES,
            },
        ),
    )


def scenario_id(env_id: str, task_id: Any) -> str:
    """``env_1_rl-task_1`` for an upstream task id that already names its environment, else ``<env>-<task>``."""
    task = str(task_id).strip()
    if task == env_id or task.startswith((f"{env_id}-", f"{env_id}_", f"{env_id}/")):
        return task.replace("/", "-")
    return f"{env_id}-{task}"


def _unique(scenarios: list[Scenario]) -> list[Scenario]:
    """The same scenarios with repeated ids suffixed ``-2``, ``-3``… in order of appearance."""
    seen: dict[str, int] = {}
    taken = {s.id for s in scenarios}
    unique = []
    for scenario in scenarios:
        count = seen.get(scenario.id, 0) + 1
        seen[scenario.id] = count
        if count == 1:
            unique.append(scenario)
            continue
        candidate = f"{scenario.id}-{count}"
        while candidate in taken:
            count += 1
            candidate = f"{scenario.id}-{count}"
        taken.add(candidate)
        logger.warning("EnvScaler import: scenario id %s repeats; the repeat is %s", scenario.id, candidate)
        unique.append(scenario.model_copy(update={"id": candidate}))
    return unique


def convert_scenario(record: dict[str, Any], index: int, *, allowance: JsonAllowance | None = None) -> Scenario:
    """One scenario record as ours (``allowance`` as for :func:`convert_environment`)."""
    allowance = allowance or JsonAllowance()
    env_id = record.get("env_id")
    if not env_id:
        raise ValueError("record has no env_id")
    require_safe_id(str(env_id), "env_id")
    task_id = record.get("task_id", index)
    label = f"scenario {env_id}/{task_id}"
    init_config = _maybe_json(record.get("init_config"), allowance, label)
    if not isinstance(init_config, dict):
        raise ValueError("init_config is not an object")
    task = record.get("task")
    if not isinstance(task, str) or not task.strip():
        raise ValueError("task is missing")
    checks = []
    for number, item in enumerate(_maybe_json(record.get("checklist_with_func"), allowance, label) or [], start=1):
        source = item.get("check_func")
        if not isinstance(source, str) or "def " not in source:
            raise ValueError(f"check {number} has no check_func source")
        checks.append(Check(id=f"c{number}", description=str(item.get("check_item", "")), source=source))
    return Scenario(
        id=scenario_id(str(env_id), task_id),
        environment_id=str(env_id),
        initial_state=init_config,
        task=task,
        checks=checks,
        tags=["envscaler", "rl" if checks else "sft"],
        provenance=Provenance(source="envscaler", upstream_id=str(task_id)),
    )


def _file_records(path: Path) -> list[tuple[str | None, dict[str, Any]]]:
    try:
        return _records(read_named_json(Path(path)))
    except ValueError as exc:
        if isinstance(exc, UnsafeFile):
            raise
        raise UnsafeFile(f"{path}: {exc}") from None


def import_envscaler(environments_file: Path, scenario_files: list[Path] | None = None) -> ImportReport:
    """Read EnvScaler files. A malformed record is reported with its id; the others are still imported. A file that
    cannot be read, is not JSON or is over its budget (the JSON in its string fields included) raises
    :class:`~harness.files.UnsafeFile` naming it, and nothing is imported."""
    report = ImportReport()
    allowance = JsonAllowance()
    for key, record in _file_records(environments_file):
        label = record.get("env_id", key) if isinstance(record, dict) else key
        try:
            report.environments.append(convert_environment(record, key, allowance=allowance))
        except UnsafeFile as exc:
            raise UnsafeFile(f"{environments_file}: {exc}") from None
        except Exception as exc:
            report.problems.append(f"environment {label}: {exc}")
    for path in map(Path, scenario_files or []):
        allowance = JsonAllowance()
        for index, (_, record) in enumerate(_file_records(path)):
            label = f"{record.get('env_id')}/{record.get('task_id', index)}" if isinstance(record, dict) else index
            try:
                report.scenarios.append(convert_scenario(record, index, allowance=allowance))
            except UnsafeFile as exc:
                raise UnsafeFile(f"{path}: {exc}") from None
            except Exception as exc:
                report.problems.append(f"scenario {label} in {path.name}: {exc}")
    report.scenarios = _unique(report.scenarios)
    for problem in report.problems:
        logger.warning("EnvScaler import: %s", problem)
    return report
