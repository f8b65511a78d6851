"""Publishing records to the Hugging Face Hub as Parquet datasets with a card, and loading them back."""

from harness.hub.build import (
    KINDS,
    BuiltDataset,
    build_from_source,
    build_leaderboard,
    build_library,
    build_sft,
    build_trajectories,
)
from harness.hub.card import CardConfig, CardInfo, SourceLink, merge_card, render_card
from harness.hub.load import (
    HubLoadError,
    HubRecords,
    download_snapshot,
    is_hub_folder,
    is_hub_id,
    load_hub_records,
    load_library_from_hub,
    load_records_folder,
    parse_hub_spec,
    read_records_folder,
)
from harness.hub.projection import PROJECTIONS, Projection
from harness.hub.publish import (
    PublishError,
    PublishResult,
    RepoIdError,
    is_retryable,
    publish,
    upload_built,
    validate_repo_id,
)
from harness.hub.rows import (
    RowSchemaError,
    records_to_rows,
    records_to_table,
    rows_to_records,
    table_rows_to_generic,
)
from harness.hub.sources import SourceError

__all__ = [
    "KINDS",
    "PROJECTIONS",
    "BuiltDataset",
    "CardConfig",
    "CardInfo",
    "HubLoadError",
    "HubRecords",
    "Projection",
    "PublishError",
    "PublishResult",
    "RepoIdError",
    "RowSchemaError",
    "SourceError",
    "SourceLink",
    "build_from_source",
    "build_leaderboard",
    "build_library",
    "build_sft",
    "build_trajectories",
    "download_snapshot",
    "is_hub_folder",
    "is_hub_id",
    "is_retryable",
    "load_hub_records",
    "load_library_from_hub",
    "load_records_folder",
    "merge_card",
    "parse_hub_spec",
    "publish",
    "read_records_folder",
    "records_to_rows",
    "records_to_table",
    "render_card",
    "rows_to_records",
    "table_rows_to_generic",
    "upload_built",
    "validate_repo_id",
]
