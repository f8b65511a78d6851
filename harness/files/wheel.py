"""What a wheel (or its unpacked folder) says about itself: its ``*.dist-info/METADATA``, read through a
:class:`~harness.files.tree.SourceTree` like any other file of the source, and the fields importers record."""

from __future__ import annotations

import re

from harness.files.budget import UnsafeFile
from harness.files.tree import FOLDER, SourceTree

METADATA_BYTES = 1 << 20
"""A package's METADATA is its description and headers: tens of KB."""
_VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+!_-]{0,63}")


def dist_info_metadata(tree: SourceTree, folder: str = "", *, project: str | None = None) -> str | None:
    """The text of the METADATA of the first ``*.dist-info`` folder (of ``project``'s, when given: a folder named
    ``<project>-<version>.dist-info``) in ``folder`` of ``tree``; None when there is none."""
    prefix = f"{folder}/" if folder else ""
    for name, kind in tree.entries(folder).items():
        if kind != FOLDER or not name.endswith(".dist-info"):
            continue
        if project is not None and not name.startswith(f"{project}-"):
            continue
        if not tree.exists(f"{prefix}{name}/METADATA"):  # a symlinked METADATA is refused, not skipped
            continue
        data = tree.read_bytes(f"{prefix}{name}/METADATA", max_bytes=METADATA_BYTES)
        return data.decode("utf-8", "replace")
    return None


def metadata_field(text: str | None, field: str) -> str | None:
    """The value of header ``field`` of a METADATA text (the first one), stripped; None when absent."""
    match = re.search(rf"^{re.escape(field)}:[ \t]*(.+?)[ \t]*$", text or "", re.MULTILINE)
    return match.group(1) if match else None


def require_version(text: str, where: str) -> str:
    """``text`` if it reads as a package version (letters, digits, ``.+!_-``; at most 64 characters)."""
    if not _VERSION.fullmatch(text):
        raise UnsafeFile(f"{where}: {text[:80]!r} is not a version number")
    return text
