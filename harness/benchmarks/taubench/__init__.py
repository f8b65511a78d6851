"""τ-bench (sierra-research/tau-bench, MIT): import from a checkout, rules, scoring and export. Names load lazily: the
registry reads only :mod:`harness.benchmarks.taubench.benchmark`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.benchmarks.taubench.benchmark import BENCHMARK as BENCHMARK
    from harness.benchmarks.taubench.export import env_run_results as env_run_results
    from harness.benchmarks.taubench.importer import import_taubench as import_taubench
    from harness.benchmarks.taubench.rules import TAUBENCH_REACT_RULES as TAUBENCH_REACT_RULES
    from harness.benchmarks.taubench.rules import TAUBENCH_RULES as TAUBENCH_RULES
    from harness.benchmarks.taubench.rules import TAUBENCH_USER_OPENING as TAUBENCH_USER_OPENING
    from harness.benchmarks.taubench.source import TauBenchSource as TauBenchSource
    from harness.benchmarks.taubench.user_prompt import UserPromptTemplate as UserPromptTemplate

_EXPORTS = {
    "BENCHMARK": "harness.benchmarks.taubench.benchmark",
    "TAUBENCH_REACT_RULES": "harness.benchmarks.taubench.rules",
    "TAUBENCH_RULES": "harness.benchmarks.taubench.rules",
    "TAUBENCH_USER_OPENING": "harness.benchmarks.taubench.rules",
    "TauBenchSource": "harness.benchmarks.taubench.source",
    "UserPromptTemplate": "harness.benchmarks.taubench.user_prompt",
    "env_run_results": "harness.benchmarks.taubench.export",
    "import_taubench": "harness.benchmarks.taubench.importer",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'harness.benchmarks.taubench' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module_name), name)
