"""The dataset card (``README.md``): YAML metadata the Hub and ``datasets`` read, and a body people read.

The card is a pure function of what was built, so rebuilding identical records gives an identical card and
re-publishing makes no commit. Publishing into a repository that already has a card merges into it
(``merge_card``): the other configs keep their ``configs`` and ``dataset_info`` entries, schema tables,
provenance and extra sections. It never contains credentials.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import yaml

from harness.hub.projection import LAYOUT_VERSION
from harness.hub.yaml_limits import load_yaml
from harness.registry import card_citations
from harness.schema import SCHEMA_VERSION

ENVFACTORY_CITATION = """\
@misc{envfactory,
  title        = {EnvFactory: Scaling Tool-Use Agents via Executable Environments Synthesis and Robust RL},
  howpublished = {\\url{https://github.com/LARK-AI-Lab/EnvFactory2026}}
}"""


def citations() -> tuple[str, str]:
    """The works the card cites (the record format's, as the installed benchmarks declare it, then EnvFactory's,
    whose methods the harness implements): their names, and their BibTeX."""
    works = [*card_citations(), ("EnvFactory", ENVFACTORY_CITATION)]
    names = [title for title, _ in works]
    named = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return named, "```bibtex\n" + "\n\n".join(entry for _, entry in works) + "\n```"


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
    "prompts": "Prompts for reinforcement learning on tool environments",
}
KIND_TASK_CATEGORIES = {
    "environments": ["reinforcement-learning", "text-generation"],
    "scenarios": ["reinforcement-learning", "text-generation"],
    "trajectories": ["text-generation", "reinforcement-learning"],
    "sft": ["text-generation"],
    "leaderboard": ["text-generation"],
    "prompts": ["reinforcement-learning", "text-generation"],
}
BASE_TAGS = ["agents", "tool-use", "function-calling", "envharness"]
KIND_TAGS = {
    "environments": ["environments", "synthetic"],
    "scenarios": ["environments", "synthetic"],
    "trajectories": ["trajectories"],
    "sft": ["sft", "synthetic"],
    "leaderboard": ["leaderboard", "evaluation"],
    "prompts": ["rl", "trl"],
}
LANGUAGE = ["en"]
EXAMPLE_TEXT_LIMIT = 160
GENERATED_SECTIONS = ("How to load it", "Schema", "Provenance", "Citation")


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
    features: list[Any] = field(default_factory=list)
    """The config's ``datasets.Features`` in the card's YAML form."""
    num_bytes: int = 0
    download_size: int = 0
    example: dict[str, Any] | None = None


@dataclass(frozen=True)
class SourceLink:
    """A Hub dataset the published records came from."""

    repo_id: str
    revision: str | None = None

    def __str__(self) -> str:
        return f"{self.repo_id}@{self.revision}" if self.revision else self.repo_id


@dataclass
class CardInfo:
    repo_id: str
    kind: str
    configs: list[CardConfig]
    license: str = "apache-2.0"
    provenance: list[str] = field(default_factory=list)
    extra_sections: list[tuple[str, str]] = field(default_factory=list)
    sources: list[SourceLink] = field(default_factory=list)


# ------------------------------------------------------------------------------------------------ metadata


def config_entry(config: CardConfig) -> dict[str, Any]:
    entry: dict[str, Any] = {"config_name": config.name, "data_files": [{"split": "train", "path": list(config.files)}]}
    if config.default:
        entry["default"] = True
    return entry


def dataset_info_entry(config: CardConfig) -> dict[str, Any]:
    return {
        "config_name": config.name,
        "features": config.features,
        "splits": [{"name": "train", "num_bytes": config.num_bytes, "num_examples": config.num_rows}],
        "download_size": config.download_size,
        "dataset_size": config.num_bytes,
    }


def card_metadata(info: CardInfo) -> dict[str, Any]:
    largest = max((c.num_rows for c in info.configs), default=0)
    metadata: dict[str, Any] = {
        "license": info.license,
        "language": list(LANGUAGE),
        "pretty_name": f"{KIND_TITLES[info.kind]}: {info.repo_id}",
        "tags": BASE_TAGS + KIND_TAGS[info.kind],
        "task_categories": KIND_TASK_CATEGORIES[info.kind],
        "size_categories": [size_category(largest)],
    }
    if info.sources:
        metadata["source_datasets"] = sorted({s.repo_id for s in info.sources})
    metadata["configs"] = [config_entry(c) for c in info.configs]
    metadata["dataset_info"] = [dataset_info_entry(c) for c in info.configs]
    return metadata


# ---------------------------------------------------------------------------------------------------- body


def _escape_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _column_table(columns: Sequence[tuple[str, str, str]]) -> str:
    lines = ["| column | type | meaning |", "|---|---|---|"]
    lines += [f"| `{name}` | `{kind}` | {_escape_cell(meaning)} |" for name, kind, meaning in columns]
    return "\n".join(lines)


def _shorten(value: Any) -> Any:
    if isinstance(value, str):
        return value if len(value) <= EXAMPLE_TEXT_LIMIT else value[:EXAMPLE_TEXT_LIMIT] + "…"
    if isinstance(value, list):
        shown = [_shorten(v) for v in value[:3]]
        return shown + ([f"… {len(value) - 3} more"] if len(value) > 3 else [])
    if isinstance(value, dict):
        return {k: _shorten(v) for k, v in value.items()}
    return value


def _example_block(example: dict[str, Any]) -> str:
    text = orjson.dumps(_shorten(example), option=orjson.OPT_INDENT_2, default=str).decode()
    return f"<details><summary>Example row</summary>\n\n```json\n{text}\n```\n\n</details>"


def schema_subsection(config: CardConfig) -> str:
    parts = [f"### `{config.name}` ({config.record_type}, {rows(config.num_rows)})", _column_table(config.columns)]
    if config.example is not None:
        parts.append(_example_block(config.example))
    return "\n\n".join(parts)


def _usage(info: CardInfo, default: str) -> str:
    lines = [
        "```python",
        "from datasets import load_dataset",
        "",
        f'rows = load_dataset("{info.repo_id}", "{default}", split="train")',
        "```",
    ]
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
            "Environment classes run only inside the harness sandbox (confined worker processes with no network "
            "or file access); do not `exec` the `code` column in your own process."
        )
    elif info.kind == "sft":
        chat = [c.name for c in info.configs if c.record_type == "sft_chat"]
        sharegpt = [c.name for c in info.configs if c.record_type == "sft_sharegpt"]
        if chat:
            text += (
                f"\n\n`{chat[0]}` is a conversational dataset for TRL: a `messages` list column plus `tools`.\n\n"
                "```python\n"
                "from trl import SFTConfig, SFTTrainer\n\n"
                f'dataset = load_dataset("{info.repo_id}", "{chat[0]}", split="train")\n'
                'trainer = SFTTrainer(model="Qwen/Qwen3-0.6B", train_dataset=dataset,\n'
                '                     args=SFTConfig(output_dir="out"))\n'
                "```"
            )
        if sharegpt:
            text += (
                f"\n\n`{sharegpt[0]}` is LlamaFactory's ShareGPT format; `dataset_info.json` in this repository "
                "holds the entry to copy into LlamaFactory's `data/dataset_info.json`."
            )
    elif info.kind == "trajectories":
        text += (
            "\n\nThe `manifest` config holds the run manifest (models, dataset revision, configuration). "
            "`harness.hub.load_records_folder` / `harness.hub.load_hub_records` give `Trajectory` objects back."
        )
    return text


SCHEMA_INTRO = (
    "Every config has one fixed schema, declared as `datasets` features in this card's `dataset_info`. "
    "Nested records are structs and lists of structs (messages, tool calls, steps, checks, check results); "
    "only free-form values whose keys differ from row to row (states, JSON-schema `parameters`, tool "
    "arguments and results, open settings) are stored as JSON text (`json.loads` gives the value back); the "
    "tables mark them `string (JSON)`. Columns marked *Derived* are computed from the record for filtering."
)


def _provenance(info: CardInfo) -> str:
    lines = info.provenance or ["No provenance recorded."]
    if info.sources:
        lines = [*lines, "Source datasets: " + ", ".join(f"`{s}`" for s in info.sources) + "."]
    return f"### {info.kind}\n\n" + "\n".join(f"- {line}" for line in lines)


@dataclass
class CardBody:
    """The parts of a card body that merging keeps: schema subsections by config, provenance by kind, and
    sections the harness does not generate."""

    schema: dict[str, str] = field(default_factory=dict)
    provenance: dict[str, str] = field(default_factory=dict)
    extra: list[tuple[str, str]] = field(default_factory=list)


def render_card(info: CardInfo, *, metadata: dict[str, Any] | None = None, kept: CardBody | None = None) -> str:
    metadata = metadata or card_metadata(info)
    kept = kept or CardBody()
    names = [str(c["config_name"]) for c in metadata["configs"]]
    default = next((str(c["config_name"]) for c in metadata["configs"] if c.get("default")), names[0])
    counts = {str(d["config_name"]): d["splits"][0]["num_examples"] for d in metadata.get("dataset_info", [])}
    text = yaml.safe_dump(metadata, sort_keys=False, allow_unicode=True, width=1000)
    parts = [f"---\n{text}---", f"# {metadata['pretty_name']}"]
    summary = ", ".join(f"`{name}` ({rows(counts[name])})" if name in counts else f"`{name}`" for name in names)
    parts.append(
        "Published with `harness publish` (envharness). Records follow the harness schema of record "
        f"(schema version {SCHEMA_VERSION}) in Hub layout {LAYOUT_VERSION} (typed nested columns); each config "
        "is the Parquet projection of one record type, with "
        f"one `train` split. Configs: {summary}."
    )
    parts.append("## How to load it\n\n" + _usage(info, default))
    built = {c.name: schema_subsection(c) for c in info.configs}
    subsections = [built.get(name) or kept.schema.get(name) or f"### `{name}`" for name in names]
    parts.append("\n\n".join(["## Schema", SCHEMA_INTRO, *subsections]))
    for heading, body in info.extra_sections:
        parts.append(f"## {heading}\n\n{body.strip()}")
    new_headings = {heading for heading, _ in info.extra_sections}
    parts += [f"## {heading}\n\n{body}" for heading, body in kept.extra if heading not in new_headings]
    provenance = {**kept.provenance, info.kind: _provenance(info)}
    parts.append("## Provenance\n\n" + "\n\n".join(provenance[kind] for kind in sorted(provenance)))
    named, bibtex = citations()
    parts.append(
        "## Citation\n\nThe environment and scenario formats and the synthesis methods implemented by the "
        f"harness come from {named}:\n\n" + bibtex
    )
    return "\n\n".join(parts) + "\n"


# ------------------------------------------------------------------------------------------------- merging

FRONT_MATTER = re.compile(r"^---\s*\n(.*?)\n---\s*(\n|$)", re.DOTALL)


def split_card(text: str) -> tuple[dict[str, Any], str]:
    """(YAML metadata, body) of a card; a card without front matter has empty metadata."""
    match = FRONT_MATTER.match(text)
    if match is None:
        return {}, text
    metadata = load_yaml(match.group(1), "the dataset card") or {}
    return (metadata if isinstance(metadata, dict) else {}), text[match.end() :]


def _sections(body: str, level: int) -> list[tuple[str, str]]:
    marker = "#" * level + " "
    sections: list[tuple[str, str]] = []
    for chunk in re.split(rf"(?m)^(?={re.escape(marker)})", body):
        if chunk.startswith(marker):
            heading, _, rest = chunk.partition("\n")
            sections.append((heading[len(marker) :].strip(), rest.strip()))
    return sections


def parse_body(body: str) -> CardBody:
    parsed = CardBody()
    for heading, text in _sections(body, 2):
        if heading == "Schema":
            for sub, sub_text in _sections(text, 3):
                match = re.match(r"`([^`]+)`", sub)
                if match:
                    parsed.schema[match.group(1)] = f"### {sub}\n\n{sub_text}"
        elif heading == "Provenance":
            for sub, sub_text in _sections(text, 3):
                parsed.provenance[sub] = f"### {sub}\n\n{sub_text}"
        elif heading not in GENERATED_SECTIONS:
            parsed.extra.append((heading, text))
    return parsed


def _by_name(entries: Any) -> dict[str, dict[str, Any]]:
    if not isinstance(entries, list):
        return {}
    return {str(e.get("config_name", "default")): e for e in entries if isinstance(e, dict)}


def _union(first: Any, second: Sequence[str]) -> list[str]:
    items = [str(x) for x in first] if isinstance(first, list) else []
    return items + [x for x in second if x not in items]


def merge_card(existing: str | None, info: CardInfo) -> str:
    """The card after publishing INFO's configs into a repository whose card is EXISTING (None: no card).

    Configs and ``dataset_info`` entries of other configs are kept in their place, new ones are appended; the
    existing default config stays the default. Tags, task categories, languages and source datasets are
    united; the license is INFO's. Schema subsections, provenance and extra sections of the others are kept.
    """
    new = card_metadata(info)
    if not existing:
        return render_card(info, metadata=new)
    old, body = split_card(existing)
    old_configs = _by_name(old.get("configs"))
    if not old_configs:
        return render_card(info, metadata=new)
    new_configs = _by_name(new["configs"])
    kept_default = any(e.get("default") for name, e in old_configs.items() if name not in new_configs)
    configs = []
    for name, entry in old_configs.items():
        configs.append(new_configs.get(name, entry))
    configs += [entry for name, entry in new_configs.items() if name not in old_configs]
    if kept_default:
        configs = [
            {k: v for k, v in e.items() if k != "default"} if e["config_name"] in new_configs else e for e in configs
        ]
    old_info = _by_name(old.get("dataset_info"))
    new_info = _by_name(new["dataset_info"])
    infos = [new_info.get(name, old_info.get(name)) for name in (str(c["config_name"]) for c in configs)]
    largest = max((i["splits"][0]["num_examples"] for i in infos if i and i.get("splits")), default=0)
    metadata: dict[str, Any] = {
        "license": new["license"],
        "language": _union(old.get("language"), new["language"]),
        "pretty_name": old.get("pretty_name") or new["pretty_name"],
        "tags": _union(old.get("tags"), new["tags"]),
        "task_categories": _union(old.get("task_categories"), new["task_categories"]),
        "size_categories": [size_category(largest)],
    }
    sources = _union(old.get("source_datasets"), new.get("source_datasets", []))
    if sources:
        metadata["source_datasets"] = sources
    known = {"license", "language", "pretty_name", "tags", "task_categories", "size_categories", "source_datasets"}
    known |= {"configs", "dataset_info"}
    metadata.update({k: v for k, v in old.items() if k not in known})
    metadata["configs"] = configs
    metadata["dataset_info"] = [i for i in infos if i]
    return render_card(info, metadata=metadata, kept=parse_body(body))
