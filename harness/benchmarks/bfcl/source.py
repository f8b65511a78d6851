"""Reading a copy of the ``bfcl-eval`` release (its wheel, or the unpacked folder) without importing it.

Everything is read as text: the data files as JSON lines, the constants and class modules by parsing their
source. Nothing of ``bfcl_eval`` is ever imported or executed in this process. Every file is read through
:class:`harness.files.SourceTree`: wheel members are checked from their headers, a symbolic link is refused with its
path, sizes and JSON are bounded.
"""

from __future__ import annotations

import ast
import re
import zipfile
from pathlib import Path
from typing import Any

from harness.files import (
    FOLDER,
    RELEASE_BUDGET,
    SOURCE_TEXT_BYTES,
    SourceTree,
    dist_info_metadata,
    metadata_field,
    parse_python,
    require_version,
)

PACKAGE = "bfcl_eval"
CATEGORIES: tuple[str, ...] = (
    "multi_turn_base",
    "multi_turn_miss_func",
    "multi_turn_miss_param",
    "multi_turn_long_context",
)
CLASS_SOURCE_FOLDER = "eval_checker/multi_turn_eval/func_source_code"
MULTI_TURN_CHECKER = "eval_checker/multi_turn_eval/multi_turn_checker.py"
RELEASES: tuple[str, ...] = ("v3", "v4")
"""BFCL's data releases, as its data files name them (``data/BFCL_v3_multi_turn_base.json``): ``bfcl-eval`` up to
mid-2025 (e.g. 2025.6.16) ships v3, later ones v4."""
CURRENT_RELEASE = "v4"
"""The release a record that names none came from (imports before v3 was taken were all v4)."""
CONSTANT_FILES: tuple[str, ...] = (
    "constants/executable_backend_config.py",
    "eval_checker/multi_turn_eval/multi_turn_utils.py",
    "constants/category_mapping.py",
    "constants/default_prompts.py",
    "constants/type_mappings.py",
)
"""Where the releases define the constants the importer reads: v4 gathers the executor's in
``executable_backend_config.py``; v3 keeps the class files and stateless classes in ``multi_turn_utils.py`` and the
function-doc files in ``category_mapping.py``."""


class BfclSourceError(ValueError):
    """The source is not a usable copy of the BFCL release."""


