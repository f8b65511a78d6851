"""ACEBench (chenchen0103/ACEBench): its agent category imported as environments and scenarios, its rules, its
text-call agent (``harness.benchmarks.acebench.agents``, which only the agents layer loads) and its export. Names
load lazily: the registry reads only :mod:`harness.benchmarks.acebench.benchmark`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.benchmarks.acebench.benchmark import BENCHMARK as BENCHMARK
    from harness.benchmarks.acebench.export import export_run as export_run
    from harness.benchmarks.acebench.importer import import_acebench as import_acebench
    from harness.benchmarks.acebench.rules import ACEBENCH_ENVSCALER_RULES as ACEBENCH_ENVSCALER_RULES
    from harness.benchmarks.acebench.rules import ACEBENCH_RULES as ACEBENCH_RULES
    from harness.benchmarks.acebench.rules import ACEBENCH_STOP as ACEBENCH_STOP
    from harness.benchmarks.acebench.rules import ACEBENCH_TEXT_RULES as ACEBENCH_TEXT_RULES
    from harness.benchmarks.acebench.rules import ACEBENCH_USER_OPENING as ACEBENCH_USER_OPENING
    from harness.benchmarks.acebench.source import AceBenchSource as AceBenchSource
    from harness.benchmarks.acebench.user_prompt import AceBenchUserPrompt as AceBenchUserPrompt

_EXPORTS = {
    "ACEBENCH_ENVSCALER_RULES": "harness.benchmarks.acebench.rules",
    "ACEBENCH_RULES": "harness.benchmarks.acebench.rules",
    "ACEBENCH_STOP": "harness.benchmarks.acebench.rules",
    "ACEBENCH_TEXT_RULES": "harness.benchmarks.acebench.rules",
    "ACEBENCH_USER_OPENING": "harness.benchmarks.acebench.rules",
    "AceBenchSource": "harness.benchmarks.acebench.source",
    "AceBenchUserPrompt": "harness.benchmarks.acebench.user_prompt",
    "BENCHMARK": "harness.benchmarks.acebench.benchmark",
    "export_run": "harness.benchmarks.acebench.export",
    "import_acebench": "harness.benchmarks.acebench.importer",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'harness.benchmarks.acebench' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module_name), name)
