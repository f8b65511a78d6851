"""The append-only result store of a run: one trajectory per line of ``results.jsonl``.

Lines are appended with orjson and flushed as each episode finishes, so a killed run loses at most the line
being written. On reopening, a torn last line is cut off (its episode simply runs again) and the episodes
already recorded are known by id, so a resumed run neither loses nor doubles a result. Every secret value the
harness knows (see :mod:`harness.redact`) is replaced before a line is written.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import IO

import orjson

from harness.errors import BadInput
from harness.redact import redact_known
from harness.schema import TerminationReason, Trajectory

logger = logging.getLogger(__name__)


class ResultStoreError(BadInput):
    """``results.jsonl`` holds a line that is not a trajectory (not a torn last line: something else wrote it)."""


class ResultStore:
    def __init__(self, path: Path, *, fsync: bool = False):
        self.path = path
        self.fsync = fsync
        self.terminations: dict[str, str] = {}
        self._handle: IO[bytes] | None = None
        self._load()

    def _load(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        end = data.rfind(b"\n") + 1
        if end < len(data):
            logger.warning("%s ends with a partial line (a killed run); it is dropped and re-run", self.path)
            with self.path.open("r+b") as handle:
                handle.truncate(end)
            data = data[:end]
        for number, line in enumerate(data.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                record = orjson.loads(line)
                self.terminations[str(record["episode_id"])] = str(record.get("termination"))
            except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
                raise ResultStoreError(
                    f"{self.path}:{number} is not a trajectory ({type(exc).__name__}: {exc}); "
                    f"remove or repair that line, or run into another --out"
                ) from exc

    def finished(self, retry_errors: bool = False) -> set[str]:
        """Episode ids whose result stands (with ``retry_errors``, infrastructure errors do not)."""
        if not retry_errors:
            return set(self.terminations)
        return {k for k, v in self.terminations.items() if v != TerminationReason.INFRA_ERROR.value}

    def append(self, trajectory: Trajectory) -> None:
        if self._handle is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = self.path.open("ab")
        self._handle.write(redact_known(trajectory.model_dump_json()).encode() + b"\n")
        self._handle.flush()
        if self.fsync:
            os.fsync(self._handle.fileno())
        self.terminations[trajectory.episode_id] = trajectory.termination.value

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
