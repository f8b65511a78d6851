"""Checks derived from a gold final state: one per record a chain touched, and per touched collection a guard
that nothing else in it changed.

The guard is counted only once the collection's first record check holds (its ``gate``), so that doing nothing
earns nothing: its source requires that check too, written by :func:`gated_source` from the two sources.
"""

from __future__ import annotations

import json
import textwrap
from typing import Any

from harness.schema import Check
from harness.states.diff import diff_values

_CHECK_HEAD = "def check(initial_state, final_state):\n"


def gated_source(source: str, gate_source: str) -> str:
    """The source of a check that also requires its gate: both checks' functions inside one, true only when
    both return True (the guard first, as the seed library writes its guards)."""
    for text in (source, gate_source):
        if not text.startswith(_CHECK_HEAD):
            raise ValueError(f"a gated check needs sources that start with {_CHECK_HEAD!r}")
    holds = "def holds(initial_state, final_state):\n" + source.removeprefix(_CHECK_HEAD)
    gate_holds = "def gate_holds(initial_state, final_state):\n" + gate_source.removeprefix(_CHECK_HEAD)
    return (
        _CHECK_HEAD
        + textwrap.indent(holds, "    ")
        + "\n"
        + textwrap.indent(gate_holds, "    ")
        + "\n"
        + "    return holds(initial_state, final_state) is True and gate_holds(initial_state, final_state) is True\n"
    )


def _touched(initial: dict[str, Any], gold: dict[str, Any]) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Diff entries grouped by collection and record key (``""`` for a top-level value)."""
    grouped: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for entry in diff_values(initial, gold):
        path = entry["path"]
        collection = str(path[0])
        record = (
            str(path[1]) if len(path) > 1 and isinstance(initial.get(collection, gold.get(collection)), dict) else ""
        )
        grouped.setdefault(collection, {}).setdefault(record, []).append(entry)
    return grouped


def checks_from_gold(initial: dict[str, Any], gold: dict[str, Any], masked_values: set[str]) -> list[Check]:
    """One check per record the chain touched, and per touched collection one that nothing else changed, gated
    on the collection's first record check.

    Free-text values (masked arguments) are not compared, nor the ids of records the chain created (another
    valid path may number them differently)."""
    checks: list[Check] = []
    created_ids = {
        str(key)
        for collection, value in gold.items()
        if isinstance(value, dict)
        for key in value
        if key not in (initial.get(collection) or {})
    }

    def comparable(value: Any) -> bool:
        return not (isinstance(value, str) and (value in masked_values or value in created_ids))

    for collection, records in sorted(_touched(initial, gold).items()):
        first_of_collection = len(checks)
        for record_key, entries in sorted(records.items()):
            if record_key == "":
                expected = gold.get(collection)
                source = (
                    "def check(initial_state, final_state):\n"
                    f"    return final_state.get({collection!r}) == {expected!r}\n"
                )
                checks.append(
                    Check(id=f"c{len(checks) + 1}", description=f"{collection} is {expected!r}.", source=source)
                )
                continue
            in_initial = record_key in (initial.get(collection) or {})
            in_gold = record_key in (gold.get(collection) or {})
            if in_initial and not in_gold:
                source = (
                    "def check(initial_state, final_state):\n"
                    f"    return {record_key!r} not in final_state.get({collection!r}, {{}})\n"
                )
                checks.append(
                    Check(id=f"c{len(checks) + 1}", description=f"{collection} {record_key} is removed.", source=source)
                )
            elif not in_initial:
                record = gold[collection][record_key]
                fields = {k: v for k, v in record.items() if comparable(v)} if isinstance(record, dict) else {}
                source = (
                    "def check(initial_state, final_state):\n"
                    f"    expected = {fields!r}\n"
                    f"    new = [r for k, r in final_state.get({collection!r}, {{}}).items()\n"
                    f"           if k not in initial_state.get({collection!r}, {{}}) and isinstance(r, dict)]\n"
                    "    return any(all(r.get(f) == v for f, v in expected.items()) for r in new)\n"
                )
                checks.append(
                    Check(
                        id=f"c{len(checks) + 1}",
                        description=f"A new {collection} record with {json.dumps(fields)[:200]} exists.",
                        source=source,
                    )
                )
            else:
                changes = []
                for entry in entries:
                    path = entry["path"][2:]
                    after = entry.get("after")
                    if entry["op"] != "remove" and comparable(after):
                        changes.append((path, after, entry["op"]))
                if not changes:
                    continue
                lines = [
                    "def check(initial_state, final_state):",
                    f"    record = final_state.get({collection!r}, {{}}).get({record_key!r})",
                    "    if record is None:",
                    "        return False",
                    "    def at(value, path):",
                    "        for part in path:",
                    "            if isinstance(value, dict) and part in value:",
                    "                value = value[part]",
                    "            elif isinstance(value, list) and isinstance(part, int) and 0 <= part < len(value):",
                    "                value = value[part]",
                    "            else:",
                    "                return None",
                    "        return value",
                    f"    return all(at(record, path) == value for path, value in {[(p, v) for p, v, _ in changes]!r})",
                ]
                described = ", ".join(
                    f"{'.'.join(map(str, p)) or 'record'} = {json.dumps(v)[:60]}" for p, v, _ in changes
                )
                checks.append(
                    Check(
                        id=f"c{len(checks) + 1}",
                        description=f"{collection} {record_key}: {described}.",
                        source="\n".join(lines) + "\n",
                    )
                )
        touched_keys = sorted(k for k in records if k)
        if touched_keys and isinstance(initial.get(collection), dict):
            source = (
                "def check(initial_state, final_state):\n"
                f"    touched = {touched_keys!r}\n"
                f"    before = initial_state.get({collection!r}, {{}})\n"
                f"    after = final_state.get({collection!r}, {{}})\n"
                "    return all(after.get(k) == v for k, v in before.items() if k not in touched)\n"
            )
            gate = checks[first_of_collection] if len(checks) > first_of_collection else None
            checks.append(
                Check(
                    id=f"c{len(checks) + 1}",
                    description=f"No other {collection} record changed.",
                    source=source if gate is None else gated_source(source, gate.source),
                    gate=None if gate is None else gate.id,
                )
            )
    return checks
