"""Records back from a built Hub-format folder or from the Hub (``org/name[@revision]``).

Hub datasets are fetched with ``huggingface_hub.snapshot_download`` into its cache (so a pinned revision
works offline once cached) and read with pyarrow; the card's YAML ``configs`` says which files belong to
which config.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from harness.hub.build import METADATA_KEY
from harness.hub.projection import GENERIC_ROW, PROJECTIONS, collection_paused, rows_to_records, table_rows_to_generic
from harness.schema import DatasetRef, Environment, Scenario

logger = logging.getLogger(__name__)

HUB_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)(@(?P<revision>.+))?$")
FRONT_MATTER = re.compile(r"^---\s*\n(.*?)\n---\s*(\n|$)", re.DOTALL)
RECORD_TYPE_BY_CONFIG = {
    "environments": "environment",
    "scenarios": "scenario",
    "trajectories": "trajectory",
    "manifest": "run_manifest",
}
LIBRARY_CONFIGS = ("environments", "scenarios")
BATCH_ROWS = 1000


class HubLoadError(ValueError):
    """A folder or Hub dataset that is not what the harness publishes."""


@dataclass
class HubRecords:
    """Every config of a dataset: schema records for record configs, plain dicts for row configs."""

    source: DatasetRef
    configs: dict[str, list[Any]] = field(default_factory=dict)
    record_types: dict[str, str] = field(default_factory=dict)


def parse_hub_spec(spec: str) -> tuple[str, str | None]:
    """``"org/name@rev"`` → ``("org/name", "rev")``; ``"org/name"`` → ``("org/name", None)``."""
    match = HUB_ID.match(spec.strip())
    if match is None:
        raise HubLoadError(f"{spec!r} is not a Hub dataset id (org/name[@revision])")
    return match.group("repo"), match.group("revision")


def is_hub_id(text: str) -> bool:
    return HUB_ID.match(text.strip()) is not None and not Path(text).exists()


def is_hub_folder(path: str | Path) -> bool:
    """A folder with a card whose YAML declares ``configs``."""
    try:
        return bool(read_card_configs(Path(path)))
    except (HubLoadError, OSError):
        return False


def read_card_configs(folder: Path) -> dict[str, list[str]]:
    """Config name → data files (relative paths) from the card's YAML ``configs``."""
    card = folder / "README.md"
    if not card.exists():
        raise HubLoadError(f"{folder} has no README.md card")
    match = FRONT_MATTER.match(card.read_text(encoding="utf-8"))
    if match is None:
        raise HubLoadError(f"{card} has no YAML front matter")
    metadata = yaml.safe_load(match.group(1)) or {}
    configs: dict[str, list[str]] = {}
    for config in metadata.get("configs") or []:
        files: list[str] = []
        data_files = config.get("data_files") or []
        if isinstance(data_files, str):
            data_files = [{"split": "train", "path": data_files}]
        for split in data_files:
            paths = split.get("path") if isinstance(split, dict) else split
            files += [paths] if isinstance(paths, str) else list(paths or [])
        configs[str(config.get("config_name", "default"))] = files
    return configs


def _expand(folder: Path, pattern: str) -> list[Path]:
    if any(ch in pattern for ch in "*?["):
        return sorted(folder.glob(pattern))
    return [folder / pattern]


def read_config_table(folder: Path, files: list[str]) -> tuple[pa.Table, str | None]:
    """The config's rows as one table, and the record type recorded in the Parquet metadata."""
    paths = [path for pattern in files for path in _expand(folder, pattern)]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise HubLoadError(f"data files named by the card are missing: {', '.join(missing)}")
    if not paths:
        raise HubLoadError(f"no data files for a config in {folder}")
    tables = [pq.read_table(path) for path in paths]
    metadata = tables[0].schema.metadata or {}
    record_type = None
    if METADATA_KEY in metadata:
        record_type = json.loads(metadata[METADATA_KEY]).get("record_type")
    table = tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="default")
    return table, record_type


