"""Persisted stage outputs: ``OUT/stages/<stage>/<key>.json``, keyed by a content hash of the stage's inputs.

A stage that finds its output already on disk returns it without calling a model, so a killed run that is
started again spends nothing on finished work. Files are written to a temporary name and renamed, so a kill
never leaves a half-written output that would be taken as finished.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import orjson


def content_key(*parts: Any) -> str:
    """A stable hash of JSON-serialisable inputs."""
    payload = orjson.dumps(parts, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    return hashlib.sha256(payload).hexdigest()[:20]


class StageStore:
    def __init__(self, root: Path):
        self.root = root / "stages"

    def path(self, stage: str, key: str) -> Path:
        return self.root / stage / f"{key}.json"

    def load(self, stage: str, key: str) -> dict[str, Any] | None:
        path = self.path(stage, key)
        if not path.exists():
            return None
        data: dict[str, Any] = orjson.loads(path.read_bytes())
        return data

    def save(self, stage: str, key: str, data: dict[str, Any]) -> None:
        path = self.path(stage, key)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(f".tmp{os.getpid()}")
        temporary.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS))
        temporary.replace(path)

    def count(self, stage: str) -> int:
        folder = self.root / stage
        return sum(1 for _ in folder.glob("*.json")) if folder.exists() else 0


class MemoryStageStore(StageStore):
    """Stage outputs held in memory: for a build on another machine, which gets the outputs the driver already
    has and hands back what it computed (``saved``) for the driver to write."""

    def __init__(self, known: dict[tuple[str, str], dict[str, Any]] | None = None):
        self.known = dict(known or {})
        self.saved: list[tuple[str, str, dict[str, Any]]] = []

    def load(self, stage: str, key: str) -> dict[str, Any] | None:
        return self.known.get((stage, key))

    def save(self, stage: str, key: str, data: dict[str, Any]) -> None:
        self.known[stage, key] = data
        self.saved.append((stage, key, data))

    def count(self, stage: str) -> int:
        return sum(1 for known_stage, _ in self.known if known_stage == stage)
