"""Reading files that come from someone else: a downloaded source, a wheel, a run folder.

One reader (:class:`SourceTree`) for all of them: paths stay inside their root, symlinks are refused with their
path, sizes are bounded, and JSON is decoded under a budget of bytes, values and nesting."""

from harness.files.budget import (
    DEFAULT_BUDGET,
    RUN_FOLDER_BUDGET,
    ReadBudget,
    UnsafeFile,
    count_values,
    decode_json,
)
from harness.files.git import checkout_commit, require_commit, require_ref
from harness.files.tree import FILE, FOLDER, OTHER, SYMLINK, SourceTree, bounded_lines, decode_lines, require_relative

__all__ = [
    "DEFAULT_BUDGET",
    "FILE",
    "FOLDER",
    "OTHER",
    "RUN_FOLDER_BUDGET",
    "SYMLINK",
    "ReadBudget",
    "SourceTree",
    "UnsafeFile",
    "bounded_lines",
    "checkout_commit",
    "count_values",
    "decode_json",
    "decode_lines",
    "require_commit",
    "require_ref",
    "require_relative",
]
