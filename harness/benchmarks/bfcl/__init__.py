"""BFCL multi-turn (the ``bfcl-eval`` wheel): its categories imported as libraries with scripted turns, scored as its
checker scores them, and exported in its result-file format. Names load lazily: the registry reads only
:mod:`harness.benchmarks.bfcl.benchmark`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.benchmarks.bfcl.benchmark import BENCHMARK as BENCHMARK
    from harness.benchmarks.bfcl.checker import score_turns as score_turns
    from harness.benchmarks.bfcl.export import BfclExport as BfclExport
    from harness.benchmarks.bfcl.export import export_run as export_run
    from harness.benchmarks.bfcl.importer import BfclImport as BfclImport
    from harness.benchmarks.bfcl.importer import BfclImportError as BfclImportError
    from harness.benchmarks.bfcl.importer import import_bfcl as import_bfcl
    from harness.benchmarks.bfcl.importer import verify_import as verify_import
    from harness.benchmarks.bfcl.importer import write_import as write_import

_EXPORTS = {
    "BENCHMARK": "harness.benchmarks.bfcl.benchmark",
    "BfclExport": "harness.benchmarks.bfcl.export",
    "BfclImport": "harness.benchmarks.bfcl.importer",
    "BfclImportError": "harness.benchmarks.bfcl.importer",
    "export_run": "harness.benchmarks.bfcl.export",
    "import_bfcl": "harness.benchmarks.bfcl.importer",
    "score_turns": "harness.benchmarks.bfcl.checker",
    "verify_import": "harness.benchmarks.bfcl.importer",
    "write_import": "harness.benchmarks.bfcl.importer",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'harness.benchmarks.bfcl' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module_name), name)
