"""Translators from other projects' release formats into the schema of record."""

from harness.importers.envscaler import ImportReport, import_envscaler

__all__ = ["ImportReport", "import_envscaler"]
