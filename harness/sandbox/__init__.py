"""The sandboxed environment runtime: model-written code runs only in worker processes.

Names are loaded lazily so that the worker process (``python -m harness.sandbox.worker``) imports only the
standard library and orjson.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.sandbox.pool import (
        EnvironmentLoadError,
        EnvSession,
        SandboxError,
        SandboxLimits,
        SandboxPool,
    )
    from harness.sandbox.static import StaticCheckError, check_code, find_problems

_EXPORTS = {
    "EnvSession": "harness.sandbox.pool",
    "EnvironmentLoadError": "harness.sandbox.pool",
    "SandboxError": "harness.sandbox.pool",
    "SandboxLimits": "harness.sandbox.pool",
    "SandboxPool": "harness.sandbox.pool",
    "StaticCheckError": "harness.sandbox.static",
    "check_code": "harness.sandbox.static",
    "find_problems": "harness.sandbox.static",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'harness.sandbox' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module_name), name)
