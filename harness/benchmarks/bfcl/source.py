"""Reading a copy of the ``bfcl-eval`` release (its wheel, or the unpacked folder) without importing it.

Everything is read as text: the data files as JSON lines, the constants and class modules by parsing their
source. Nothing of ``bfcl_eval`` is ever imported or executed in this process.
"""

from __future__ import annotations

import ast
import re
import zipfile
from pathlib import Path
from typing import Any

import orjson

from harness.archives import ArchiveRefused, check_member, read_member

PACKAGE = "bfcl_eval"
CATEGORIES: tuple[str, ...] = (
    "multi_turn_base",
    "multi_turn_miss_func",
    "multi_turn_miss_param",
    "multi_turn_long_context",
)
CLASS_SOURCE_FOLDER = "eval_checker/multi_turn_eval/func_source_code"


class BfclSourceError(ValueError):
    """The source is not a usable copy of the BFCL release."""


class BfclSource:
    """Files of the ``bfcl_eval`` package, read from a wheel or from a folder that holds it."""

    def __init__(self, path: Path):
        self.path = path
        self._zip: zipfile.ZipFile | None = None
        self._root: Path | None = None
        self._prefix = ""
        if path.is_file():
            if not zipfile.is_zipfile(path):
                raise BfclSourceError(f"{path} is neither a folder nor a wheel (zip) file")
            self._zip = zipfile.ZipFile(path)
            try:
                for info in self._zip.infolist():  # every member's header, before any data is read
                    check_member(str(path), info)
            except ArchiveRefused:
                self._zip.close()
                raise
            names = self._zip.namelist()
            marker = f"{PACKAGE}/data/"
            prefixes = {name[: name.index(marker)] for name in names if marker in name}
            if not prefixes:
                raise BfclSourceError(f"{path} holds no {PACKAGE}/data/: it is not a bfcl-eval wheel")
            self._prefix = min(prefixes, key=len) + PACKAGE + "/"
        elif path.is_dir():
            for candidate in (path / PACKAGE, path):
                if (candidate / "data").is_dir() and (candidate / CLASS_SOURCE_FOLDER).is_dir():
                    self._root = candidate
                    break
            if self._root is None:
                raise BfclSourceError(
                    f"{path} is not an unpacked bfcl-eval: no {PACKAGE}/data and {PACKAGE}/{CLASS_SOURCE_FOLDER}"
                )
        else:
            raise BfclSourceError(f"{path} does not exist")
        self.version = self._read_version()
        # The release's declared license as a Hub license id, so that a published import keeps it.
        declared = self._read_metadata_field("License-Expression") or self._read_metadata_field("License")
        self.license = hub_license_id(declared)

    def close(self) -> None:
        if self._zip is not None:
            self._zip.close()

    def _read_member(self, name: str) -> bytes:
        assert self._zip is not None
        return read_member(self._zip, name, str(self.path))

    def exists(self, relative: str) -> bool:
        if self._zip is not None:
            try:
                self._zip.getinfo(self._prefix + relative)
            except KeyError:
                return False
            return True
        assert self._root is not None
        return (self._root / relative).is_file()

    def read_text(self, relative: str) -> str:
        if not self.exists(relative):
            raise BfclSourceError(f"{self.path} has no {PACKAGE}/{relative}")
        if self._zip is not None:
            return self._read_member(self._prefix + relative).decode("utf-8")
        assert self._root is not None
        return (self._root / relative).read_text(encoding="utf-8")

    def read_jsonl(self, relative: str) -> list[dict[str, Any]]:
        rows = []
        for number, line in enumerate(self.read_text(relative).splitlines(), start=1):
            if not line.strip():
                continue
            try:
                rows.append(orjson.loads(line))
            except orjson.JSONDecodeError as exc:
                raise BfclSourceError(f"{PACKAGE}/{relative}:{number}: not JSON: {exc}") from exc
        return rows

    def constants(self, relative: str) -> dict[str, Any]:
        """Top-level ``NAME = literal`` assignments of a module, read without running it. f-strings keep their
        literal parts only (enough for the module paths this importer needs)."""
        tree = ast.parse(self.read_text(relative))
        values: dict[str, Any] = {}
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                try:
                    values[node.targets[0].id] = _literal(node.value)
                except ValueError:
                    continue
        return values

    def _metadata_text(self) -> str | None:
        if self._zip is not None:
            for name in self._zip.namelist():
                if name.endswith(".dist-info/METADATA"):
                    return self._read_member(name).decode("utf-8", "replace")
            return None
        assert self._root is not None
        for metadata in sorted(self._root.parent.glob("bfcl_eval-*.dist-info/METADATA")):
            return metadata.read_text(encoding="utf-8", errors="replace")
        return None

    def _read_metadata_field(self, field: str) -> str | None:
        text = self._metadata_text()
        match = re.search(rf"^{re.escape(field)}:\s*(.+)$", text or "", re.MULTILINE)
        return match.group(1).strip() if match else None

    def _read_version(self) -> str:
        if self._zip is not None:
            match = re.match(r"bfcl_eval-([^-]+)-", self.path.name)
            if match:
                return match.group(1)
            for name in self._zip.namelist():
                if name.endswith(".dist-info/METADATA"):
                    return _metadata_version(self._read_member(name).decode("utf-8", "replace"))
            return "unknown"
        assert self._root is not None
        for metadata in sorted(self._root.parent.glob("bfcl_eval-*.dist-info/METADATA")):
            return _metadata_version(metadata.read_text(encoding="utf-8", errors="replace"))
        return "unknown"


_HUB_LICENSES = {
    "apache 2.0": "apache-2.0",
    "apache-2.0": "apache-2.0",
    "apache license 2.0": "apache-2.0",
    "apache license, version 2.0": "apache-2.0",
    "apache software license": "apache-2.0",
    "mit": "mit",
    "mit license": "mit",
    "bsd-3-clause": "bsd-3-clause",
    "cc-by-4.0": "cc-by-4.0",
}


def hub_license_id(text: str | None) -> str | None:
    """The Hub's license id for a package's declared license, "other" for one it has no id for, None when
    nothing is declared."""
    if not text or not text.strip():
        return None
    return _HUB_LICENSES.get(" ".join(text.lower().split()), "other")


def _metadata_version(text: str) -> str:
    match = re.search(r"^Version:\s*(\S+)", text, re.MULTILINE)
    return match.group(1) if match else "unknown"


def _literal(node: ast.expr) -> Any:
    if isinstance(node, ast.JoinedStr):
        return "".join(str(part.value) for part in node.values if isinstance(part, ast.Constant))
    if isinstance(node, ast.Dict):
        return {_literal(k): _literal(v) for k, v in zip(node.keys, node.values, strict=True) if k is not None}
    if isinstance(node, ast.List | ast.Tuple):
        return [_literal(item) for item in node.elts]
    return ast.literal_eval(node)
