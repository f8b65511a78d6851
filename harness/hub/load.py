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

from harness.hub.projection import GENERIC_ROW, METADATA_KEY, PROJECTIONS
from harness.hub.rows import collection_paused, rows_to_records, table_rows_to_generic
from harness.hub.yaml_limits import MAX_YAML_BYTES, YamlRefused, load_yaml
from harness.records.containment import require_inside, require_relative_pattern
from harness.records.fingerprint import fingerprint
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
"""Config names a library usually has; other layouts are recognised by their columns."""
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


def read_card_metadata(folder: Path) -> dict[str, Any]:
    card = folder / "README.md"
    if not card.exists():
        raise HubLoadError(f"{folder} has no README.md card")
    require_inside(card, folder, "the dataset card")
    if card.stat().st_size > MAX_YAML_BYTES * 4:
        raise HubLoadError(f"{card}: the card is {card.stat().st_size:,} bytes; the limit is {MAX_YAML_BYTES * 4:,}")
    match = FRONT_MATTER.match(card.read_text(encoding="utf-8"))
    if match is None:
        raise HubLoadError(f"{card} has no YAML front matter")
    try:
        metadata = load_yaml(match.group(1), str(card)) or {}
    except YamlRefused as error:
        raise HubLoadError(str(error)) from None
    if not isinstance(metadata, dict):
        raise HubLoadError(f"{card}: the YAML front matter is not a mapping")
    return metadata


def configs_of(metadata: dict[str, Any]) -> dict[str, list[str]]:
    """Config name → data file patterns from a card's YAML ``configs`` (every split's files)."""
    configs: dict[str, list[str]] = {}
    for config in metadata.get("configs") or []:
        if not isinstance(config, dict):
            continue
        files: list[str] = []
        data_files = config.get("data_files") or []
        if isinstance(data_files, str):
            data_files = [data_files]
        elif isinstance(data_files, dict):  # {split: path(s)}
            data_files = [{"split": k, "path": v} for k, v in data_files.items()]
        for split in data_files:
            paths = split.get("path") if isinstance(split, dict) else split
            files += [paths] if isinstance(paths, str) else [str(p) for p in paths or []]
        configs[str(config.get("config_name", "default"))] = files
    return configs


def read_card_configs(folder: Path) -> dict[str, list[str]]:
    """Config name → data files (relative paths or glob patterns) from the card's YAML ``configs``."""
    return configs_of(read_card_metadata(folder))


def card_license(ref: DatasetRef) -> str | None:
    """The license a library's card declares: a Hub-format folder's, or the Hub dataset's at its revision."""
    path = Path(ref.source)
    try:
        if path.is_dir():
            folder = path
        elif is_hub_id(ref.source):
            from huggingface_hub import hf_hub_download

            card = hf_hub_download(ref.source, "README.md", repo_type="dataset", revision=ref.revision)
            folder = Path(card).parent
        else:
            return None
        license = read_card_metadata(folder).get("license")
    except Exception:  # no card, or not reachable: the caller falls back to its default
        return None
    if isinstance(license, list):
        license = license[0] if license else None
    return str(license) if license else None


def _expand(folder: Path, pattern: str) -> list[Path]:
    """The files a card's data-file pattern names, each resolving inside the dataset's folder (OutsideLibrary
    otherwise, naming the card and the pattern)."""
    what = f"{folder / 'README.md'}: data_files {pattern!r}"
    require_relative_pattern(pattern, what)
    paths = sorted(folder.glob(pattern)) if any(ch in pattern for ch in "*?[") else [folder / pattern]
    return [require_inside(path, folder, what) for path in paths]


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


def record_type_from_columns(name: str, columns: list[str]) -> str:
    """The record type of a config without our Parquet metadata (``Dataset.push_to_hub`` output, say)."""
    present = set(columns)
    if {"class_name", "code"} <= present:
        return "environment"
    if "task" in present and ({"initial_state", "initial_state_json"} & present):
        return "scenario"
    if {"episode_id", "scenario_id"} <= present and "termination" in present:
        return "trajectory"
    if name in RECORD_TYPE_BY_CONFIG:
        return RECORD_TYPE_BY_CONFIG[name]
    if "messages" in present and "messages_json" not in present:
        return "sft_chat"
    if "conversations" in present:
        return "sft_sharegpt"
    return GENERIC_ROW


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
        record_type = record_type or record_type_from_columns(name, table.column_names)
        try:
            result.configs[name] = table_to_records(table, record_type)
        except ValueError as error:  # pydantic's ValidationError is a ValueError
            first = str(error).strip().splitlines()
            raise HubLoadError(
                f"config {name!r} of {result.source.source} does not hold {record_type} records: " + " ".join(first[:3])
            ) from error
        result.record_types[name] = record_type
    return result


