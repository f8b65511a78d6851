"""The append-only result store of a run: one trajectory per line of ``results.jsonl``, and its one codec.

Lines are appended with orjson and flushed as each episode finishes, so a killed run loses at most the line
being written. On reopening, a torn last line is cut off (its episode simply runs again) and the episodes
already recorded are known by id, so a resumed run neither loses nor doubles a result. Every secret value the
harness knows (see :mod:`harness.redact`) is replaced before a line is written.

Writing and reading share one codec (:func:`encode_record`, :func:`decode_record`): orjson, the same
:data:`RECORD_LIMITS` and pydantic validation, so a record that could not be read back is never written (the
episode is stored without what made it unreadable, as an infrastructure error saying why), and a damaged line is
skipped with a warning naming it instead of stopping ``harness show``, a summary or ``--resume``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

from harness.jsonlimits import JSONLimits, UnsafeJSON, check_decoded_json, check_json
from harness.redact import redact_known
from harness.schema import TerminationReason, Timings, Trajectory

logger = logging.getLogger(__name__)

RECORD_LIMITS = JSONLimits(max_depth=128)
"""Bounds of a stored record: room for a result or state at the sandbox's own depth limits inside a trajectory,
and well inside what orjson writes (254 levels) and pydantic reads back from JSON (about 200)."""

RecordT = TypeVar("RecordT", bound=BaseModel)


def encode_record(record: BaseModel) -> bytes:
    """One line's JSON for ``record``; :class:`~harness.jsonlimits.UnsafeJSON` when it could not be read back."""
    data = record.model_dump(mode="json")
    check_json(data, RECORD_LIMITS)
    return orjson.dumps(data)


def decode_record(line: bytes, model: type[RecordT]) -> RecordT:
    """The record one line holds; ``ValueError`` (a JSON, limit or validation error) when it holds none."""
    data = orjson.loads(line)
    check_decoded_json(data, RECORD_LIMITS, len(line))
    return model.model_validate(data)


def read_records(path: Path, model: type[RecordT]) -> Iterator[tuple[int, RecordT]]:
    """Each readable record of a JSON-lines file with its line number; a damaged line is skipped with a warning
    naming it (a torn last line, from a killed run, is told apart)."""
    with path.open("rb") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                yield number, decode_record(line, model)
            except (ValueError, ValidationError) as error:
                if not line.endswith(b"\n"):  # only the last line can lack its newline
                    logger.warning("%s:%d: skipping a truncated last line (a killed run)", path, number)
                else:
                    reason = str(error).splitlines()[0] if str(error) else type(error).__name__
                    logger.warning("%s:%d: skipping a line that is not a %s: %s", path, number, model.__name__, reason)


def storable(trajectory: Trajectory) -> tuple[Trajectory, bytes]:
    """What to store for ``trajectory`` and its line: itself, or, when it could not be read back, its identity
    and the reason as an infrastructure error (so the episode is still recorded once and ``--retry-errors``
    re-runs it)."""
    try:
        return trajectory, encode_record(trajectory)
    except UnsafeJSON as exc:
        reason = f"the episode's record could not be stored as it was: it {exc}"
        logger.error("episode %s: %s", trajectory.episode_id, reason)
        stripped = trajectory.model_copy(
            update={
                "tools": [],
                "messages": [],
                "steps": [],
                "final_state_diff": [],
                "check_results": [],
                "reward": None,
                "usage": {},
                "timings": Timings(),
                "termination": TerminationReason.INFRA_ERROR,
                "termination_detail": reason,
                "errors": [reason],
            }
        )
        return stripped, encode_record(stripped)


class ResultStore:
    """``results.jsonl`` of one run, opened for appending. With ``keep_records`` it also holds every record the
    file holds (read at opening, then each one appended), so the run's summary needs no second reading of it."""

    def __init__(self, path: Path, *, fsync: bool = False, keep_records: bool = False):
        self.path = path
        self.fsync = fsync
        self.terminations: dict[str, str] = {}
        self.unretryable: set[str] = set()
        """Infrastructure errors whose record says a retry cannot help."""
        self._handle: IO[bytes] | None = None
        self._records: dict[str, Trajectory] | None = {} if keep_records else None
        self._load()

    def records(self) -> list[Trajectory]:
        """What :func:`harness.metrics.read_results` would read from the file now: the last record per episode, in
        the order of each episode's first line. Needs ``keep_records``."""
        if self._records is None:
            raise RuntimeError("this ResultStore was opened without keep_records")
        return list(self._records.values())

    def _load(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        end = data.rfind(b"\n") + 1
        if end < len(data):
            logger.warning("%s ends with a partial line (a killed run); it is dropped and re-run", self.path)
            with self.path.open("r+b") as handle:
                handle.truncate(end)
        for _, trajectory in read_records(self.path, Trajectory):
            self._note(trajectory)

    def _note(self, trajectory: Trajectory) -> None:
        if self._records is not None:
            self._records[trajectory.episode_id] = trajectory
        self.terminations[trajectory.episode_id] = trajectory.termination.value
        failure = trajectory.failure
        if failure is not None and failure.retryable is False:
            self.unretryable.add(trajectory.episode_id)
        else:
            self.unretryable.discard(trajectory.episode_id)

    def finished(self, retry_errors: bool = False, retry_unretryable: bool = False) -> set[str]:
        """Episode ids whose result stands. With ``retry_errors``, infrastructure errors a retry can help do not
        (with ``retry_unretryable`` too, none do)."""
        if not retry_errors:
            return set(self.terminations)
        return {
            episode
            for episode, termination in self.terminations.items()
            if termination != TerminationReason.INFRA_ERROR.value
            or (episode in self.unretryable and not retry_unretryable)
        }

    def append(self, trajectory: Trajectory) -> None:
        stored, line = storable(trajectory)
        text = line.decode()
        redacted = redact_known(text)
        written = redacted.encode() if redacted is not text else line
        if self._handle is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = self.path.open("ab")
        self._handle.write(written + b"\n")
        self._handle.flush()
        if self.fsync:
            os.fsync(self._handle.fileno())
        if self._records is not None and redacted != text:
            # What the file holds (and a reader gets) is the redacted record, not the one in memory.
            stored = decode_record(written, Trajectory)
        self._note(stored)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
