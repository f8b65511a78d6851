"""Loading environments and scenarios: the seed layout, a Hub-format folder, or a Hub dataset id.

The library record and the reading of every kind of source are ``harness.records.library``'s; this module adds
the Hub package's readers, imported only when a source needs them (they bring pyarrow and the Hub client)."""

from __future__ import annotations

from pathlib import Path

from harness.records.library import (
    SEED_LIBRARY,
    HubReaders,
    Library,
    LibraryError,
    Records,
    is_seed_layout,
    load_seed_layout,
    read_library_source,
    write_new_library,
    write_seed_layout,
)

__all__ = [
    "SEED_LIBRARY",
    "Library",
    "LibraryError",
    "is_seed_layout",
    "load_library",
    "load_seed_layout",
    "write_new_library",
    "write_seed_layout",
]


def _records_folder(folder: Path) -> Records:
    from harness.hub import load_records_folder

    return load_records_folder(folder)


def _hub_dataset(spec: str) -> Records:
    from harness.hub import load_library_from_hub

    return load_library_from_hub(spec)


HUB_READERS = HubReaders(records_folder=_records_folder, hub_dataset=_hub_dataset)


def load_library(source: str | Path | None = None) -> Library:
    """Environments and scenarios from a folder (seed layout or Hub-format) or a Hub id ``org/name[@rev]``.

    Raises :class:`LibraryError` (one line naming the source) when the source cannot be read at all; records
    that do not load are listed in ``Library.problems``."""
    return read_library_source(source, HUB_READERS)
