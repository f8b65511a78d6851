"""Pipelines that make environments and scenarios, with their prompts as versioned template files."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from synth.pipeline import SynthEnvsConfig as SynthEnvsConfig
    from synth.pipeline import SynthEnvsResult as SynthEnvsResult
    from synth.pipeline import synthesize_environments as synthesize_environments

_EXPORTS = {
    "SynthEnvsConfig": "synth.pipeline",
    "SynthEnvsResult": "synth.pipeline",
    "synthesize_environments": "synth.pipeline",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'synth' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module_name), name)
