"""EnvScaler (RUC-NLPIR/EnvScaler): its release format imported as ordinary libraries, and its runtime as the
``envscaler`` episode rules. Names load lazily: the registry reads only
:mod:`harness.benchmarks.envscaler.benchmark`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.benchmarks.envscaler.benchmark import BENCHMARK as BENCHMARK
    from harness.benchmarks.envscaler.importer import ImportReport as ImportReport
    from harness.benchmarks.envscaler.importer import convert_environment as convert_environment
    from harness.benchmarks.envscaler.importer import convert_scenario as convert_scenario
    from harness.benchmarks.envscaler.importer import import_envscaler as import_envscaler
    from harness.benchmarks.envscaler.prompts import COMPLETION_PHRASE as COMPLETION_PHRASE
    from harness.benchmarks.envscaler.prompts import agent_system_prompt as agent_system_prompt
    from harness.benchmarks.envscaler.rules import ENVSCALER_RULES as ENVSCALER_RULES
    from harness.benchmarks.envscaler.rules import upstream_reward as upstream_reward

_EXPORTS = {
    "BENCHMARK": "harness.benchmarks.envscaler.benchmark",
    "COMPLETION_PHRASE": "harness.benchmarks.envscaler.prompts",
    "ENVSCALER_RULES": "harness.benchmarks.envscaler.rules",
    "ImportReport": "harness.benchmarks.envscaler.importer",
    "agent_system_prompt": "harness.benchmarks.envscaler.prompts",
    "convert_environment": "harness.benchmarks.envscaler.importer",
    "convert_scenario": "harness.benchmarks.envscaler.importer",
    "import_envscaler": "harness.benchmarks.envscaler.importer",
    "upstream_reward": "harness.benchmarks.envscaler.rules",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'harness.benchmarks.envscaler' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module_name), name)
