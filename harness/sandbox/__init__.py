"""The sandboxed environment runtime: model-written code runs only in worker processes.

Names are loaded lazily so that the worker process (``python -m harness.sandbox.worker``) imports only the
standard library and orjson.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.sandbox.pool import (
        EnvironmentLoadError as EnvironmentLoadError,
    )
    from harness.sandbox.pool import (
        EnvSession as EnvSession,
    )
    from harness.sandbox.pool import (
        SandboxError as SandboxError,
    )
    from harness.sandbox.pool import (
        SandboxLimits as SandboxLimits,
    )
    from harness.sandbox.pool import (
        SandboxPool as SandboxPool,
    )
    from harness.sandbox.static import StaticCheckError as StaticCheckError
    from harness.sandbox.static import check_code as check_code
    from harness.sandbox.static import find_problems as find_problems

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
