"""The members of a zip archive from outside (a wheel), checked from their headers so that a bomb cannot exhaust
the harness: each member's declared size, compression ratio and name are checked before any data is read.
:class:`harness.files.SourceTree` then reads a member in chunks, never past what it declares.
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
