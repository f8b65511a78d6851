"""A downloaded source (a checkout, an unpacked release, a wheel) or a run folder, every file read as hostile.

:class:`SourceTree` is the one reader for files that come from someone else:

- a path is relative to the tree's root: no absolute path, no ``..`` segment, no NUL byte;
- in a folder, every component is opened without following symbolic links (``O_NOFOLLOW`` from the root's
  descriptor down), so a symlink anywhere on the way is refused with its path, and only regular files are read;
- in a zip archive, member headers are checked before any data is read (declared size, compression ratio,
  a name that stays inside) and symlink members are refused;
- every file is size-limited and read with a cap; JSON is decoded under a :class:`~harness.files.budget.ReadBudget`.
"""

from __future__ import annotations

import io
import os
import stat
import zipfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import IO, Any

from harness.files.archives import ArchiveRefused, check_member
from harness.files.budget import DEFAULT_BUDGET, ReadBudget, UnsafeFile, check_nesting, count_values, decode_json

_CHUNK = 1 << 20
FILE = "file"
FOLDER = "folder"
SYMLINK = "symlink"
OTHER = "other"


def require_relative(relative: str, label: str) -> tuple[str, ...]:
    """The parts of ``relative`` if it names something inside its root; otherwise :class:`UnsafeFile`."""
    if "\x00" in relative or "\\" in relative:
        raise UnsafeFile(f"{label}: the path {relative!r} is not a plain relative path")
    path = PurePosixPath(relative)
    if path.is_absolute() or ".." in path.parts:
        raise UnsafeFile(f"{label}: the path {relative!r} leaves its folder")
    return tuple(part for part in path.parts if part not in ("", "."))


def _is_symlink_member(info: zipfile.ZipInfo) -> bool:
    return stat.S_ISLNK(info.external_attr >> 16)