def _library_from(records: HubRecords) -> tuple[list[Environment], list[Scenario], DatasetRef]:
    environments: list[Environment] = []
    scenarios: list[Scenario] = []
    for name, items in records.configs.items():
        if records.record_types.get(name) == "environment":
            environments += items
        elif records.record_types.get(name) == "scenario":
            scenarios += items
    if not environments and not scenarios:
        raise HubLoadError(
            f"{records.source.source} has no config of environments or scenarios "
            f"(configs: {', '.join(records.configs) or 'none'})"
        )
    ref = records.source.model_copy(update={"fingerprint": fingerprint({e.id: e for e in environments}, scenarios)})
    return environments, scenarios, ref


def load_records_folder(folder: str | Path) -> tuple[list[Environment], list[Scenario], DatasetRef]:
    """Environments and scenarios of a Hub-format folder (what ``harness.library.load_library`` calls):
    every config the card declares whose rows are environments or scenarios."""
    return _library_from(read_records_folder(folder))


def _hub_error(spec: str, error: Exception) -> HubLoadError:
    """One line for what went wrong fetching SPEC."""
    from huggingface_hub.errors import (
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    repo_id, revision = parse_hub_spec(spec)
    if isinstance(error, GatedRepoError):
        return HubLoadError(f"{repo_id} is gated: accept its terms on the Hub and log in (HF_TOKEN)")
    if isinstance(error, RevisionNotFoundError):
        return HubLoadError(f"{repo_id} has no revision {revision!r} (a branch, tag or commit sha)")
    if isinstance(error, RepositoryNotFoundError):
        return HubLoadError(f"no dataset {repo_id} on the Hub (or it is private and HF_TOKEN cannot read it)")
    if isinstance(error, LocalEntryNotFoundError):
        return HubLoadError(f"cannot reach the Hub for {spec} and it is not in the local cache")
    text = str(error).strip().splitlines()
    return HubLoadError(f"cannot fetch {spec}: {type(error).__name__}: {text[0] if text else ''}".rstrip(": "))


def download_snapshot(spec: str, *, allow_patterns: list[str] | None = None) -> tuple[Path, str, str]:
    """Fetch ``org/name[@rev]`` into the Hub cache. Returns (folder, repo id, resolved commit sha).

    The token comes from ``huggingface_hub``'s own lookup (``HF_TOKEN`` or the saved login). Errors are one
    ``HubLoadError`` line.
    """
    from huggingface_hub import HfApi, snapshot_download

    repo_id, revision = parse_hub_spec(spec)
    try:
        folder = Path(snapshot_download(repo_id, repo_type="dataset", revision=revision, allow_patterns=allow_patterns))
        sha = folder.name
        if not re.fullmatch(r"[0-9a-f]{40}", sha):
            info = HfApi().dataset_info(repo_id, revision=revision)
            sha = info.sha or sha
    except HubLoadError:
        raise
    except Exception as error:
        raise _hub_error(spec, error) from error
    logger.info("fetched %s at %s (%s)", repo_id, revision or "main", sha)
    return folder, repo_id, sha


def load_hub_records(spec: str, *, configs: tuple[str, ...] | None = None, prefer: tuple[str, ...] = ()) -> HubRecords:
    """Every config (or the named ones) of a Hub dataset ``org/name[@rev]``, pinned to its commit sha.

    The card is fetched first; then only the data files its ``configs`` declare for the wanted configs, so
    any layout works (ours, ``Dataset.push_to_hub(config_name=...)``'s, a hand-written card's). With
    ``prefer``, only those configs are fetched when the card declares any of them.
    """
    folder, repo_id, sha = download_snapshot(spec, allow_patterns=["README.md"])
    pinned = f"{repo_id}@{sha}"
    declared = read_card_configs(folder)
    if not declared:
        raise HubLoadError(f"the card of {spec} declares no configs with data_files")
    if configs is None and any(name in declared for name in prefer):
        configs = tuple(name for name in prefer if name in declared)
    wanted = [files for name, files in declared.items() if configs is None or name in configs]
    patterns = ["README.md", *(pattern for files in wanted for pattern in files)]
    for pattern in patterns:  # before anything else is fetched
        require_relative_pattern(pattern, f"the card of {spec}: data_files {pattern!r}")
    folder, _, _ = download_snapshot(pinned, allow_patterns=patterns)
    return read_records_folder(folder, configs=configs, source=DatasetRef(source=repo_id, revision=sha))


def load_library_from_hub(spec: str) -> tuple[list[Environment], list[Scenario], DatasetRef]:
    """Environments and scenarios of ``org/name[@rev]``; the ref's revision is the resolved commit sha."""
    return _library_from(load_hub_records(spec, prefer=LIBRARY_CONFIGS))
