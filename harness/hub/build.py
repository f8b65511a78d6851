"""Records → a Hub-format folder: ``data/<config>/train-*.parquet`` per config and a ``README.md`` card.

Building is deterministic: identical records give byte-identical files, so re-publishing them is a no-op.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from harness.hub.card import CardConfig, CardInfo, SourceLink, render_card
from harness.hub.projection import LAYOUT_VERSION, METADATA_KEY, PROJECTIONS
from harness.hub.rows import RowSchemaError, records_to_table
from harness.hub.sources import SourceError, read_leaderboard, read_library, read_run, read_sft
from harness.records.fingerprint import fingerprint
from harness.results.sft import SHAREGPT_FORMAT
from harness.schema import SCHEMA_VERSION, DatasetRef, Environment, Record, RunManifest, Scenario, Trajectory

logger = logging.getLogger(__name__)

KINDS = ("environments", "scenarios", "trajectories", "sft", "leaderboard")
DEFAULT_LICENSE = "apache-2.0"
LLAMAFACTORY_FILE = "dataset_info.json"
HUB_REPO = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
SHARD_BYTES = 256 * 1024 * 1024
ROW_GROUP_ROWS = 1000


@dataclass
class ConfigData:
    name: str
    record_type: str
    table: pa.Table
    columns: list[tuple[str, str, str]]
    features: Any


@dataclass
class BuiltDataset:
    folder: Path
    kind: str
    repo_id: str
    configs: list[CardConfig]
    card: CardInfo
    extra_files: list[str] = field(default_factory=list)

    @property
    def files(self) -> list[str]:
        return ["README.md", *self.extra_files, *(f for c in self.configs for f in c.files)]


# ------------------------------------------------------------------------------------------------ configs


def record_config(name: str, records: Sequence[Record] | Sequence[dict[str, Any]], record_type: str) -> ConfigData:
    """One config: the records (or rows) in the record type's fixed schema."""
    projection = PROJECTIONS[record_type]
    try:
        table = records_to_table(records, record_type)
    except RowSchemaError as error:
        raise SourceError(f"config {name!r}: {error}") from error
    return ConfigData(name, record_type, table, projection.describe(), projection.features)


SFT_ROW_TYPES = {"messages": "sft_chat", "conversations": "sft_sharegpt"}


def sft_row_type(rows: Sequence[dict[str, Any]]) -> str:
    kinds = {"sft_chat" if "messages" in row else "sft_sharegpt" for row in rows}
    if len(kinds) != 1:
        raise SourceError("a file mixes chat rows (`messages`) and ShareGPT rows (`conversations`)")
    return kinds.pop()


# -------------------------------------------------------------------------------------------- provenance


def _counts(values: Sequence[str | None]) -> str:
    counted = Counter(v for v in values if v)
    return ", ".join(f"{name} ({count})" for name, count in sorted(counted.items())) or "none recorded"


def library_provenance(environments: Sequence[Environment], scenarios: Sequence[Scenario]) -> list[str]:
    provenances = [e.provenance for e in environments] + [s.provenance for s in scenarios]
    lines = [
        f"{len(environments)} environments in domains: {_counts([e.domain for e in environments])}.",
        f"{len(scenarios)} scenarios.",
        f"Record sources: {_counts([p.source for p in provenances])}.",
        f"Synthesis models: {_counts([p.model for p in provenances])}.",
        f"Prompt versions: {_counts([p.prompt_version for p in provenances])}.",
        f"Records with an upstream id (imported from a published release): "
        f"{sum(1 for p in provenances if p.upstream_id)}.",
        f"Content fingerprint: `{fingerprint({e.id: e for e in environments}, list(scenarios))}`.",
    ]
    return lines


def run_provenance(trajectories: Sequence[Trajectory], manifest: RunManifest | None) -> list[str]:
    lines = [f"{len(trajectories)} trajectories."]
    if manifest is not None:
        dataset = manifest.dataset
        revision = f"@{dataset.revision}" if dataset.revision else ""
        lines += [
            f"Run `{manifest.run_id}` started {manifest.created_at.isoformat()} with harness "
            f"{manifest.package_version}" + (f" (git {manifest.git_revision})." if manifest.git_revision else "."),
            f"Environments and scenarios: `{dataset.source}{revision}`"
            + (f", fingerprint `{dataset.fingerprint}`." if dataset.fingerprint else "."),
        ]
    lines.append(f"Agent models: {_counts([t.agent.model.model for t in trajectories])}.")
    scored = [t.reward for t in trajectories if t.reward is not None]
    if scored:
        successes = sum(1 for r in scored if r.success)
        lines.append(f"Success: {successes}/{len(scored)} scored episodes.")
    lines.append(f"Terminations: {_counts([t.termination.value for t in trajectories])}.")
    return lines