class SourceTree:
    """Files under a folder or inside a zip archive, read only through the checks above.

    ``prefix`` roots the tree at a sub-folder (a wheel's package folder); :meth:`sub` makes such a view. ``label``
    names the source in messages (by default its path)."""

    def __init__(
        self,
        path: Path,
        *,
        label: str | None = None,
        budget: ReadBudget = DEFAULT_BUDGET,
        _archive: zipfile.ZipFile | None = None,
        _prefix: tuple[str, ...] = (),
    ) -> None:
        self.path = Path(path)
        self.label = label or str(path)
        self.budget = budget
        self.prefix = _prefix
        self._archive = _archive
        self._owns_archive = False
        if _archive is not None:
            return
        if self.path.is_dir():
            self._root = os.path.realpath(self.path)
        elif self.path.is_file() and zipfile.is_zipfile(self.path):
            archive = zipfile.ZipFile(self.path)
            try:
                for info in archive.infolist():  # every member's header, before any data is read
                    check_member(self.label, info, max_bytes=budget.max_bytes)
            except ArchiveRefused:
                archive.close()
                raise
            self._archive = archive
            self._owns_archive = True
        elif self.path.exists():
            raise UnsafeFile(f"{self.label}: neither a folder nor a zip archive")
        else:
            raise UnsafeFile(f"{self.label}: does not exist")

    # ------------------------------------------------------------------------------------------- the tree

    @property
    def is_archive(self) -> bool:
        return self._archive is not None

    def sub(self, relative: str) -> SourceTree:
        """The same source, rooted at ``relative`` (which must be a folder of it)."""
        parts = require_relative(relative, self.label)
        if self.kind(relative) != FOLDER:
            raise UnsafeFile(f"{self.label}: {relative} is not a folder")
        view = SourceTree(self.path, label=self.label, budget=self.budget, _archive=self._archive, _prefix=())
        if self._archive is None:
            view._root = self._root
        view.prefix = (*self.prefix, *parts)
        return view

    def close(self) -> None:
        if self._archive is not None and self._owns_archive:
            self._archive.close()

    def __enter__(self) -> SourceTree:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def where(self, relative: str) -> str:
        """How a message names ``relative`` of this tree."""
        return "/".join((self.label, *self.prefix, *require_relative(relative, self.label)))

    def kind(self, relative: str) -> str | None:
        """``file``, ``folder``, ``symlink`` or ``other`` for what ``relative`` names; None when nothing does.
        A symlink on the way to it is refused."""
        parts = (*self.prefix, *require_relative(relative, self.label))
        if self._archive is not None:
            return self._member_kind("/".join(parts))
        if not parts:
            return FOLDER
        with self._parent_fd(parts, relative) as parent:
            if parent is None:
                return None
            try:
                info = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
            except FileNotFoundError:
                return None
        if stat.S_ISLNK(info.st_mode):
            return SYMLINK
        if stat.S_ISDIR(info.st_mode):
            return FOLDER
        return FILE if stat.S_ISREG(info.st_mode) else OTHER

    def exists(self, relative: str) -> bool:
        """Whether ``relative`` is a regular file; a symlink there is refused, not skipped."""
        kind = self.kind(relative)
        if kind == SYMLINK:
            raise UnsafeFile(f"{self.where(relative)} is a symbolic link; files of a source must be regular files")
        return kind == FILE

    def is_dir(self, relative: str) -> bool:
        kind = self.kind(relative)
        if kind == SYMLINK:
            raise UnsafeFile(f"{self.where(relative)} is a symbolic link; folders of a source must be real folders")
        return kind == FOLDER

    def entries(self, relative: str = "") -> dict[str, str]:
        """The names in folder ``relative`` with their kinds (``file``, ``folder``, ``symlink``, ``other``)."""
        parts = (*self.prefix, *require_relative(relative, self.label))
        if self._archive is not None:
            return self._member_entries(parts)
        if not self.is_dir(relative):
            return {}
        found: dict[str, str] = {}
        with self._folder_fd(parts, relative) as folder:
            assert folder is not None
            for name in os.listdir(folder):
                info = os.stat(name, dir_fd=folder, follow_symlinks=False)
                if stat.S_ISLNK(info.st_mode):
                    found[name] = SYMLINK
                elif stat.S_ISDIR(info.st_mode):
                    found[name] = FOLDER
                else:
                    found[name] = FILE if stat.S_ISREG(info.st_mode) else OTHER
        return dict(sorted(found.items()))

    # ------------------------------------------------------------------------------------------- reading

    def read_bytes(self, relative: str, *, max_bytes: int | None = None) -> bytes:
        """The bytes of file ``relative``, at most ``max_bytes`` (the budget's by default)."""
        limit = self.budget.max_bytes if max_bytes is None else max_bytes
        with self.open(relative, max_bytes=limit) as handle:
            data = handle.read(limit + 1)
        if len(data) > limit:
            raise UnsafeFile(f"{self.where(relative)}: larger than the limit of {limit:,} bytes")
        return data

    def read_text(self, relative: str, *, max_bytes: int | None = None) -> str:
        data = self.read_bytes(relative, max_bytes=max_bytes)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UnsafeFile(f"{self.where(relative)}: is not UTF-8 text: {exc}") from None

    def read_json(self, relative: str) -> Any:
        """The JSON value of file ``relative``; a file over the budget is refused while it is still being read."""
        with self.open(relative, max_bytes=self.budget.max_bytes) as handle:
            return read_json_stream(handle, self.where(relative), self.budget)

    def read_json_lines(self, relative: str) -> Iterator[tuple[int, Any]]:
        """Each non-blank line of a JSON-lines file with its number, decoded. Each line, and the file in all, is
        held to the budget; a line that is not JSON raises :class:`UnsafeFile` naming it."""
        where = self.where(relative)
        with self.open(relative) as handle:
            yield from decode_lines(handle, where, self.budget)

    def open(self, relative: str, *, max_bytes: int | None = None) -> IO[bytes]:
        """A binary handle on regular file ``relative`` (refused when larger than ``max_bytes``)."""
        limit = self.budget.max_bytes if max_bytes is None else max_bytes
        parts = (*self.prefix, *require_relative(relative, self.label))
        where = self.where(relative)
        if not parts:
            raise UnsafeFile(f"{where}: is a folder, not a file")
        if self._archive is not None:
            name = "/".join(parts)
            kind = self._member_kind(name)
            if kind == SYMLINK:
                raise UnsafeFile(f"{where} is a symbolic link; files of a source must be regular files")
            if kind != FILE:
                raise UnsafeFile(f"{where}: no such file")
            member = self._archive.getinfo(name)
            check_member(self.label, member, max_bytes=limit)
            return _CappedMember(self._archive.open(member), min(member.file_size, limit), where)  # type: ignore[return-value]  # a binary stream, as IO[bytes] is read here
        with self._parent_fd(parts, relative) as parent:
            if parent is None:
                raise UnsafeFile(f"{where}: no such file")
            try:
                info = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
            except FileNotFoundError:
                raise UnsafeFile(f"{where}: no such file") from None
            if stat.S_ISLNK(info.st_mode):
                raise UnsafeFile(f"{where} is a symbolic link; files of a source must be regular files")
            if not stat.S_ISREG(info.st_mode):
                raise UnsafeFile(f"{where}: not a regular file")
            descriptor = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=parent)
        handle = os.fdopen(descriptor, "rb")
        opened = os.fstat(handle.fileno())
        if not stat.S_ISREG(opened.st_mode):
            handle.close()
            raise UnsafeFile(f"{where}: not a regular file")
        if opened.st_size > limit:
            handle.close()
            raise UnsafeFile(f"{where}: {opened.st_size:,} bytes; the limit is {limit:,}")
        return handle

    # ------------------------------------------------------------------------------------------- folders

    def _walk(self, parts: tuple[str, ...], relative: str) -> int | None:
        """A descriptor of the folder ``parts`` names, opened component by component without following links;
        None when a component does not exist."""
        descriptor = os.open(self._root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for index, part in enumerate(parts):
                try:
                    info = os.stat(part, dir_fd=descriptor, follow_symlinks=False)
                except FileNotFoundError:
                    os.close(descriptor)
                    return None
                if stat.S_ISLNK(info.st_mode):
                    link = "/".join((self.label, *parts[: index + 1]))
                    raise UnsafeFile(f"{link} is a symbolic link; a source's files are read only inside it")
                if not stat.S_ISDIR(info.st_mode):
                    os.close(descriptor)
                    return None
                child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=descriptor)
                os.close(descriptor)
                descriptor = child
        except BaseException:
            os.close(descriptor)
            raise
        return descriptor

    def _parent_fd(self, parts: tuple[str, ...], relative: str) -> _Descriptor:
        return _Descriptor(self._walk(parts[:-1], relative))

    def _folder_fd(self, parts: tuple[str, ...], relative: str) -> _Descriptor:
        return _Descriptor(self._walk(parts, relative))

    # ------------------------------------------------------------------------------------------- archives

    def _member_kind(self, name: str) -> str | None:
        assert self._archive is not None
        if not name:
            return FOLDER
        info = self._archive.NameToInfo.get(name)
        if info is not None:
            if _is_symlink_member(info):
                return SYMLINK
            return FOLDER if info.is_dir() else FILE
        if name + "/" in self._archive.NameToInfo or any(n.startswith(name + "/") for n in self._archive.NameToInfo):
            return FOLDER
        return None

    def _member_entries(self, parts: tuple[str, ...]) -> dict[str, str]:
        assert self._archive is not None
        base = "/".join(parts) + "/" if parts else ""
        found: dict[str, str] = {}
        for name in self._archive.NameToInfo:
            if not name.startswith(base) or name == base:
                continue
            rest = name[len(base) :]
            head, _, tail = rest.partition("/")
            if tail or rest.endswith("/"):
                found.setdefault(head, FOLDER)
            else:
                found[head] = self._member_kind(base + head) or FILE
        return dict(sorted(found.items()))