def table_to_records(table: pa.Table, record_type: str) -> list[Any]:
    if record_type != GENERIC_ROW and record_type not in PROJECTIONS:
        raise HubLoadError(f"unknown record type {record_type!r}")
    records: list[Any] = []
    # Batch by batch, so that only one batch of intermediate row dicts is alive at a time.
    with collection_paused():
        for batch in table.to_batches(max_chunksize=BATCH_ROWS):
            rows = batch.to_pylist()
            if record_type == GENERIC_ROW:
                records += table_rows_to_generic(rows)
            else:
                records += rows_to_records(rows, record_type)
    return records


def read_records_folder(
    folder: str | Path, *, configs: tuple[str, ...] | None = None, source: DatasetRef | None = None
) -> HubRecords:
    """All configs (or the named ones present) of a built folder, as records."""
    root = Path(folder)
    declared = read_card_configs(root)
    if not declared:
        raise HubLoadError(f"{root / 'README.md'} declares no configs")
    result = HubRecords(source or DatasetRef(source=str(root)))
    for name, files in declared.items():
        if configs is not None and name not in configs:
            continue
        table, record_type = read_config_table(root, files)
        record_type = record_type or RECORD_TYPE_BY_CONFIG.get(name, GENERIC_ROW)
        result.configs[name] = table_to_records(table, record_type)
        result.record_types[name] = record_type
    return result


def _library_from(records: HubRecords) -> tuple[list[Environment], list[Scenario], DatasetRef]:
    from harness.library import fingerprint

    environments: list[Environment] = records.configs.get("environments", [])
    scenarios: list[Scenario] = records.configs.get("scenarios", [])
    if not environments and not scenarios:
        raise HubLoadError(f"{records.source.source} has neither an environments nor a scenarios config")
    ref = records.source.model_copy(update={"fingerprint": fingerprint({e.id: e for e in environments}, scenarios)})
    return environments, scenarios, ref


def load_records_folder(folder: str | Path) -> tuple[list[Environment], list[Scenario], DatasetRef]:
    """Environments and scenarios of a built folder (what ``harness.library.load_library`` calls)."""
    return _library_from(read_records_folder(folder, configs=LIBRARY_CONFIGS))


def download_snapshot(spec: str, *, allow_patterns: list[str] | None = None) -> tuple[Path, str, str]:
    """Fetch ``org/name[@rev]`` into the Hub cache. Returns (folder, repo id, resolved commit sha).

    The token comes from ``huggingface_hub``'s own lookup (``HF_TOKEN`` or the saved login).
    """
    from huggingface_hub import HfApi, snapshot_download

    repo_id, revision = parse_hub_spec(spec)
    folder = Path(snapshot_download(repo_id, repo_type="dataset", revision=revision, allow_patterns=allow_patterns))
    sha = folder.name
    if not re.fullmatch(r"[0-9a-f]{40}", sha):
        info = HfApi().dataset_info(repo_id, revision=revision)
        sha = info.sha or sha
    logger.info("fetched %s at %s (%s)", repo_id, revision or "main", sha)
    return folder, repo_id, sha


def load_hub_records(spec: str, *, configs: tuple[str, ...] | None = None) -> HubRecords:
    """Every config (or the named ones) of a Hub dataset ``org/name[@rev]``, pinned to its commit sha."""
    patterns = ["README.md"]
    patterns += [f"data/{name}/*" for name in configs] if configs else ["data/*", "data/**"]
    folder, repo_id, sha = download_snapshot(spec, allow_patterns=patterns)
    return read_records_folder(folder, configs=configs, source=DatasetRef(source=repo_id, revision=sha))


def load_library_from_hub(spec: str) -> tuple[list[Environment], list[Scenario], DatasetRef]:
    """Environments and scenarios of ``org/name[@rev]``; the ref's revision is the resolved commit sha."""
    return _library_from(load_hub_records(spec, configs=LIBRARY_CONFIGS))
