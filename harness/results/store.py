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

from harness.files import FILE, RUN_FOLDER_BUDGET, SYMLINK, ReadBudget, SourceTree, UnsafeFile, count_values
from harness.jsonlimits import JSONLimits, UnsafeJSON, check_decoded_json, check_json
from harness.redact import redact_known
from harness.schema import TerminationReason, Timings, Trajectory

logger = logging.getLogger(__name__)

RECORD_LIMITS = JSONLimits(max_depth=128)
"""Bounds of a stored record: room for a result or state at the sandbox's own depth limits inside a trajectory,
and well inside what orjson writes (254 levels) and pydantic reads back from JSON (about 200)."""

RecordT = TypeVar("RecordT", bound=BaseModel)

_LINE_CHUNK = 1 << 20


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


def read_records(
    path: Path, model: type[RecordT], budget: ReadBudget = RUN_FOLDER_BUDGET
) -> Iterator[tuple[int, RecordT]]:
    """Each readable record of a JSON-lines file with its line number.

    The file is read through :class:`~harness.files.SourceTree` (a symlink is refused with its path,
    :class:`~harness.files.UnsafeFile`). A line that holds no record is skipped with a warning naming it: a damaged
    line, a torn last line (from a killed run, told apart), and a line over ``budget`` (more bytes or JSON values
    than one line may hold), which is never held whole nor decoded."""
    where = str(path)
    with folder_tree(path.parent, budget).open(path.name) as handle:
        for number, line, refusal in budgeted_lines(handle, budget):
            if refusal is not None:
                logger.warning("%s:%d: skipping a line that %s (not decoded)", where, number, refusal)
                continue
            if not line.strip():
                continue
            try:
                yield number, decode_record(line, model)
            except (ValueError, ValidationError) as error:
                if not line.endswith(b"\n"):  # only the last line can lack its newline
                    logger.warning("%s:%d: skipping a truncated last line (a killed run)", where, number)
                else:
                    reason = str(error).splitlines()[0] if str(error) else type(error).__name__
                    logger.warning("%s:%d: skipping a line that is not a %s: %s", where, number, model.__name__, reason)


def folder_tree(folder: Path, budget: ReadBudget = RUN_FOLDER_BUDGET) -> SourceTree:
    """The reader of a run folder's files (a folder, never an archive)."""
    if not folder.is_dir():
        raise UnsafeFile(f"{folder}: not a folder")
    return SourceTree(folder, budget=budget)


def run_file_exists(run_dir: Path | str, name: str) -> bool:
    """Whether the run folder holds the regular file ``name``. Anything else by that name is refused
    (:class:`~harness.files.UnsafeFile`, naming it), never followed or opened: a symbolic link, a folder, a FIFO."""
    folder = Path(run_dir)
    if not folder.is_dir():
        return False
    kind = folder_tree(folder).kind(name)
    if kind == SYMLINK:
        raise UnsafeFile(f"{folder / name} is a symbolic link; a run folder's files must be regular files")
    if kind is not None and kind != FILE:
        raise UnsafeFile(f"{folder / name}: not a regular file")
    return kind == FILE


def budgeted_lines(handle: IO[bytes], budget: ReadBudget) -> Iterator[tuple[int, bytes, str | None]]:
    """Each line of ``handle`` with its number, read a chunk at a time; a line over ``budget`` comes as empty bytes
    with the reason, its chunks dropped as they are read (so it is never held whole)."""
    number = 0
    while True:
        number += 1
        chunks: list[bytes] = []
        size = 0
        values = 1
        refusal: str | None = None
        while True:
            chunk = handle.readline(_LINE_CHUNK)
            if not chunk:
                break
            size += len(chunk)
            if refusal is None:
                values += count_values(chunk)
                if size > budget.line_bytes:
                    refusal = f"is longer than {budget.line_bytes:,} bytes"
                elif values > budget.line_values:
                    refusal = f"holds more than {budget.line_values:,} JSON values"
                if refusal is None:
                    chunks.append(chunk)
                else:
                    chunks.clear()
            if chunk.endswith(b"\n"):
                break
        if not size:
            return
        yield number, b"".join(chunks), refusal


def complete_length(handle: IO[bytes]) -> int:
    """How many bytes of ``handle`` end with its last newline, found by reading back from its end."""
    position = handle.seek(0, os.SEEK_END)
    while position > 0:
        start = max(0, position - _LINE_CHUNK)
        handle.seek(start)
        block = handle.read(position - start)
        newline = block.rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        position = start
    return 0


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
        """What :func:`harness.results.metrics.read_results` would read from the file now: the last record per episode,
        in the order of each episode's first line. Needs ``keep_records``."""
        if self._records is None:
            raise RuntimeError("this ResultStore was opened without keep_records")
        return list(self._records.values())

    def _load(self) -> None:
        if not run_file_exists(self.path.parent, self.path.name):
            return
        with folder_tree(self.path.parent).open(self.path.name) as handle:
            end = complete_length(handle)
            size = os.fstat(handle.fileno()).st_size
        if end < size:
            logger.warning("%s ends with a partial line (a killed run); it is dropped and re-run", self.path)
            descriptor = os.open(self.path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                os.ftruncate(descriptor, end)
            finally:
                os.close(descriptor)
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