class _CappedMember(io.BufferedIOBase):
    """An archive member's data, refused once it holds more than its header declared (or the limit)."""

    def __init__(self, member: IO[bytes], cap: int, where: str) -> None:
        self.member = member
        self.cap = cap
        self.where = where
        self.seen = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        data = self.member.read(-1 if size is None else size)
        self.seen += len(data)
        if self.seen > self.cap:
            raise UnsafeFile(f"{self.where}: holds more than the {self.cap:,} bytes its archive header declares")
        return data

    def readline(self, size: int | None = -1) -> bytes:
        data = self.member.readline(-1 if size is None else size)
        self.seen += len(data)
        if self.seen > self.cap:
            raise UnsafeFile(f"{self.where}: holds more than the {self.cap:,} bytes its archive header declares")
        return data

    def close(self) -> None:
        self.member.close()
        super().close()


class _Descriptor:
    """A folder descriptor closed on leaving the ``with`` block (None passes through)."""

    def __init__(self, descriptor: int | None) -> None:
        self.descriptor = descriptor

    def __enter__(self) -> int | None:
        return self.descriptor

    def __exit__(self, *_: object) -> None:
        if self.descriptor is not None:
            os.close(self.descriptor)


def read_json_stream(handle: IO[bytes], where: str, budget: ReadBudget) -> Any:
    """The JSON value of what ``handle`` holds (``where`` names it), read chunk by chunk: a text over ``budget``'s
    bytes or values is refused as soon as a chunk shows it, before anything is decoded."""
    chunks: list[bytes] = []
    values = 1
    size = 0
    while chunk := handle.read(_CHUNK):
        size += len(chunk)
        if size > budget.max_bytes:
            raise UnsafeFile(f"{where}: larger than the limit of {budget.max_bytes:,} bytes")
        values += count_values(chunk)
        if values > budget.max_values:
            raise UnsafeFile(f"{where}: holds more than {budget.max_values:,} JSON values (an amplification bomb?)")
        chunks.append(chunk)
    return decode_json(b"".join(chunks), where, budget)


