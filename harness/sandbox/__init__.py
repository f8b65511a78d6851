"""The jail: model-written environment and check code runs only in kernel-confined child processes.

Names are loaded lazily so that the zygote (``harness.sandbox.zygote``) imports only the standard library, orjson
and the confinement bindings. See ``docs/sandbox.md`` for the threat model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.sandbox.errors import EnvironmentFailed as EnvironmentFailed
    from harness.sandbox.errors import EnvironmentLoadError as EnvironmentLoadError
    from harness.sandbox.errors import SandboxError as SandboxError
    from harness.sandbox.errors import WeakSandbox as WeakSandbox
    from harness.sandbox.jail_environment import JailEnvironment as JailEnvironment
    from harness.sandbox.jail_environment import JailEnvironmentUnavailable as JailEnvironmentUnavailable
    from harness.sandbox.limits import SandboxLimits as SandboxLimits
    from harness.sandbox.pool import (
        EnvSession as EnvSession,
    )
    from harness.sandbox.pool import (
        SandboxPool as SandboxPool,
    )
    from harness.sandbox.spec import CodeOrigin as CodeOrigin
    from harness.sandbox.spec import JailSpec as JailSpec
    from harness.sandbox.spec import requires_full_confinement as requires_full_confinement
    from harness.sandbox.static import StaticCheckError as StaticCheckError
    from harness.sandbox.static import check_code as check_code
    from harness.sandbox.static import find_problems as find_problems

_EXPORTS = {
    "EnvSession": "harness.sandbox.pool",
    "EnvironmentFailed": "harness.sandbox.errors",
    "EnvironmentLoadError": "harness.sandbox.errors",
    "SandboxError": "harness.sandbox.errors",
    "SandboxLimits": "harness.sandbox.limits",
    "SandboxPool": "harness.sandbox.pool",
    "WeakSandbox": "harness.sandbox.errors",
    "JailEnvironment": "harness.sandbox.jail_environment",
    "JailEnvironmentUnavailable": "harness.sandbox.jail_environment",
    "CodeOrigin": "harness.sandbox.spec",
    "JailSpec": "harness.sandbox.spec",
    "requires_full_confinement": "harness.sandbox.spec",
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
