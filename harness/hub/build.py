"""Records → a Hub-format folder: ``data/<config>/train-*.parquet`` per config and a ``README.md`` card.

Building is deterministic: identical records give byte-identical files, so re-publishing them is a no-op.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from harness.hub.card import CardConfig, CardInfo, render_card
from harness.hub.projection import (
    GENERIC_ROW,
    PROJECTIONS,
    generic_rows_to_table,
    records_to_table,
)
from harness.hub.sources import SourceError, read_leaderboard, read_library, read_run, read_sft
from harness.schema import SCHEMA_VERSION, Environment, Record, RunManifest, Scenario, Trajectory

logger = logging.getLogger(__name__)

KINDS = ("environments", "scenarios", "trajectories", "sft", "leaderboard")
METADATA_KEY = b"envharness"
SHARD_BYTES = 256 * 1024 * 1024
ROW_GROUP_ROWS = 1000


@dataclass
class ConfigData:
    name: str
    record_type: str
    table: pa.Table
    columns: list[tuple[str, str, str]]


@dataclass
class BuiltDataset:
    folder: Path
    kind: str
    repo_id: str
    configs: list[CardConfig]

    @property
    def files(self) -> list[str]:
        return ["README.md", *(f for c in self.configs for f in c.files)]


# ------------------------------------------------------------------------------------------------ configs


def record_config(name: str, records: Sequence[Record], record_type: str) -> ConfigData:
    projection = PROJECTIONS[record_type]
    return ConfigData(name, record_type, records_to_table(records, record_type), projection.describe())


def generic_config(name: str, rows: Sequence[dict[str, Any]]) -> ConfigData:
    table, layout = generic_rows_to_table(rows)
    return ConfigData(name, GENERIC_ROW, table, layout.describe())


# -------------------------------------------------------------------------------------------- provenance


def _counts(values: Sequence[str | None]) -> str:
    counted = Counter(v for v in values if v)
    return ", ".join(f"{name} ({count})" for name, count in sorted(counted.items())) or "none recorded"


def library_provenance(environments: Sequence[Environment], scenarios: Sequence[Scenario]) -> list[str]:
    from harness.library import fingerprint

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
    metadata = {"record_type": config.record_type, "config": config.name, "schema_version": SCHEMA_VERSION}
    table = table.replace_schema_metadata({METADATA_KEY: json.dumps(metadata, sort_keys=True).encode()})
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


def write_dataset(
    folder: Path,
    kind: str,
    repo_id: str,
    configs: Sequence[ConfigData],
    *,
    license: str = "apache-2.0",
    provenance: Sequence[str] = (),
    extra_sections: Sequence[tuple[str, str]] = (),
) -> BuiltDataset:
    """Write the Parquet files and the card. ``folder``'s previous ``data/`` and card are replaced."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}")
    if not configs:
        raise SourceError(f"nothing to publish for {kind}")
    folder.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(folder / "data", ignore_errors=True)
    card_configs = []
    for index, config in enumerate(configs):
        files = _write_config(folder, config)
        card_configs.append(
            CardConfig(config.name, config.record_type, files, config.table.num_rows, config.columns, index == 0)
        )
    info = CardInfo(
        repo_id=repo_id,
        kind=kind,
        configs=card_configs,
        license=license,
        provenance=list(provenance),
        extra_sections=list(extra_sections),
    )
    (folder / "README.md").write_text(render_card(info), encoding="utf-8")
    logger.info(
        "built %s dataset for %s in %s: %s",
        kind,
        repo_id,
        folder,
        ", ".join(f"{c.name}={c.num_rows}" for c in card_configs),
    )
    return BuiltDataset(folder, kind, repo_id, card_configs)


# ---------------------------------------------------------------------------------------------- per kind


def build_library(
    environments: Sequence[Environment],
    scenarios: Sequence[Scenario],
    folder: Path,
    repo_id: str,
    *,
    kind: str = "environments",
    license: str = "apache-2.0",
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
        folder, kind, repo_id, configs, license=license, provenance=library_provenance(environments, scenarios)
    )


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
    )


def build_sft(
    files: dict[str, list[dict[str, Any]]], folder: Path, repo_id: str, *, license: str = "apache-2.0"
) -> BuiltDataset:
    configs = [generic_config(name, rows) for name, rows in files.items()]
    provenance = [f"`{name}`: {len(rows)} conversations." for name, rows in files.items()]
    formats = sorted({"ShareGPT" if "conversations" in row else "chat" for rows in files.values() for row in rows})
    provenance.append(f"Row formats: {', '.join(formats) or 'none'}.")
    return write_dataset(folder, "sft", repo_id, configs, license=license, provenance=provenance)


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
    return write_dataset(
        folder,
        "leaderboard",
        repo_id,
        [generic_config("leaderboard", rows)],
        license=license,
        provenance=[f"{len(rows)} leaderboard rows aggregated from stored runs."],
        extra_sections=sections,
    )


def build_from_source(
    kind: str, source: str | Path, folder: Path, repo_id: str, *, license: str = "apache-2.0"
) -> BuiltDataset:
    """Read SOURCE as the KIND says and build the Hub-format folder."""
    if kind in ("environments", "scenarios"):
        environments, scenarios = read_library(source)
        return build_library(environments, scenarios, folder, repo_id, kind=kind, license=license)
    path = Path(source)
    if kind == "trajectories":
        run = read_run(path)
        return build_trajectories(run.trajectories, run.manifest, folder, repo_id, license=license)
    if kind == "sft":
        return build_sft(read_sft(path), folder, repo_id, license=license)
    if kind == "leaderboard":
        board = read_leaderboard(path)
        return build_leaderboard(board.rows, board.report, folder, repo_id, license=license)
    raise ValueError(f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}")