# ------------------------------------------------------------------------------------------------ writing


def _write_config(folder: Path, config: ConfigData) -> list[str]:
    table = config.table
    metadata = {
        "record_type": config.record_type,
        "config": config.name,
        "schema_version": SCHEMA_VERSION,
        "layout_version": LAYOUT_VERSION,
    }
    # Keep the `huggingface` key (the features) so pyarrow readers and `datasets` see the declared types.
    schema_metadata = dict(table.schema.metadata or {})
    schema_metadata[METADATA_KEY] = json.dumps(metadata, sort_keys=True).encode()
    table = table.replace_schema_metadata(schema_metadata)
    shards = max(1, -(-table.nbytes // SHARD_BYTES))
    rows_per_shard = max(1, -(-table.num_rows // shards)) if table.num_rows else 0
    target = folder / "data" / config.name
    target.mkdir(parents=True, exist_ok=True)
    files = []
    for index in range(shards):
        name = f"train-{index:05d}-of-{shards:05d}.parquet"
        part = table.slice(index * rows_per_shard, rows_per_shard) if rows_per_shard else table
        pq.write_table(part, target / name, compression="zstd", row_group_size=ROW_GROUP_ROWS)
        files.append(f"data/{config.name}/{name}")
    return files


def _card_config(folder: Path, config: ConfigData, files: list[str], default: bool) -> CardConfig:
    example = config.table.slice(0, 1).to_pylist()[0] if config.table.num_rows else None
    return CardConfig(
        name=config.name,
        record_type=config.record_type,
        files=files,
        num_rows=config.table.num_rows,
        columns=config.columns,
        default=default,
        features=config.features._to_yaml_list(),
        num_bytes=config.table.nbytes,
        download_size=sum((folder / f).stat().st_size for f in files),
        example=example,
    )


def write_dataset(
    folder: Path,
    kind: str,
    repo_id: str,
    configs: Sequence[ConfigData],
    *,
    license: str = "apache-2.0",
    provenance: Sequence[str] = (),
    extra_sections: Sequence[tuple[str, str]] = (),
    sources: Sequence[SourceLink] = (),
    extra_files: dict[str, bytes] | None = None,
) -> BuiltDataset:
    """Write the Parquet files, EXTRA_FILES and the card. ``folder``'s previous ``data/`` and card are replaced."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}")
    if not configs:
        raise SourceError(f"nothing to publish for {kind}")
    folder.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(folder / "data", ignore_errors=True)
    card_configs = []
    for index, config in enumerate(configs):
        files = _write_config(folder, config)
        card_configs.append(_card_config(folder, config, files, index == 0))
    for name, content in (extra_files or {}).items():
        (folder / name).write_bytes(content)
    info = CardInfo(
        repo_id=repo_id,
        kind=kind,
        configs=card_configs,
        license=license,
        provenance=list(provenance),
        extra_sections=list(extra_sections),
        sources=list(sources),
    )
    (folder / "README.md").write_text(render_card(info), encoding="utf-8")
    logger.info(
        "built %s dataset for %s in %s: %s",
        kind,
        repo_id,
        folder,
        ", ".join(f"{c.name}={c.num_rows}" for c in card_configs),
    )
    return BuiltDataset(folder, kind, repo_id, card_configs, info, sorted(extra_files or {}))


# ---------------------------------------------------------------------------------------------- per kind


def build_library(
    environments: Sequence[Environment],
    scenarios: Sequence[Scenario],
    folder: Path,
    repo_id: str,
    *,
    kind: str = "environments",
    license: str = "apache-2.0",
    sources: Sequence[SourceLink] = (),
) -> BuiltDataset:
    """``environments`` publishes both configs (environments, scenarios); ``scenarios`` only the scenarios."""
    configs = []
    if kind == "environments":
        if not environments:
            raise SourceError("no environments to publish")
        configs.append(record_config("environments", environments, "environment"))
        if scenarios:
            configs.append(record_config("scenarios", scenarios, "scenario"))
    elif kind == "scenarios":
        if not scenarios:
            raise SourceError("no scenarios to publish")
        configs.append(record_config("scenarios", scenarios, "scenario"))
    else:
        raise ValueError(f"build_library builds environments or scenarios, not {kind}")
    return write_dataset(
        folder,
        kind,
        repo_id,
        configs,
        license=license,
        provenance=library_provenance(environments, scenarios),
        sources=sources,
    )


def hub_source(ref: DatasetRef | None) -> list[SourceLink]:
    """The Hub dataset a run or export read its environments from, when it was one."""
    if ref is None or not is_hub_repo_id(ref.source):
        return []
    return [SourceLink(ref.source, ref.revision)]


def is_hub_repo_id(text: str) -> bool:
    return bool(HUB_REPO.match(text)) and not Path(text).exists()


def build_trajectories(
    trajectories: Sequence[Trajectory],
    manifest: RunManifest | None,
    folder: Path,
    repo_id: str,
    *,
    license: str = "apache-2.0",
) -> BuiltDataset:
    if not trajectories:
        raise SourceError("no trajectories to publish")
    configs = [record_config("trajectories", trajectories, "trajectory")]
    if manifest is not None:
        configs.append(record_config("manifest", [manifest], "run_manifest"))
    return write_dataset(
        folder,
        "trajectories",
        repo_id,
        configs,
        license=license,
        provenance=run_provenance(trajectories, manifest),
        sources=hub_source(manifest.dataset if manifest else None),
    )


def llamafactory_dataset_info(repo_id: str, sharegpt_configs: Sequence[str]) -> dict[str, Any]:
    """LlamaFactory ``dataset_info.json`` entries, one per ShareGPT config, reading the Hub dataset."""
    name = repo_id.split("/")[-1]
    return {
        f"{name}_{config}": {"hf_hub_url": repo_id, "subset": config, "split": "train", **SHAREGPT_FORMAT}
        for config in sharegpt_configs
    }


def build_sft(
    files: dict[str, list[dict[str, Any]]],
    folder: Path,
    repo_id: str,
    *,
    license: str = "apache-2.0",
    source: DatasetRef | None = None,
) -> BuiltDataset:
    """One config per file. ``messages`` (chat rows) comes first so it is the default config."""
    ordered = sorted(files.items(), key=lambda item: (item[0] != "messages", item[0]))
    configs = []
    for name, rows in ordered:
        if not rows:
            raise SourceError(f"{name}.jsonl has no rows")
        try:
            row_type = sft_row_type(rows)
        except SourceError as error:
            raise SourceError(f"{name}.jsonl: {error}") from error
        configs.append(record_config(name, rows, row_type))
    provenance = [f"`{name}`: {len(rows)} conversations." for name, rows in ordered]
    sharegpt = [c.name for c in configs if c.record_type == "sft_sharegpt"]
    extra_files = {}
    if sharegpt:
        info = llamafactory_dataset_info(repo_id, sharegpt)
        extra_files[LLAMAFACTORY_FILE] = json.dumps(info, indent=2, ensure_ascii=False).encode() + b"\n"
    return write_dataset(
        folder,
        "sft",
        repo_id,
        configs,
        license=license,
        provenance=provenance,
        sources=hub_source(source),
        extra_files=extra_files,
    )


def build_leaderboard(
    rows: list[dict[str, Any]],
    report: str | None,
    folder: Path,
    repo_id: str,
    *,
    license: str = "apache-2.0",
) -> BuiltDataset:
    if not rows:
        raise SourceError("no leaderboard rows to publish")
    sections = [("Report", report)] if report else []
    refs = {(str(row.get("dataset_source")), row.get("dataset_revision")) for row in rows if row.get("dataset_source")}
    sources = [
        link
        for source, revision in sorted(refs, key=str)
        for link in hub_source(DatasetRef(source=source, revision=revision))
    ]
    return write_dataset(
        folder,
        "leaderboard",
        repo_id,
        [record_config("leaderboard", rows, "leaderboard")],
        license=license,
        provenance=[f"{len(rows)} leaderboard rows aggregated from stored runs."],
        extra_sections=sections,
        sources=sources,
    )


def build_from_source(
    kind: str, source: str | Path, folder: Path, repo_id: str, *, license: str | None = None
) -> BuiltDataset:
    """Read SOURCE as the KIND says and build the Hub-format folder. Without LICENSE, a library read from a
    Hub dataset or a Hub-format folder keeps its card's license; anything else is apache-2.0."""
    if kind in ("environments", "scenarios"):
        library = read_library(source)
        return build_library(
            library.environments,
            library.scenarios,
            folder,
            repo_id,
            kind=kind,
            license=license or library.license or DEFAULT_LICENSE,
            sources=hub_source(library.ref),
        )
    path = Path(source)
    license = license or DEFAULT_LICENSE
    if kind == "trajectories":
        run = read_run(path)
        return build_trajectories(run.trajectories, run.manifest, folder, repo_id, license=license)
    if kind == "sft":
        sft = read_sft(path)
        return build_sft(sft.files, folder, repo_id, license=license, source=sft.source)
    if kind == "leaderboard":
        board = read_leaderboard(path)
        return build_leaderboard(board.rows, board.report, folder, repo_id, license=license)
    raise ValueError(f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}")
