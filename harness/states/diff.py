"""Structural differences between two JSON states. Standard library only (the sandbox worker uses it)."""

from __future__ import annotations

from typing import Any

Path = list[str | int]


def diff_values(before: Any, after: Any, path: Path | None = None) -> list[dict[str, Any]]:
    """Entries ``{"path", "op", "before", "after"}`` turning ``before`` into ``after``.

    Dicts are compared key by key and lists of equal length item by item; anything else that differs is
    one ``change`` entry.
    """
    path = path or []
    if before == after and type(before) is type(after):
        return []
    if isinstance(before, dict) and isinstance(after, dict):
        entries: list[dict[str, Any]] = []
        for key, old in before.items():
            if key not in after:
                entries.append({"path": [*path, key], "op": "remove", "before": old, "after": None})
            else:
                entries.extend(diff_values(old, after[key], [*path, key]))
        for key, new in after.items():
            if key not in before:
                entries.append({"path": [*path, key], "op": "add", "before": None, "after": new})
        return entries
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        entries = []
        for index, (old, new) in enumerate(zip(before, after, strict=True)):
            entries.extend(diff_values(old, new, [*path, index]))
        return entries
    return [{"path": path, "op": "change", "before": before, "after": after}]


def apply_diff(state: Any, entries: list[dict[str, Any]]) -> Any:
    """``state`` with the diff entries applied (the inverse of :func:`diff_values`); ``state`` is not modified."""
    import copy

    result = copy.deepcopy(state)
    for entry in entries:
        path = list(entry["path"])
        if not path:
            result = copy.deepcopy(entry["after"])
            continue
        parent = result
        for key in path[:-1]:
            parent = parent[key]
        if entry["op"] == "remove":
            del parent[path[-1]]
        else:
            parent[path[-1]] = copy.deepcopy(entry["after"])
    return result
