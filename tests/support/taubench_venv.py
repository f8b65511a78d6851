"""A virtual environment for τ-bench's own code (sierra-research/tau-bench is not on PyPI): the packages its
``Env``, user simulator and tool-calling agent import (``litellm``, ``pydantic``) from PyPI, built once and cached.
A checkout goes on ``PYTHONPATH`` when it runs, so its ``calculate_reward`` scores our exports."""

from __future__ import annotations

import json
import sys

from tests.support.cached_venv import CachedVenv, cached_venv

TAUBENCH_REQUIREMENTS = ["litellm==1.79.3", "pydantic==2.14.4"]


def taubench_venv() -> CachedVenv:
    """The cached venv (its name follows the pins and the interpreter's version), built when missing."""
    version = "".join(str(part) for part in sys.version_info[:2])
    return cached_venv(f"taubench-litellm-1.79.3-py{version}", [TAUBENCH_REQUIREMENTS])


if __name__ == "__main__":
    venv = taubench_venv()
    print(json.dumps({"root": str(venv.root), "build_seconds": venv.build_seconds, "bytes": venv.size_bytes()}))
