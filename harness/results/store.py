"""The append-only result store of a run: one trajectory per line of ``results.jsonl``, and its one codec.

Lines are appended with orjson and flushed as each episode finishes, so a killed run loses at most the line
being written. On reopening, a torn last line is cut off (its episode simply runs again) and the episodes
already recorded are known by id, so a resumed run neither loses nor doubles a result. Every secret value the
harness knows (see :mod:`harness.redact`) is replaced before a line is written.

Writing and reading share one codec (:func:`encode_record`, :func:`decode_record`): orjson, the same
:data:`RECORD_LIMITS` and pydantic validation, so a record that could not be read back is never written (the
episode is stored without what made it unreadable, as an infrastructure error saying why), and a damaged line is
skipped with a warning naming it instead of stopping ``harness show``, a summary or ``--resume``.

Nothing here holds the records of a run: a :class:`RecordIndex` keeps, per episode, its id, its place (the order
of its first line) and the offset of the line that stands (the last one), and a record is read again from its
offset when it is needed (:class:`StoredResults`, or to take a replaced record out of a running aggregate, a
:class:`RecordListener` such as :class:`harness.results.tally.SummaryTally`).
"""

from __future__ import annotations

import logging
import os
from array import array
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Protocol, TypeVar

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
    for number, _, record in read_records_at(path, model, budget):
        yield number, record


def read_records_at(
    path: Path, model: type[RecordT], budget: ReadBudget = RUN_FOLDER_BUDGET
) -> Iterator[tuple[int, int, RecordT]]:
    """As :func:`read_records`, with the offset at which each record's line starts."""
    where = str(path)
    with folder_tree(path.parent, budget).open(path.name) as handle:
        for number, offset, line, refusal in budgeted_lines(handle, budget):
            record = _decoded(f"{where}:{number}", line, refusal, model)
            if record is not None:
                yield number, offset, record


def _decoded(location: str, line: bytes, refusal: str | None, model: type[RecordT]) -> RecordT | None:
    """The record of one line, or None (with a warning naming the line's ``location`` when it is not blank)."""
    if refusal is not None:
        logger.warning("%s: skipping a line that %s (not decoded)", location, refusal)
        return None
    if not line.strip():
        return None
    try:
        return decode_record(line, model)
    except (ValueError, ValidationError) as error:
        if not line.endswith(b"\n"):  # only the last line can lack its newline
            logger.warning("%s: skipping a truncated last line (a killed run)", location)
        else:
            reason = str(error).splitlines()[0] if str(error) else type(error).__name__
            logger.warning("%s: skipping a line that is not a %s: %s", location, model.__name__, reason)
        return None


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


def budgeted_lines(handle: IO[bytes], budget: ReadBudget) -> Iterator[tuple[int, int, bytes, str | None]]:
    """Each line of ``handle`` with its number and the offset it starts at (from where ``handle`` stands), read a
    chunk at a time; a line over ``budget`` comes as empty bytes with the reason, its chunks dropped as they are read
    (so it is never held whole)."""
    number = 0
    offset = 0
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
        yield number, offset, b"".join(chunks), refusal
        offset += size


def line_at(handle: IO[bytes], offset: int, budget: ReadBudget) -> tuple[bytes, str | None]:
    """The line that starts at ``offset`` of ``handle`` (empty bytes when the file ends there), as
    :func:`budgeted_lines` gives it."""
    handle.seek(offset)
    for _, _, line, refusal in budgeted_lines(handle, budget):
        return line, refusal
    return b"", None


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


class RecordListener(Protocol):
    """What a running aggregate is told as records come: each record that stands, and each one a later line of
    its episode replaced (``position`` is the episode's place: the order of its first record)."""

    def add(self, trajectory: Trajectory, position: int) -> None: ...

    def remove(self, trajectory: Trajectory, position: int) -> None: ...


class RecordIndex:
    """Per episode of a results file: its id, its position (the order of its first record) and the offset of the
    line of the record that stands (its last). It holds no record: a replaced one is read again from its offset to
    be taken out of the ``listener``."""

    def __init__(self, path: Path, listener: RecordListener | None = None, budget: ReadBudget = RUN_FOLDER_BUDGET):
        self.path = path
        self.listener = listener
        self.budget = budget
        self.positions: dict[str, int] = {}
        """Episode id → position; in position order."""
        self.offsets = array("q")
        """Position → offset of the line that stands."""
        self._reader: IO[bytes] | None = None

    def __len__(self) -> int:
        return len(self.positions)

    def __contains__(self, episode_id: object) -> bool:
        return episode_id in self.positions

    def note(self, trajectory: Trajectory, offset: int) -> int:
        """Record that ``trajectory``'s line starts at ``offset`` and stands; returns its episode's position."""
        position = self.positions.get(trajectory.episode_id)
        if position is None:
            position = self.positions[trajectory.episode_id] = len(self.offsets)
            self.offsets.append(offset)
        else:
            if self.listener is not None:
                replaced = self.record_at(self.offsets[position])
                if replaced is None:
                    logger.error(
                        "%s: the record of episode %s at byte %d no longer reads back; the summary "
                        "counts it and its replacement",
                        self.path,
                        trajectory.episode_id,
                        self.offsets[position],
                    )
                else:
                    self.listener.remove(replaced, position)
            self.offsets[position] = offset
        if self.listener is not None:
            self.listener.add(trajectory, position)
        return position

    def record_at(self, offset: int) -> Trajectory | None:
        """The record whose line starts at ``offset`` (None, with a warning, when it does not read back)."""
        if self._reader is None:
            self._reader = folder_tree(self.path.parent, self.budget).open(self.path.name)
        line, refusal = line_at(self._reader, offset, self.budget)
        return _decoded(f"{self.path} at byte {offset}", line, refusal, Trajectory)

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