def read_named_json(path: Path, budget: ReadBudget = DEFAULT_BUDGET) -> Any:
    """The JSON value of a file the user named on the command line, read under ``budget``.

    The user chose this path, so a symbolic link in it is followed (a Hub snapshot's files are links into its
    blob store); what it leads to must be a regular file, and it is read as :meth:`SourceTree.read_json` reads."""
    where = str(path)
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        raise UnsafeFile(f"{where}: no such file") from None
    except OSError as exc:
        raise UnsafeFile(f"{where}: cannot be read: {exc.strerror or exc}") from None
    opened = os.fstat(descriptor)
    if not stat.S_ISREG(opened.st_mode) or opened.st_size > budget.max_bytes:
        os.close(descriptor)
        if not stat.S_ISREG(opened.st_mode):
            raise UnsafeFile(f"{where}: not a regular file")
        raise UnsafeFile(f"{where}: {opened.st_size:,} bytes; the limit is {budget.max_bytes:,}")
    with os.fdopen(descriptor, "rb") as handle:
        return read_json_stream(handle, where, budget)


def decode_lines(handle: IO[bytes], where: str, budget: ReadBudget) -> Iterator[tuple[int, Any]]:
    """The JSON value of each non-blank line of ``handle`` with its number, every line and the whole held to
    ``budget``."""
    total = 0
    for number, line in enumerate(bounded_lines(handle, where, budget.line_bytes), start=1):
        if not line.strip():
            continue
        values = count_values(line) + 1
        total += values
        if values > budget.line_values or total > budget.max_values:
            raise UnsafeFile(f"{where}:{number}: holds more JSON values than the limit allows")
        try:
            value = _loads(line)
        except ValueError as exc:
            raise UnsafeFile(f"{where}:{number}: is not JSON: {exc}") from None
        check_nesting(value, f"{where}:{number}", budget)
        yield number, value


def bounded_lines(handle: IO[bytes], where: str, max_line_bytes: int) -> Iterator[bytes]:
    """The lines of ``handle`` (with their newline), refusing one longer than ``max_line_bytes`` before it is
    held whole."""
    while True:
        line = handle.readline(max_line_bytes + 1)
        if not line:
            return
        if len(line) > max_line_bytes and not line.endswith(b"\n"):
            raise UnsafeFile(f"{where}: a line is longer than {max_line_bytes:,} bytes")
        yield line


def _loads(line: bytes) -> Any:
    import orjson

    return orjson.loads(line)
