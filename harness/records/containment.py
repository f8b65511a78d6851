"""Files of a library stay inside the library: a symlink or a path that resolves outside its folder is refused.

A library folder, a built Hub-format folder or a downloaded Hub snapshot is a stranger's work: a scenario file
that is a symlink to ``~/.ssh/id_rsa`` or a card pattern ``../other-dataset/*.parquet`` would otherwise pull a
host file into a run manifest or a published dataset.
"""

from __future__ import annotations

import os
from pathlib import Path

from harness.errors import BadInput


class OutsideLibrary(BadInput):
    """A file of a library that is a symlink, or that resolves outside the library's folder."""


def containing_root(folder: Path) -> Path:
    """The folder every file of ``folder`` must resolve into. A Hub snapshot (``.../snapshots/<sha>``) links its
    files to the repository's ``blobs``: its root is that repository's cache folder, never the cache itself."""
    real = Path(os.path.realpath(folder))
    if folder.parent.name == "snapshots":
        return Path(os.path.realpath(folder.parent.parent))
    return real


def is_hub_snapshot(folder: Path) -> bool:
    return folder.parent.name == "snapshots"


def require_inside(path: Path, folder: Path, what: str) -> Path:
    """``path`` itself if it resolves inside ``folder`` (and, outside a Hub snapshot, is no symlink); otherwise
    :class:`OutsideLibrary`, one line naming ``what``."""
    if path.is_symlink() and not is_hub_snapshot(folder):
        raise OutsideLibrary(f"{what}: {path} is a symlink; a library's files must be regular files inside it")
    root = containing_root(folder)
    real = Path(os.path.realpath(path))
    if real != root and root not in real.parents:
        raise OutsideLibrary(f"{what}: {path} resolves to {real}, outside the library folder {root}")
    return path


def require_relative_pattern(pattern: str, what: str) -> str:
    """A data-file pattern relative to its dataset folder: no absolute path, no ``..`` segment."""
    parts = pattern.replace("\\", "/").split("/")
    if Path(pattern).is_absolute() or pattern.startswith(("/", "\\", "~")) or ".." in parts:
        raise OutsideLibrary(f"{what}: the pattern {pattern!r} leaves the dataset folder")
    return pattern
