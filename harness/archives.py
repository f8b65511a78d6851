"""Reading members of a zip archive from outside (a wheel) with limits, so that a bomb cannot exhaust the harness.

Each member's declared size and compression ratio are checked before it is opened, and it is read in chunks with
a cap, so that a member whose data inflates past what it declares is refused too, after at most the cap.
"""

from __future__ import annotations

import zipfile
from pathlib import PurePosixPath

from harness.errors import BadInput

MAX_MEMBER_BYTES = 256 << 20
"""The largest member read (a benchmark's data file is a few MB)."""
MAX_RATIO = 100
"""The largest size-to-compressed-size ratio of a member above :data:`RATIO_FLOOR_BYTES` (text deflates ~5:1)."""
RATIO_FLOOR_BYTES = 1 << 20
"""Members below this size are not held to the ratio (a tiny file of repeated bytes is harmless)."""
CHUNK_BYTES = 1 << 20


class ArchiveRefused(BadInput):
    """A member of an archive that is too large, too compressed, or whose path leaves the archive."""


def require_safe_member_name(archive: str, name: str) -> str:
    """``name`` if it stays inside the archive: no absolute path, no ``..`` segment, no drive letter."""
    normalized = name.replace("\\", "/")
    path = PurePosixPath(normalized)
    if normalized.startswith("/") or ".." in path.parts or (len(normalized) > 1 and normalized[1] == ":"):
        raise ArchiveRefused(f"{archive}: member {name!r} has a path that leaves the archive")
    return name


def check_member(archive: str, info: zipfile.ZipInfo, *, max_bytes: int = MAX_MEMBER_BYTES) -> None:
    """Refuse ``info`` from what its header declares, before any of its data is read."""
    require_safe_member_name(archive, info.filename)
    ratio = info.file_size / max(info.compress_size, 1)
    if info.file_size > RATIO_FLOOR_BYTES and ratio > MAX_RATIO:
        raise ArchiveRefused(
            f"{archive}: member {info.filename!r} inflates {ratio:,.0f}:1 "
            f"({info.compress_size:,} to {info.file_size:,} bytes); the limit is {MAX_RATIO}:1"
        )
    if info.file_size > max_bytes:
        raise ArchiveRefused(
            f"{archive}: member {info.filename!r} declares {info.file_size:,} bytes; the limit is {max_bytes:,}"
        )


def read_member(archive: zipfile.ZipFile, name: str, label: str, *, max_bytes: int = MAX_MEMBER_BYTES) -> bytes:
    """The bytes of member ``name`` of ``archive`` (called ``label`` in messages), checked and read with a cap:
    never more than the smaller of its declared size and ``max_bytes``, plus one chunk."""
    info = archive.getinfo(name)
    check_member(label, info, max_bytes=max_bytes)
    cap = min(info.file_size, max_bytes)
    chunks: list[bytes] = []
    read = 0
    with archive.open(info) as member:
        while chunk := member.read(CHUNK_BYTES):
            read += len(chunk)
            if read > cap:
                raise ArchiveRefused(
                    f"{label}: member {name!r} holds more than the {info.file_size:,} bytes it declares"
                )
            chunks.append(chunk)
    return b"".join(chunks)
