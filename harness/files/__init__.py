"""Reading files that come from someone else: a downloaded source, a wheel, a run folder.

One reader (:class:`SourceTree`) for all of them: paths stay inside their root, symlinks are refused with their
path, sizes are bounded, and JSON is decoded under a budget of bytes, values and nesting."""

from harness.files.budget import (
    DEFAULT_BUDGET,
    LICENSE_TEXT_BYTES,
    RELEASE_BUDGET,
    RUN_FOLDER_BUDGET,
    SOURCE_TEXT_BYTES,
    JsonAllowance,
    ReadBudget,
    UnsafeFile,
    count_values,
    decode_json,
)
from harness.files.git import checkout_commit, require_commit, require_ref
from harness.files.python import literal_message_contents, module_file, parse_python, require_module_name
from harness.files.tree import (
    FILE,
    FOLDER,
    OTHER,
    SYMLINK,
    SourceTree,
    bounded_lines,
    decode_lines,
    read_json_stream,
    read_named_json,
    require_relative,
)
from harness.files.wheel import METADATA_BYTES, dist_info_metadata, metadata_field, require_version

__all__ = [
    "DEFAULT_BUDGET",
    "FILE",
    "FOLDER",
    "LICENSE_TEXT_BYTES",
    "METADATA_BYTES",
    "OTHER",
    "RELEASE_BUDGET",
    "RUN_FOLDER_BUDGET",
    "SOURCE_TEXT_BYTES",
    "SYMLINK",
    "JsonAllowance",
    "ReadBudget",
    "SourceTree",
    "UnsafeFile",
    "bounded_lines",
    "checkout_commit",
    "count_values",
    "decode_json",
    "decode_lines",
    "dist_info_metadata",
    "literal_message_contents",
    "metadata_field",
    "module_file",
    "parse_python",
    "read_json_stream",
    "read_named_json",
    "require_commit",
    "require_module_name",
    "require_ref",
    "require_relative",
    "require_version",
]
