"""Reading a checkout of ACEBench (github.com/chenchen0103/ACEBench) as text, never importing it.

What the agent category uses of it: the task records and their possible answers (JSON lines under
``data_all/data_{en,zh}/``), the mapping from class names to scenario modules (``CLASS_FILE_PATH_MAPPING_{EN,ZH}``
in ``model_inference/{multi_turn,multi_step}/{category}_utils.py``), the attributes inference saves of each class
(``SAVED_CLASS`` in ``model_inference/apimodel_inference.py``), the domain prompts
(``model_inference/prompt_{en,zh}.py``), the agent prompts of the text setting
(``MULTI_TURN_AGENT_PROMPT_{SYSTEM,USER}_{EN,ZH}`` in ``model_inference/{category}/APIModel_agent.py``) and the
scenario modules themselves. Python files are read with :mod:`ast`
(literals only).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import orjson

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
        found = sorted(p.name for p in path.iterdir() if not p.name.startswith("."))
        missing = [name for name in EXPECTED_ENTRIES if not (path / name).exists()]
        if missing:
            shown = ", ".join(found[:12]) + (", …" if len(found) > 12 else "") if found else "nothing"
            raise AceBenchSourceError(
                f"{path} is not an ACEBench checkout: expected {', '.join(EXPECTED_ENTRIES)}; "
                f"missing {', '.join(missing)}; found {shown}"
            )
        self.license = SOURCE_LICENSE
        self.license_text = self.read_text("LICENSE.md") if self.exists("LICENSE.md") else ""

    def exists(self, relative: str) -> bool:
        return (self.path / relative).is_file()

    def read_text(self, relative: str) -> str:
        if not self.exists(relative):
            raise AceBenchSourceError(f"{self.path} has no {relative}")
        return (self.path / relative).read_text(encoding="utf-8")

    def read_lines(self, relative: str) -> list[tuple[int, Any]]:
        """The JSON lines of a file as (line number, value); a line that is not JSON is (line number, None)."""
        records: list[tuple[int, Any]] = []
        for number, line in enumerate(self.read_text(relative).splitlines(), 1):
            if not line.strip():
                continue
            try:
                records.append((number, orjson.loads(line)))
            except orjson.JSONDecodeError:
                records.append((number, None))
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
        try:
            tree = ast.parse(self.read_text(relative))
        except SyntaxError as exc:
            raise AceBenchSourceError(f"{self.path}: {relative} does not parse: {exc}") from exc
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                try:
                    return ast.literal_eval(node.value)
                except ValueError as exc:
                    raise AceBenchSourceError(f"{self.path}: {relative}: {name} is not a literal") from exc
        raise AceBenchSourceError(f"{self.path}: {relative} defines no {name}")

    def class_modules(self, category: str, language: str) -> dict[str, str]:
        """Class name → the file of its scenario module (``CLASS_FILE_PATH_MAPPING_<LANG>``)."""
        mapping = self.literal(utils_file(category), f"CLASS_FILE_PATH_MAPPING_{language.upper()}")
        if not isinstance(mapping, dict):
            raise AceBenchSourceError(f"{self.path}: {utils_file(category)}: the class mapping is not a dict")
        return {str(name): str(module).replace(".", "/") + ".py" for name, module in mapping.items()}

    def saved_attributes(self) -> dict[str, list[str]]:
        saved = self.literal("model_inference/apimodel_inference.py", "SAVED_CLASS")
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
