"""Where an export writes: only inside the folder its ``--out`` names, under names made safe from what records say.

A run folder may come from a submitter, and a library from the Hub: a model name ``../../x``, a scenario id
``/etc/x`` or a category with a path separator must not choose where a file lands. Every name built from a record
goes through :func:`safe_file_name` (a name that is already safe stays as it is, so exports of ordinary runs do
not change), and every file goes through :class:`OutputFolder`, which refuses a part that is not one plain name
and checks that the resolved path of what it writes (after its folders are made, so a symlinked folder on the way
is seen) is inside the folder, before anything is written there. A file is written beside its final name and then
renamed into place, so a reader never sees half of it and a symlink left at the name is replaced, not followed.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from harness.errors import BadInput
from harness.names import is_safe_id

_UNSAFE_CHARACTERS = re.compile(r"[^A-Za-z0-9._-]+")
_MAX_NAME = 100


class OutsideOutput(BadInput):
    """A file an export would write outside its ``--out``, or a name that is not one plain file name."""


def safe_file_name(text: str, fallback: str = "unnamed") -> str:
    """``text`` as one file name: itself when it is already safe (:func:`harness.names.is_safe_id`), otherwise its
    letters, digits, ``.``, ``_`` and ``-`` followed by a short hash of the whole text, so that two different texts
    never share a name (``../../x`` becomes ``x-<hash>``)."""
    if is_safe_id(text):
        return text
    kept = _UNSAFE_CHARACTERS.sub("_", text).replace("..", "_").strip("._-")[:_MAX_NAME] or fallback
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{kept}-{digest}"


def _require_part(part: str) -> str:
    if not part or part in (".", "..") or "/" in part or "\\" in part or "\x00" in part:
        raise OutsideOutput(f"{part!r} is not a plain file name; an export writes only inside its --out")
    return part


class OutputFolder:
    """The folder an export writes into; nothing it writes lands outside it."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def path(self, *parts: str) -> Path:
        """The path of ``parts`` (each one plain name) inside the folder; :class:`OutsideOutput` when it would
        resolve outside."""
        path = self.root.joinpath(*(_require_part(part) for part in parts))
        self.require_inside(path)
        return path

    def require_inside(self, path: Path) -> Path:
        root = os.path.realpath(self.root)
        real = os.path.realpath(path)
        if real != root and not real.startswith(root.rstrip(os.sep) + os.sep):
            raise OutsideOutput(f"{path} resolves to {real}, outside the output folder {self.root}")
        return path

    def write_bytes(self, parts: tuple[str, ...] | str, data: bytes) -> Path:
        """Write ``data`` to ``parts`` inside the folder (its folders made first) and return its path."""
        with self.writer(parts) as handle:
            handle.write(data)
        return self.path(*((parts,) if isinstance(parts, str) else parts))

    @contextmanager
    def writer(self, parts: tuple[str, ...] | str) -> Iterator[IO[bytes]]:
        """A handle to write ``parts`` inside the folder piece by piece (its folders made first): what is written
        lands at its name when the block ends, and nothing does when it raises."""
        names = (parts,) if isinstance(parts, str) else parts
        path = self.path(*names)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.require_inside(path)
        temporary = self.require_inside(path.with_name(path.name + ".tmp"))
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            with os.fdopen(descriptor, "wb") as handle:
                yield handle
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        os.replace(temporary, path)

    def write_text(self, parts: tuple[str, ...] | str, text: str) -> Path:
        return self.write_bytes(parts, text.encode("utf-8"))


def write_output_file(out: Path, data: bytes) -> Path:
    """Write the one file an export's ``--out`` names (atomically, its folder made first)."""
    return OutputFolder(out.parent).write_bytes(out.name, data)


@contextmanager
def output_file_writer(out: Path) -> Iterator[IO[bytes]]:
    """A handle to write the one file an export's ``--out`` names piece by piece (see :meth:`OutputFolder.writer`)."""
    with OutputFolder(out.parent).writer(out.name) as handle:
        yield handle