class BfclSource:
    """Files of the ``bfcl_eval`` package, read from a wheel or from a folder that holds it."""

    def __init__(self, path: Path):
        self.path = path
        if not path.exists():
            raise BfclSourceError(f"{path} does not exist")
        if not path.is_dir() and not zipfile.is_zipfile(path):
            raise BfclSourceError(f"{path} is neither a folder nor a wheel (zip) file")
        # A wheel's member headers are checked here, before any data is read.
        self.tree = SourceTree(path, budget=RELEASE_BUDGET)
        try:
            self.package, beside = self._package()
            metadata = dist_info_metadata(self.tree, beside, project=PACKAGE) if beside is not None else None
            self.version = self._read_version(metadata)
            # The release's declared license as a Hub license id, so that a published import keeps it.
            declared = metadata_field(metadata, "License-Expression") or metadata_field(metadata, "License")
            self.license = hub_license_id(declared)
            self.release = self._read_release()
        except BaseException:
            self.tree.close()
            raise

    def _package(self) -> tuple[SourceTree, str | None]:
        """The ``bfcl_eval`` package as a tree of its own, and the folder beside it that holds its ``.dist-info``
        (None when the source is the package folder itself)."""
        if self.tree.is_archive:
            candidates = [PACKAGE] + [
                f"{name}/{PACKAGE}" for name, kind in self.tree.entries().items() if kind == FOLDER
            ]
            for candidate in candidates:
                if self.tree.kind(f"{candidate}/data") == FOLDER:
                    return self.tree.sub(candidate), candidate.rpartition("/")[0]
            raise BfclSourceError(f"{self.path} holds no {PACKAGE}/data/: it is not a bfcl-eval wheel")
        for candidate, beside in ((PACKAGE, ""), ("", None)):
            prefix = f"{candidate}/" if candidate else ""
            if self.tree.kind(f"{prefix}data") == FOLDER and self.tree.is_dir(f"{prefix}{CLASS_SOURCE_FOLDER}"):
                return (self.tree.sub(candidate) if candidate else self.tree), beside
        raise BfclSourceError(
            f"{self.path} is not an unpacked bfcl-eval: no {PACKAGE}/data and {PACKAGE}/{CLASS_SOURCE_FOLDER}"
        )

    def close(self) -> None:
        self.tree.close()

    def where(self, relative: str) -> str:
        """How a message names file ``relative`` of the package."""
        return self.package.where(relative)

    def exists(self, relative: str) -> bool:
        """Whether the package holds file ``relative``; a symbolic link there is refused, not skipped."""
        return self.package.exists(relative)

    def read_text(self, relative: str) -> str:
        if not self.exists(relative):
            raise BfclSourceError(f"{self.path} has no {PACKAGE}/{relative}")
        return self.package.read_text(relative, max_bytes=SOURCE_TEXT_BYTES)

    def parse(self, relative: str) -> ast.Module:
        """The syntax tree of a module of the package (parsed, never run)."""
        return parse_python(self.read_text(relative), self.where(relative))

    def read_jsonl(self, relative: str) -> list[dict[str, Any]]:
        """The rows of a JSON-lines data file, each line and the file in all held to the reader's budget."""
        if not self.exists(relative):
            raise BfclSourceError(f"{self.path} has no {PACKAGE}/{relative}")
        rows = []
        for number, row in self.package.read_json_lines(relative):
            if not isinstance(row, dict):
                raise BfclSourceError(f"{self.where(relative)}:{number}: not a JSON object")
            rows.append(row)
        return rows

    def constants(self, relative: str) -> dict[str, Any]:
        """Top-level ``NAME = literal`` assignments of a module, read without running it. f-strings keep their
        literal parts only (enough for the module paths this importer needs)."""
        tree = self.parse(relative)
        values: dict[str, Any] = {}
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                try:
                    values[node.targets[0].id] = _literal(node.value)
                except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
                    continue
        return values

    def data_file(self, category: str) -> str:
        """The release's data file of ``category`` (``data/BFCL_v3_multi_turn_base.json``)."""
        return f"data/BFCL_{self.release}_{category}.json"

    def answer_file(self, category: str) -> str:
        return f"data/possible_answer/BFCL_{self.release}_{category}.json"

    def _read_release(self) -> str:
        """v3 or v4, from the names of the multi-turn data files the copy holds."""
        found = [
            release
            for release in RELEASES
            if any(self.package.exists(f"data/BFCL_{release}_{category}.json") for category in CATEGORIES)
        ]
        if len(found) != 1:
            expected = " or ".join(f"data/BFCL_{release}_multi_turn_*.json" for release in RELEASES)
            held = "both" if found else "neither"
            raise BfclSourceError(f"{self.path} holds {held} of {expected}: it is not one BFCL release")
        return found[0]

    def constant(self, name: str) -> tuple[Any, str]:
        """A top-level literal constant of the release, from the first of :data:`CONSTANT_FILES` that defines it,
        and how a message names that file."""
        for relative in CONSTANT_FILES:
            if self.exists(relative):
                values = self.constants(relative)
                if name in values:
                    return values[name], self.where(relative)
        raise BfclSourceError(
            f"{self.path}: no constant {name} in {', '.join(CONSTANT_FILES)}; is it a bfcl-eval release?"
        )

    def _read_version(self, metadata: str | None) -> str:
        if self.tree.is_archive:
            match = re.match(r"bfcl_eval-([^-]+)-", self.path.name)
            if match:
                return require_version(match.group(1), f"{self.path} (its file name)")
        version = metadata_field(metadata, "Version")
        return require_version(version, f"{self.path} ({PACKAGE}'s METADATA)") if version else "unknown"


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


def _literal(node: ast.expr) -> Any:
    if isinstance(node, ast.JoinedStr):
        return "".join(str(part.value) for part in node.values if isinstance(part, ast.Constant))
    if isinstance(node, ast.Dict):
        return {_literal(k): _literal(v) for k, v in zip(node.keys, node.values, strict=True) if k is not None}
    if isinstance(node, ast.List | ast.Tuple):
        return [_literal(item) for item in node.elts]
    return ast.literal_eval(node)
