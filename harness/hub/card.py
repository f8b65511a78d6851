"""The dataset card (``README.md``): YAML metadata the Hub and ``datasets`` read, and a body people read.

The card is a pure function of what was built, so rebuilding identical records gives an identical card and
re-publishing makes no commit. It never contains credentials.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import yaml

from harness.schema import SCHEMA_VERSION

CITATIONS = """\
```bibtex
@misc{envscaler,
  title        = {EnvScaler: Scaling Tool-Interactive Environments for LLM Agent via Programmatic Synthesis},
  year         = {2026},
  howpublished = {\\url{https://github.com/RUC-NLPIR/EnvScaler}}
}

@misc{envfactory,
  title        = {EnvFactory: Scaling Tool-Use Agents via Executable Environments Synthesis and Robust RL},
  howpublished = {\\url{https://github.com/LARK-AI-Lab/EnvFactory2026}}
}
```"""

SIZE_CATEGORIES = (
    (1_000, "n<1K"),
    (10_000, "1K<n<10K"),
    (100_000, "10K<n<100K"),
    (1_000_000, "100K<n<1M"),
    (10_000_000, "1M<n<10M"),
    (100_000_000, "10M<n<100M"),
    (1_000_000_000, "100M<n<1B"),
)

KIND_TITLES = {
    "environments": "Tool environments and scenarios",
    "scenarios": "Scenarios for tool environments",
    "trajectories": "Agent trajectories",
    "sft": "Supervised fine-tuning data for tool-using agents",
    "leaderboard": "Leaderboard",
}
KIND_TASK_CATEGORIES = {
    "environments": ["reinforcement-learning", "text-generation"],
    "scenarios": ["reinforcement-learning", "text-generation"],
    "trajectories": ["text-generation", "reinforcement-learning"],
    "sft": ["text-generation"],
    "leaderboard": ["text-generation"],
}
BASE_TAGS = ["agents", "tool-use", "function-calling", "envharness"]
KIND_TAGS = {
    "environments": ["environments", "synthetic"],
    "scenarios": ["environments", "synthetic"],
    "trajectories": ["trajectories"],
    "sft": ["sft", "synthetic"],
    "leaderboard": ["leaderboard", "evaluation"],
}


def rows(count: int) -> str:
    return f"{count} row" if count == 1 else f"{count} rows"


def size_category(num_rows: int) -> str:
    for limit, label in SIZE_CATEGORIES:
        if num_rows < limit:
            return label
    return "n>1B"


@dataclass
class CardConfig:
    name: str
    record_type: str
    files: list[str]
    num_rows: int
    columns: list[tuple[str, str, str]]
    default: bool = False


@dataclass
class CardInfo:
    repo_id: str
    kind: str
    configs: list[CardConfig]
    license: str = "apache-2.0"
    provenance: list[str] = field(default_factory=list)
    extra_sections: list[tuple[str, str]] = field(default_factory=list)


def card_metadata(info: CardInfo) -> dict[str, object]:
    largest = max((c.num_rows for c in info.configs), default=0)
    configs = []
    for config in info.configs:
        entry: dict[str, object] = {
            "config_name": config.name,
            "data_files": [{"split": "train", "path": list(config.files)}],
        }
        if config.default:
            entry["default"] = True
        configs.append(entry)
    return {
        "license": info.license,
        "pretty_name": f"{KIND_TITLES[info.kind]}: {info.repo_id}",
        "tags": BASE_TAGS + KIND_TAGS[info.kind],
        "task_categories": KIND_TASK_CATEGORIES[info.kind],
        "size_categories": [size_category(largest)],
        "configs": configs,
    }


def _escape_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _column_table(columns: Sequence[tuple[str, str, str]]) -> str:
    lines = ["| column | type | meaning |", "|---|---|---|"]
    lines += [f"| `{name}` | `{kind}` | {_escape_cell(meaning)} |" for name, kind, meaning in columns]
    return "\n".join(lines)


def _usage(info: CardInfo) -> str:
    first = info.configs[0].name if info.configs else "default"
    lines = [
        "```python",
        "import json",
        "from datasets import load_dataset",
        "",
        f'rows = load_dataset("{info.repo_id}", "{first}", split="train")',
    ]
    json_columns = [name for name, kind, _ in (info.configs[0].columns if info.configs else []) if "JSON" in kind]
    preferred = [c for c in ("tools_json", "initial_state_json", "messages_json") if c in json_columns]
    if json_columns:
        example = (preferred or json_columns)[0]
        lines.append(f'value = json.loads(rows[0]["{example}"])  # `*_json` columns hold JSON text')
    lines.append("```")
    text = "\n".join(lines)
    if info.kind in ("environments", "scenarios"):
        text += (
            "\n\nWith the harness, the records load back as typed objects and can be run directly:\n\n"
            "```bash\n"
            f"harness run --envs {info.repo_id}\n"
            f"harness run --envs {info.repo_id}@<revision>   # a pinned revision\n"
            "```\n\n"
            "```python\n"
            "from harness.library import load_library\n\n"
            f'library = load_library("{info.repo_id}")   # or "{info.repo_id}@<revision>"\n'
            "environment = next(iter(library.environments.values()))\n"
            "```\n\n"
            "Environment classes run only inside the harness sandbox (separate worker processes with an import "
            "allow-list, resource limits and no network or file access); do not `exec` the `code` column in "
            "your own process."
        )
    elif info.kind == "sft":
        text += (
            "\n\nEach row is one training conversation; decode `messages_json` (and `tools_json` when present) "
            "to get OpenAI-format messages and tool schemas for a chat template."
        )
    elif info.kind == "trajectories":
        text += (
            "\n\nThe `manifest` config holds the run manifest (models, dataset revision, configuration). "
            "`harness.hub.load_records_folder` / `harness.hub.load_hub_records` give `Trajectory` objects back."
        )
    return text


def render_card(info: CardInfo) -> str:
    metadata = yaml.safe_dump(card_metadata(info), sort_keys=False, allow_unicode=True, width=1000)
    title = f"{KIND_TITLES[info.kind]}: {info.repo_id}"
    parts = [f"---\n{metadata}---", f"# {title}"]
    summary = ", ".join(f"`{c.name}` ({rows(c.num_rows)})" for c in info.configs)
    parts.append(
        "Published with `harness publish` (envharness). Records follow the harness schema of record "
        f"(schema version {SCHEMA_VERSION}); each config is the Parquet projection of one record type, with "
        f"one `train` split. Configs: {summary}."
    )
    parts.append("## How to load it\n\n" + _usage(info))
    schema_lines = [
        "## Schema",
        "Scalar fields are typed columns and lists of strings are `list<string>` columns. Nested values "
        "(states, tool schemas, checks, messages, ...) are stored as JSON text in columns whose names end in "
        "`_json`; `json.loads` gives the original value. Columns marked *Derived* are computed from the "
        "record for convenient filtering.",
    ]
    for config in info.configs:
        schema_lines.append(f"### `{config.name}` ({config.record_type}, {rows(config.num_rows)})")
        schema_lines.append(_column_table(config.columns))
    parts.append("\n\n".join(schema_lines))
    for heading, body in info.extra_sections:
        parts.append(f"## {heading}\n\n{body.strip()}")
    provenance = info.provenance or ["No provenance recorded."]
    parts.append("## Provenance\n\n" + "\n".join(f"- {line}" for line in provenance))
    parts.append(
        "## Citation\n\nThe environment and scenario formats and the synthesis methods implemented by the "
        "harness come from EnvScaler and EnvFactory:\n\n" + CITATIONS
    )
    return "\n\n".join(parts) + "\n"
