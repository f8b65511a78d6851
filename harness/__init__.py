"""The engine: schema of record, model access, sandboxed runtime, scoring, episode loop, runs, Hub client.

The curated surface: the records, ``load_library``, ``RunConfig`` and ``RunOutcome`` (a run is started with
``harness.run.run``: the name ``harness.run`` is the run's package), the gym's ``ToolEnv``, the sandbox and the
scoring helpers. Public names are loaded lazily so that light processes (the sandbox worker) do not import
pydantic or litellm.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "Environment": "harness.schema",
    "Scenario": "harness.schema",
    "Check": "harness.schema",
    "UserProfile": "harness.schema",
    "ReferenceAction": "harness.schema",
    "ToolCall": "harness.schema",
    "Observation": "harness.schema",
    "Trajectory": "harness.schema",
    "RunManifest": "harness.schema",
    "SandboxPool": "harness.sandbox",
    "SandboxLimits": "harness.sandbox",
    "score_final_state": "harness.scoring.checks",
    "EpisodeRules": "harness.rules.profiles",
    "rules_profile": "harness.registry",
    "said_any": "harness.scoring.transcript_checks",
    "told_user": "harness.scoring.transcript_checks",
    "asked_user": "harness.scoring.transcript_checks",
    "Library": "harness.library",
    "load_library": "harness.library",
    "RunConfig": "harness.run",
    "RunOutcome": "harness.run",
    "ToolEnv": "harness.gym",
}

__all__ = ["__version__", *sorted(_EXPORTS)]


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'harness' has no attribute {name!r}")
    return getattr(importlib.import_module(module_name), name)