class StoredResults:
    """The records of a ``results.jsonl`` as they stand, read one at a time: one per episode (the last line of
    each), in the order of each episode's first line, as :func:`harness.results.metrics.read_results` lists them.

    Opening reads the file once (every line decoded and checked, as :func:`read_records` does; a ``listener`` is
    told each record as it comes) and keeps only the index; each iteration reads the standing lines again. A file
    that grew since is read as it was when it was opened; a line that no longer reads back is skipped with a
    warning. An absent file holds no records."""

    def __init__(self, path: Path, listener: RecordListener | None = None, budget: ReadBudget = RUN_FOLDER_BUDGET):
        self.path = path
        self.budget = budget
        self.index = RecordIndex(path, listener, budget)
        try:
            if run_file_exists(path.parent, path.name):
                for _, offset, trajectory in read_records_at(path, Trajectory, budget):
                    self.index.note(trajectory, offset)
        finally:
            self.index.close()
            self.index.listener = None

    def __len__(self) -> int:
        return len(self.index)

    def __iter__(self) -> Iterator[Trajectory]:
        for _, trajectory in self.read(range(len(self.index))):
            yield trajectory

    def ids(self) -> Iterator[str]:
        """Every episode id, in position order."""
        return iter(self.index.positions)

    def position(self, episode_id: str) -> int | None:
        return self.index.positions.get(episode_id)

    def read(self, positions: Iterable[int]) -> Iterator[tuple[int, Trajectory]]:
        """The records at ``positions``, in that order, each with its position (one that no longer reads back is
        left out, with a warning)."""
        if not len(self.index):
            return
        with self.reader() as read:
            for position in positions:
                trajectory = read(position)
                if trajectory is not None:
                    yield position, trajectory

    @contextmanager
    def reader(self) -> Iterator[Callable[[int], Trajectory | None]]:
        """A function reading the record at a position (None, with a warning, when it no longer reads back), on one
        handle of the file kept open while the block runs."""
        where = str(self.path)
        with folder_tree(self.path.parent, self.budget).open(self.path.name) as handle:

            def read(position: int) -> Trajectory | None:
                offset = self.index.offsets[position]
                line, refusal = line_at(handle, offset, self.budget)
                return _decoded(f"{where} at byte {offset}", line, refusal, Trajectory)

            yield read

    def at(self, position: int) -> Trajectory | None:
        """The record at ``position`` (None when it no longer reads back)."""
        with self.reader() as read:
            return read(position)


_TERMINATIONS = list(TerminationReason)
_UNRETRYABLE = 0x80


class ResultStore:
    """``results.jsonl`` of one run, opened for appending. It keeps per episode its id, where its record stands and
    how it ended (for ``--resume``), never the record; a ``listener`` (the run's running summary) is told every
    record the file holds as it is read at opening, then each one appended."""

    def __init__(self, path: Path, *, fsync: bool = False, listener: RecordListener | None = None):
        self.path = path
        self.fsync = fsync
        self.index = RecordIndex(path, listener)
        self._states = bytearray()
        """Position → the index of its termination in TerminationReason, with _UNRETRYABLE set for an
        infrastructure error whose record says a retry cannot help."""
        self._handle: IO[bytes] | None = None
        self._size = 0
        self._load()

    def __len__(self) -> int:
        return len(self.index)

    def episode_ids(self) -> Iterator[str]:
        """The episodes recorded, in the order of their first line."""
        return iter(self.index.positions)

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
        self._size = end
        for _, offset, trajectory in read_records_at(self.path, Trajectory):
            self._note(trajectory, offset)

    def _note(self, trajectory: Trajectory, offset: int) -> None:
        position = self.index.note(trajectory, offset)
        state = _TERMINATIONS.index(trajectory.termination)
        failure = trajectory.failure
        if failure is not None and failure.retryable is False:
            state |= _UNRETRYABLE
        if position == len(self._states):
            self._states.append(state)
        else:
            self._states[position] = state

    def finished(self, retry_errors: bool = False, retry_unretryable: bool = False) -> set[str]:
        """Episode ids whose result stands. With ``retry_errors``, infrastructure errors a retry can help do not
        (with ``retry_unretryable`` too, none do)."""
        if not retry_errors:
            return set(self.index.positions)
        infra = _TERMINATIONS.index(TerminationReason.INFRA_ERROR)
        return {
            episode
            for episode, position in self.index.positions.items()
            if (self._states[position] & ~_UNRETRYABLE) != infra
            or (self._states[position] & _UNRETRYABLE and not retry_unretryable)
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
        offset = self._size
        self._size += len(written) + 1
        if self.index.listener is not None and redacted != text:
            # What the file holds (and a reader gets) is the redacted record, not the one in memory.
            stored = decode_record(written, Trajectory)
        self._note(stored, offset)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        self.index.close()
