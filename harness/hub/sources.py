"""Reading what ``harness publish`` publishes from the folders the other stages write."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from harness.records.containment import require_inside
from harness.records.library import HubReaders, read_library_source
from harness.schema import DatasetRef, Environment, RunManifest, Scenario, Trajectory

CONFIG_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class SourceError(ValueError):
    """The SOURCE folder does not hold what the KIND needs."""


@dataclass
class RunRecords:
    trajectories: list[Trajectory]
    manifest: RunManifest | None


@dataclass
class LibrarySource:
    environments: list[Environment]
    scenarios: list[Scenario]
    ref: DatasetRef
    license: str | None
    """The license the source's card declares, when it has a card."""


@dataclass
class SftSource:
    files: dict[str, list[dict[str, Any]]]
    source: DatasetRef | None
    """The environments the teacher ran on, from ``rollouts/manifest.json`` when it is there."""


@dataclass
class LeaderboardRecords:
    rows: list[dict[str, Any]]
    report: str | None


def _jsonl(path: Path) -> list[Any]:
    items = []
    for number, line in enumerate(path.read_bytes().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            items.append(orjson.loads(line))
        except orjson.JSONDecodeError as error:
            raise SourceError(f"{path}:{number}: not JSON ({error})") from error
    return items


def _require_folder(source: Path) -> Path:
    if not source.is_dir():
        raise SourceError(f"{source} is not a folder")
    return source


def read_library(source: str | Path) -> LibrarySource:
    """Environments and scenarios from anything ``harness.library.load_library`` reads (the same reading, with
    this package's readers), with the license of the source's card (a Hub dataset or a Hub-format folder)."""
    from harness.hub.load import card_license, load_library_from_hub, load_records_folder

    library = read_library_source(source, HubReaders(load_records_folder, load_library_from_hub))
    environments = list(library.environments.values())
    return LibrarySource(
        environments,
        list(library.scenarios),
        library.source,
        card_license(library.source) or imported_license(environments),
    )


def imported_license(environments: list[Environment]) -> str | None:
    """The license an importer read from the upstream release (``provenance.details.source_license``), when
    every environment carries the same one."""
    found = {e.provenance.details.get("source_license") for e in environments} - {None}
    return str(found.pop()) if len(found) == 1 else None


def read_run(source: Path) -> RunRecords:
    """``results.jsonl`` (the last line of an episode wins, as after a retry) and ``manifest.json``, read as hostile
    (:func:`harness.results.metrics.load_run`: a symlink is refused, lines and the manifest are held to a budget)."""
    from harness.results.metrics import MANIFEST_FILE, RESULTS_FILE, load_manifest, read_results, run_file_exists

    folder = _require_folder(source)
    try:
        if not run_file_exists(folder, RESULTS_FILE):
            raise SourceError(f"{folder} has no {RESULTS_FILE} (is it a run folder?)")
        trajectories = read_results(folder / RESULTS_FILE)
        manifest = load_manifest(folder) if run_file_exists(folder, MANIFEST_FILE) else None
    except ValueError as error:
        raise SourceError(str(error)) from error
    return RunRecords(trajectories, manifest)


def _is_chat_row(row: Any) -> bool:
    if not isinstance(row, dict):
        return False
    messages = row.get("messages")
    conversations = row.get("conversations")
    return (isinstance(messages, list) and all(isinstance(m, dict) for m in messages)) or (
        isinstance(conversations, list) and all(isinstance(m, dict) for m in conversations)
    )


def read_sft(source: Path) -> SftSource:
    """One list of rows per ``*.jsonl`` file: chat rows (``messages``, ``tools``) or ShareGPT rows."""
    folder = _require_folder(source)
    files = sorted(folder.glob("*.jsonl"))
    if not files:
        raise SourceError(f"{folder} has no *.jsonl files")
    for path in files:
        require_inside(path, folder, "SFT file")  # before any file is read
    configs: dict[str, list[dict[str, Any]]] = {}
    for path in files:
        if not CONFIG_NAME.match(path.stem):
            raise SourceError(f"{path.name}: the file stem is the config name and must match {CONFIG_NAME.pattern}")
        rows = _jsonl(path)
        for number, row in enumerate(rows, start=1):
            if not _is_chat_row(row):
                raise SourceError(
                    f"{path}:{number}: expected a chat row with a `messages` list or a ShareGPT row with a "
                    "`conversations` list"
                )
        configs[path.stem] = rows
    return SftSource(configs, _rollouts_dataset(folder / "rollouts"))


def _rollouts_dataset(rollouts: Path) -> DatasetRef | None:
    """The environments of the teacher's run folder, from its manifest when there is one (read as hostile)."""
    from harness.results.metrics import MANIFEST_FILE, load_manifest, run_file_exists

    try:
        if not run_file_exists(rollouts, MANIFEST_FILE):
            return None
        return load_manifest(rollouts).dataset
    except ValueError as error:
        raise SourceError(f"{rollouts / MANIFEST_FILE}: not a run manifest ({error})") from error


def read_leaderboard(source: Path) -> LeaderboardRecords:
    folder = _require_folder(source)
    path = folder / "leaderboard.jsonl"
    if not path.exists():
        raise SourceError(f"{folder} has no leaderboard.jsonl")
    rows = _jsonl(path)
    for number, row in enumerate(rows, start=1):
        if not isinstance(row, dict):
            raise SourceError(f"{path}:{number}: a leaderboard row must be a JSON object")
    report_path = folder / "report.md"
    report = report_path.read_text(encoding="utf-8") if report_path.exists() else None
    return LeaderboardRecords(rows, report)
