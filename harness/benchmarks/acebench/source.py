"""Reading a checkout of ACEBench (github.com/chenchen0103/ACEBench) as text, never importing it.

What the agent category uses of it: the task records and their possible answers (JSON lines under
``data_all/data_{en,zh}/``), the mapping from class names to scenario modules (``CLASS_FILE_PATH_MAPPING_{EN,ZH}``
in ``model_inference/{multi_turn,multi_step}/{category}_utils.py``), the attributes inference saves of each class
(``SAVED_CLASS`` in ``model_inference/apimodel_inference.py``), the domain prompts
(``model_inference/prompt_{en,zh}.py``), the agent prompts of the text setting
(``MULTI_TURN_AGENT_PROMPT_{SYSTEM,USER}_{EN,ZH}`` in ``model_inference/{category}/APIModel_agent.py``) and the
scenario modules themselves. Python files are read with :mod:`ast`
(literals only).

Every file is read through :class:`harness.files.SourceTree`: a symbolic link is refused with its path, a module
the checkout names (its class mapping, its imports) must be a dotted module name and so a file inside the checkout,
sizes and JSON are bounded, and the licence text copied into the records is at most
:data:`harness.files.LICENSE_TEXT_BYTES` (a longer one is refused).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import orjson

from harness.files import (
    LICENSE_TEXT_BYTES,
    RELEASE_BUDGET,
    SOURCE_TEXT_BYTES,
    SourceTree,
    UnsafeFile,
    bounded_lines,
    count_values,
    module_file,
    parse_python,
)
from harness.files.budget import check_nesting

CATEGORIES: tuple[str, ...] = ("multi_turn", "multi_step")
LANGUAGES: tuple[str, ...] = ("en", "zh")
EXPECTED_ENTRIES: tuple[str, ...] = ("data_all", "model_inference", "model_eval", "eval_main.py")
SOURCE_LICENSE = "MIT"


class AceBenchSourceError(ValueError):
    """The source is not a usable ACEBench checkout."""


def data_file(language: str, category: str) -> str:
    return f"data_all/data_{language}/data_agent_{category}.json"


def answer_file(language: str, category: str) -> str:
    return f"data_all/data_{language}/possible_answer/data_agent_{category}.json"


def utils_file(category: str) -> str:
    return f"model_inference/{category}/{category}_utils.py"


class AceBenchSource:
    """Files of an ACEBench checkout, read as text."""

    def __init__(self, path: Path):
        self.path = path
        if not path.is_dir():
            raise AceBenchSourceError(f"{path} is not a folder: --source takes an ACEBench checkout (git clone)")
        self.tree = SourceTree(path, budget=RELEASE_BUDGET)
        entries = self.tree.entries()
        found = sorted(name for name in entries if not name.startswith("."))
        missing = [name for name in EXPECTED_ENTRIES if name not in entries]
        if missing:
            shown = ", ".join(found[:12]) + (", …" if len(found) > 12 else "") if found else "nothing"
            raise AceBenchSourceError(
                f"{path} is not an ACEBench checkout: expected {', '.join(EXPECTED_ENTRIES)}; "
                f"missing {', '.join(missing)}; found {shown}"
            )
        self.license = SOURCE_LICENSE
        self.license_text = (
            self.tree.read_text("LICENSE.md", max_bytes=LICENSE_TEXT_BYTES) if self.exists("LICENSE.md") else ""
        )

    def where(self, relative: str) -> str:
        """How a message names file ``relative`` of the checkout."""
        return self.tree.where(relative)

    def exists(self, relative: str) -> bool:
        """Whether the checkout holds file ``relative``; a symbolic link there is refused, not skipped."""
        return self.tree.exists(relative)

    def read_text(self, relative: str) -> str:
        if not self.exists(relative):
            raise AceBenchSourceError(f"{self.path} has no {relative}")
        return self.tree.read_text(relative, max_bytes=SOURCE_TEXT_BYTES)

    def read_python(self, relative: str) -> tuple[str, ast.Module]:
        """A module's text and its syntax tree (it is parsed, never run)."""
        text = self.read_text(relative)
        return text, parse_python(text, self.where(relative))

    def read_lines(self, relative: str) -> list[tuple[int, Any]]:
        """The JSON lines of a file as (line number, value); a line that is not JSON is (line number, None).
        Each line, and the file in all, is held to the reader's budget of bytes, values and nesting."""
        if not self.exists(relative):
            raise AceBenchSourceError(f"{self.path} has no {relative}")
        where = self.where(relative)
        budget = self.tree.budget
        records: list[tuple[int, Any]] = []
        values = 0
        with self.tree.open(relative) as handle:
            for number, line in enumerate(bounded_lines(handle, where, budget.line_bytes), 1):
                if not line.strip():
                    continue
                values += count_values(line) + 1
                if values > budget.max_values:
                    raise UnsafeFile(f"{where}:{number}: holds more than {budget.max_values:,} JSON values in all")
                try:
                    value = orjson.loads(line)
                except orjson.JSONDecodeError:
                    records.append((number, None))
                    continue
                check_nesting(value, f"{where}:{number}", budget)
                records.append((number, value))
        return records

    def available(self) -> list[str]:
        """The language/category pairs this checkout holds agent data for."""
        return [
            f"{language}/{category}"
            for language in LANGUAGES
            for category in CATEGORIES
            if self.exists(data_file(language, category)) and self.exists(answer_file(language, category))
        ]

    def literal(self, relative: str, name: str) -> Any:
        """The value of a module-level ``name = <literal>`` in a Python file of the checkout."""
        _, tree = self.read_python(relative)
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                try:
                    return ast.literal_eval(node.value)
                except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError) as exc:
                    raise AceBenchSourceError(f"{self.path}: {relative}: {name} is not a literal") from exc
        raise AceBenchSourceError(f"{self.path}: {relative} defines no {name}")

    def class_modules(self, category: str, language: str) -> dict[str, str]:
        """Class name → the file of its scenario module (``CLASS_FILE_PATH_MAPPING_<LANG>``), each a dotted module
        name and so a file inside the checkout."""
        name = f"CLASS_FILE_PATH_MAPPING_{language.upper()}"
        mapping = self.literal(utils_file(category), name)
        if not isinstance(mapping, dict):
            raise AceBenchSourceError(f"{self.path}: {utils_file(category)}: the class mapping is not a dict")
        named_by = f"{self.where(utils_file(category))}: {name}"
        return {str(cls): module_file(str(module), f"{named_by}[{str(cls)[:40]!r}]") for cls, module in mapping.items()}

    def saved_attributes(self) -> dict[str, list[str]]:
        saved = self.literal("model_inference/apimodel_inference.py", "SAVED_CLASS")
        if not isinstance(saved, dict) or not all(isinstance(a, list | tuple) for a in saved.values()):
            raise AceBenchSourceError(
                f"{self.path}: model_inference/apimodel_inference.py: SAVED_CLASS is not a dict of attribute lists"
            )
        return {str(name): [str(a) for a in attributes] for name, attributes in saved.items()}

    def domain_prompts(self, language: str) -> dict[str, str]:
        """The domain prompt upstream's multi_turn agent gets per class (``BASE_PROMPT``/``TRAVEL_PROMPT``)."""
        relative = f"model_inference/prompt_{language}.py"
        suffix = language.upper()
        return {
            "BaseApi": str(self.literal(relative, f"BASE_PROMPT_{suffix}")),
            "Travel": str(self.literal(relative, f"TRAVEL_PROMPT_{suffix}")),
        }

    def text_prompts(self, category: str, language: str) -> dict[str, str]:
        """The instructions (``system``) and the request template (``user``, with ``{functions}`` and ``{history}``)
        upstream's agent of ``category`` gets when it writes its calls as text."""
        relative = f"model_inference/{category}/APIModel_agent.py"
        suffix = language.upper()
        return {
            "system": str(self.literal(relative, f"MULTI_TURN_AGENT_PROMPT_SYSTEM_{suffix}")),
            "user": str(self.literal(relative, f"MULTI_TURN_AGENT_PROMPT_USER_{suffix}")),
        }
