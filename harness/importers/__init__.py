"""Translators from other projects' release formats into the schema of record."""

from harness.importers.bfcl import BfclImport, BfclImportError, import_bfcl, verify_import, write_import
from harness.importers.envscaler import ImportReport, import_envscaler

__all__ = [
    "BfclImport",
    "BfclImportError",
    "ImportReport",
    "import_bfcl",
    "import_envscaler",
    "verify_import",
    "write_import",
]
