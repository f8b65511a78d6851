"""Versioned prompt templates (``synth/prompts/*.txt``) and the seed-library worked examples they quote.

A template file starts with ``version: N``, then ``=== system ===`` and ``=== user ===`` sections. Fields are
``$name`` fields (``string.Template``), so the JSON braces in the text need no escaping. A template's
version as recorded in provenance is ``N+<first 8 hex of the file's sha256>``: editing a file without
bumping N still changes the recorded version and the stage cache keys.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import re
import string
from collections import Counter
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from harness.library import SEED_LIBRARY
from harness.sandbox.policy import ALLOWED_MODULES
from harness.toolspec import derive_tools, find_class

PROMPTS_DIR = Path(__file__).resolve().parent / "prompts"
EXAMPLE_ENVIRONMENT = "retail_orders"
EXAMPLE_METHODS = ("get_order_details", "update_default_address")
EXAMPLE_TOOLS = 5

_HEADER = re.compile(r"^version:\s*(\S+)\s*\n")
_SECTIONS = re.compile(r"^=== (system|user) ===\s*$", re.MULTILINE)


class TemplateError(ValueError):
    pass


@dataclass(frozen=True)
class PromptTemplate:
    name: str
    version: str
    system: string.Template
    user: string.Template

    def render(self, **fields: Any) -> list[dict[str, str]]:
        values = {key: value if isinstance(value, str) else json.dumps(value) for key, value in fields.items()}
        try:
            return [
                {"role": "system", "content": self.system.substitute(values).strip()},
                {"role": "user", "content": self.user.substitute(values).strip()},
            ]
        except KeyError as exc:
            raise TemplateError(f"template {self.name!r} needs the field {exc.args[0]!r}") from None


@cache
def load_template(name: str) -> PromptTemplate:
    path = PROMPTS_DIR / f"{name}.txt"
    text = path.read_text()
    header = _HEADER.match(text)
    if header is None:
        raise TemplateError(f"{path} does not start with 'version: N'")
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    parts = _SECTIONS.split(text[header.end() :])
    sections = dict(zip(parts[1::2], parts[2::2], strict=True))
    if set(sections) != {"system", "user"}:
        raise TemplateError(f"{path} needs a '=== system ===' and a '=== user ===' section")
    return PromptTemplate(
        name=name,
        version=f"{header.group(1)}+{digest}",
        system=string.Template(sections["system"]),
        user=string.Template(sections["user"]),
    )


ENVIRONMENT_TEMPLATES = (
    "filter_task",
    "infer_environment",
    "plan_environment",
    "write_method",
    "initial_state",
    "test_call",
    "check_call",
)


def prompt_versions(names: tuple[str, ...] = ENVIRONMENT_TEMPLATES) -> dict[str, str]:
    """The templates' versions, as recorded in provenance."""
    return {name: load_template(name).version for name in names}


def allowed_modules_text() -> str:
    return ", ".join(sorted(ALLOWED_MODULES))


# ------------------------------------------------------------------------------------- worked examples


@dataclass(frozen=True)
class WorkedExample:
    name: str
    summary: str
    metadata: str
    tools: str
    methods: str


QUERY_PREFIXES = ("get_", "list_", "find_", "search_", "check_", "count_", "quote_")
EXAMPLES_SHOWN = 2
_WORD = re.compile(r"[a-z]{3,}")


def _example_methods(class_node: ast.ClassDef, environment_id: str) -> tuple[str, ...]:
    """A lookup and a state change of the environment (the retail example keeps its two chosen methods)."""
    if environment_id == EXAMPLE_ENVIRONMENT:
        return EXAMPLE_METHODS
    names = [n.name for n in class_node.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")]
    lookup = next((n for n in names if n.startswith(QUERY_PREFIXES)), None)
    change = next((n for n in names if not n.startswith(QUERY_PREFIXES)), None)
    return tuple(n for n in (lookup, change) if n)


def _words(text: str) -> Counter[str]:
    """Word counts, plural s dropped ("cars" and "car" count as one word)."""
    return Counter(w[:-1] if w.endswith("s") and len(w) > 4 else w for w in _WORD.findall(text.lower()))


@cache
def _seed_profiles() -> dict[str, Counter[str]]:
    """Word counts of each seed environment's name, domain and summary."""
    profiles = {}
    for path in sorted((SEED_LIBRARY / "environments").glob("*.json")):
        meta = json.loads(path.read_text())
        text = " ".join(str(meta.get(key, "")) for key in ("name", "domain", "summary", "introduction"))
        profiles[path.stem] = _words(text)
    return profiles


def similar_environments(text: str, count: int = EXAMPLES_SHOWN) -> list[str]:
    """The seed environments whose descriptions share the most words with ``text`` (cosine of word counts);
    ties, and a text sharing nothing, fall back to the retail example first."""
    words = _words(text)
    norm = math.sqrt(sum(v * v for v in words.values())) or 1.0

    def score(environment_id: str) -> float:
        profile = _seed_profiles()[environment_id]
        dot = sum(words[w] * profile[w] for w in words)
        return dot / (norm * (math.sqrt(sum(v * v for v in profile.values())) or 1.0))

    ranked = sorted(_seed_profiles(), key=lambda e: (-score(e), e != EXAMPLE_ENVIRONMENT, e))
    return ranked[:count]


def similar_examples(text: str, count: int = EXAMPLES_SHOWN) -> WorkedExample:
    """Worked examples from the ``count`` seed environments most like ``text``, joined into one."""
    examples = [worked_example(environment_id) for environment_id in similar_environments(text, count)]
    return WorkedExample(
        name=" and ".join(e.name for e in examples),
        summary="\n".join(f"- {e.name}: {e.summary}" for e in examples),
        metadata="\n".join(f"{e.name}:\n{e.metadata}" for e in examples),
        tools="\n".join(f"{e.name}:\n{e.tools}" for e in examples),
        methods="\n\n".join(f"# from {e.name}\n{e.methods}" for e in examples),
    )


@cache
def worked_example(environment_id: str = EXAMPLE_ENVIRONMENT) -> WorkedExample:
    """Excerpts of a seed-library environment (metadata, tool schemas, method sources) to show in prompts."""
    folder = SEED_LIBRARY / "environments"
    meta = json.loads((folder / f"{environment_id}.json").read_text())
    code = (folder / f"{environment_id}.py").read_text()
    class_node = find_class(ast.parse(code), meta["class_name"])
    chosen = _example_methods(class_node, environment_id)
    sources = []
    for node in class_node.body:
        if isinstance(node, ast.FunctionDef) and node.name in chosen:
            segment = ast.get_source_segment(code, node) or ""
            sources.append(_dedent_method(segment))
    metadata = {key: meta[key] for key in ("name", "domain", "summary", "rules", "state_entities") if key in meta}
    tools = [t.model_dump(mode="json") for t in derive_tools(code, meta["class_name"])[:EXAMPLE_TOOLS]]
    return WorkedExample(
        name=meta.get("name", environment_id),
        summary=meta.get("summary", ""),
        metadata=json.dumps(metadata, indent=1),
        tools=json.dumps(tools, indent=1),
        methods="\n\n".join(sources),
    )


def _dedent_method(segment: str) -> str:
    # get_source_segment drops the first line's indentation only.
    lines = segment.splitlines()
    rest = [line[4:] if line.startswith("    ") else line for line in lines[1:]]
    return "\n".join([lines[0], *rest])
